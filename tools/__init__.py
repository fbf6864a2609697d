"""Developer tooling: local AWS emulators, the demo, network fault tools, and what the benchmarks and the tests
share (the fleet runner and its analysis, the coordination simulator, the raw-data generator). Not part of the
shipped package; never imports bench/ (tests/unit/test_import_direction.py)."""
