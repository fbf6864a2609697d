"""The checks the settings dataclasses share; each error names the setting."""

from __future__ import annotations

import math

from consumer.errors import ConfigError

__all__ = ["choice", "positive"]


def positive(name: str, value: float) -> None:
    """``value`` is a finite number > 0, else a :class:`ConfigError` naming ``name``."""
    if not (value > 0 and math.isfinite(value)):
        raise ConfigError(name, f"must be a finite number > 0, got {value!r}")


def choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    """``value`` is one of ``allowed``, else a :class:`ConfigError` naming ``name`` and the allowed values."""
    if value not in allowed:
        raise ConfigError(name, f"must be one of {', '.join(allowed)}; got {value!r}")
