"""The typed, frozen settings, one dataclass per concern; :mod:`consumer.config` gathers them and reads them
from the environment (import them from there)."""
