"""Developer tooling: local AWS emulators, demo and helpers (not part of the shipped package)."""
