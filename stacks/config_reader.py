"""Typed reads of one ``cdk.json`` settings object, and the error every setting check raises.

Nothing here imports aws_cdk. Every error names the setting it rejects, as a dotted path such as
``environments.prod.scaling.max_tasks``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, cast

__all__ = ["ConfigError", "Section"]


class ConfigError(ValueError):
    """A per-environment setting is missing, unknown or out of range; ``setting`` is its dotted path."""

    def __init__(self, setting: str, problem: str) -> None:
        super().__init__(f"{setting}: {problem}")
        self.setting = setting


class Section:
    """Typed reads from one JSON object, with errors that name the setting; rejects unknown keys."""

    def __init__(self, path: str, raw: object) -> None:
        if not isinstance(raw, Mapping):
            raise ConfigError(path, f"must be an object, got {type(raw).__name__}")
        self.path = path
        self._raw = cast(Mapping[str, Any], raw)
        self._read: set[str] = set()

    def get(self, key: str) -> Any:
        """The value of a required setting (an error naming it when it is absent)."""
        if key not in self._raw:
            raise ConfigError(f"{self.path}.{key}", "is required")
        self._read.add(key)
        return self._raw[key]

    def optional(self, key: str) -> Any:
        """The value of an optional setting, or None when it is null or absent."""
        self._read.add(key)
        return self._raw.get(key)

    def section(self, key: str) -> Section:
        return Section(f"{self.path}.{key}", self.get(key))

    def optional_text(self, key: str, pattern: re.Pattern[str], hint: str) -> str | None:
        """A string matching ``pattern``, or null or absent (CDK drops null context values); ``hint`` says what a
        good value looks like."""
        self._read.add(key)
        value = self._raw.get(key)
        if value is None:
            return None
        if not isinstance(value, str) or not pattern.match(value):
            raise ConfigError(f"{self.path}.{key}", f"must be {hint} or null, got {value!r}")
        return value

    def text(self, key: str, pattern: re.Pattern[str] | None = None) -> str:
        value = self.get(key)
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{self.path}.{key}", f"must be a non-empty string, got {value!r}")
        if pattern is not None and not pattern.match(value):
            raise ConfigError(f"{self.path}.{key}", f"{value!r} does not match {pattern.pattern}")
        return value

    def choice(self, key: str, allowed: tuple[str, ...]) -> str:
        value = self.get(key)
        if value not in allowed:
            raise ConfigError(f"{self.path}.{key}", f"must be one of {', '.join(allowed)}; got {value!r}")
        return cast(str, value)

    def flag(self, key: str) -> bool:
        value = self.get(key)
        if not isinstance(value, bool):
            raise ConfigError(f"{self.path}.{key}", f"must be true or false, got {value!r}")
        return value

    def integer(self, key: str, minimum: int, maximum: int | None = None) -> int:
        value = self.get(key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{self.path}.{key}", f"must be an integer, got {value!r}")
        return cast(int, self._in_range(key, value, minimum, maximum))

    def number(self, key: str, minimum: float, maximum: float | None = None) -> float:
        value = self.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{self.path}.{key}", f"must be a number, got {value!r}")
        return float(self._in_range(key, value, minimum, maximum))

    def _in_range(self, key: str, value: float, minimum: float, maximum: float | None) -> float:
        if value < minimum:
            raise ConfigError(f"{self.path}.{key}", f"must be >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise ConfigError(f"{self.path}.{key}", f"must be <= {maximum}, got {value}")
        return value

    def done(self) -> None:
        """Reject keys nobody read: a misspelt setting must not be silently ignored."""
        unknown = sorted(set(self._raw) - self._read)
        if unknown:
            raise ConfigError(f"{self.path}.{unknown[0]}", "is not a known setting")
