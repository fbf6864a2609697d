"""The checks the settings dataclasses share; each error names the setting."""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from datetime import datetime
from typing import Any, Literal

from consumer.errors import ConfigError

__all__ = ["check_types", "choice", "non_negative", "positive"]


def check_types(section: str, settings: Any) -> None:
    """Each field of the settings dataclass ``settings`` holds a value of its annotated type, else a
    :class:`ConfigError` naming ``section.field``: a typed config built in code gets ``"10"`` or ``True`` for a
    number as one clear error, not a ``TypeError`` from a comparison or a flag read as 1. An int is a float."""
    hints = _hints(type(settings))
    for f in dataclasses.fields(settings):
        value, want = getattr(settings, f.name), hints[f.name]
        if typing.get_origin(want) is Literal:
            choice(f"{section}.{f.name}", value, typing.get_args(want))
        elif not _fits(value, want):
            raise ConfigError(
                f"{section}.{f.name}", f"must be {_describe(want)}, got {type(value).__name__} {value!r}"
            )


_HINTS: dict[type, dict[str, Any]] = {}  # each settings class's annotations, resolved once


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


# What a value of each plain annotated type must be (a bool is an int to Python, never a number here).
_PLAIN: dict[Any, Any] = {
    type(None): lambda v: v is None,
    bool: lambda v: isinstance(v, bool),
    float: lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    int: lambda v: isinstance(v, int) and not isinstance(v, bool),
    str: lambda v: isinstance(v, str),
    datetime: lambda v: isinstance(v, datetime),
}


def _fits(value: object, want: Any) -> bool:
    origin = typing.get_origin(want)
    if origin is Literal:
        return value in typing.get_args(want)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, arm) for arm in typing.get_args(want))
    check = _PLAIN.get(want)
    return True if check is None else bool(check(value))  # a type these settings do not use: not checked


def _describe(want: Any) -> str:
    origin = typing.get_origin(want)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(want))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(arm) for arm in typing.get_args(want))
    if want is type(None):
        return "None"
    return {float: "a number", int: "an integer", str: "a string", bool: "True or False"}.get(
        want, getattr(want, "__name__", str(want))
    )


def positive(name: str, value: float) -> None:
    """``value`` is a finite number > 0, else a :class:`ConfigError` naming ``name``."""
    if not (value > 0 and math.isfinite(value)):
        raise ConfigError(name, f"must be a finite number > 0, got {value!r}")


def non_negative(name: str, value: float) -> None:
    """``value`` is a finite number >= 0 (0 allowed), else a :class:`ConfigError` naming ``name``."""
    if not (value >= 0 and math.isfinite(value)):
        raise ConfigError(name, f"must be a finite number >= 0, got {value!r}")


def choice(name: str, value: object, allowed: tuple[object, ...]) -> None:
    """``value`` is one of ``allowed``, else a :class:`ConfigError` naming ``name`` and the allowed values."""
    if value not in allowed:
        raise ConfigError(name, f"must be one of {', '.join(map(str, allowed))}; got {value!r}")
