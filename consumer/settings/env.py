"""Reading one value from the environment: numbers and times, each error naming the variable."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime

from consumer.errors import ConfigError

__all__ = ["env_float", "env_int", "env_optional_float", "parse_timestamp"]


def env_float(
    env: Mapping[str, str], key: str, default: float, *, what: str = "a number of seconds"
) -> float:
    """A finite number from ``env[key]`` (``default`` when unset or empty); ``what`` says in the error what
    the number counts (``a number of seconds`` unless the setting is, e.g., a rate)."""
    value = env_optional_float(env, key, what=what)
    return default if value is None else value


def env_optional_float(
    env: Mapping[str, str], key: str, *, what: str = "a number of seconds"
) -> float | None:
    """A finite number from ``env[key]``, or None when it is unset or empty (a set ``0`` is 0, not unset)."""
    raw = env.get(key)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(key, f"must be {what}, got {raw!r}") from None
    if not math.isfinite(value):
        raise ConfigError(key, f"must be a finite number, got {raw!r}")
    return value


def env_int(env: Mapping[str, str], key: str, default: int) -> int:
    """A whole number from ``env[key]`` (``default`` when unset or empty)."""
    raw = env.get(key)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(key, f"must be an integer, got {raw!r}") from None


def parse_timestamp(raw: str, name: str) -> datetime:
    """An ISO-8601 time with a time zone; ``name`` (variable or flag) is named in the error."""
    try:
        value = datetime.fromisoformat(raw.strip())
    except ValueError:
        raise ConfigError(name, f"must be ISO-8601, e.g. 2024-05-01T12:00:00Z; got {raw!r}") from None
    if value.tzinfo is None or value.utcoffset() is None:
        raise ConfigError(
            name, f"{raw!r} has no time zone; add one, e.g. {raw.strip()}Z (UTC) or {raw.strip()}+02:00"
        )
    return value
