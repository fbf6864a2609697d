"""The raw S3 sink's settings: a frozen dataclass, and how the environment sets it.

The variables are ``CONSUMER_RAW_BUCKET``, ``CONSUMER_RAW_PREFIX``, ``CONSUMER_RAW_MAX_BYTES``,
``CONSUMER_RAW_MAX_RECORDS``, ``CONSUMER_RAW_MAX_AGE_SECONDS``, ``CONSUMER_RAW_CONNECT_TIMEOUT_SECONDS`` and
``CONSUMER_RAW_READ_TIMEOUT_SECONDS``. The unprefixed ``RAW_MAX_BYTES``,
``RAW_MAX_RECORDS`` and ``RAW_MAX_AGE_SECONDS`` of earlier releases still work as deprecated aliases (a
warning once per process); the new name wins when both are set.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from consumer.errors import ConfigError
from consumer.logs import log_event
from consumer.settings.checks import check_types

__all__ = [
    "DEPRECATED_RAW_VARIABLES",
    "MAX_BYTES_LIMIT",
    "RAW_SINK_VARIABLES",
    "TIMEOUT_LIMIT",
    "RawSinkConfig",
    "raw_sink_config_from_env",
    "with_overrides",
]

logger = logging.getLogger(__name__)

_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
# S3's "safe characters" for keys (and '=' for key=value folders): the others need URL-encoding or are
# mangled by tools, and a lake path (s3://bucket/prefix/...) must read back as written.
_PREFIX = re.compile(r"^[A-Za-z0-9!_.*'()=/-]*$")
_PREFIX_MAX = 512  # of the 1,024 bytes of a key; the rest is the partition and the object name (~220)
#: A PUT takes at most 5 GiB, and each shard holds up to this much per arrival hour in memory.
MAX_BYTES_LIMIT = 1024 * 1024 * 1024

#: The variable that sets each field.
RAW_SINK_VARIABLES: dict[str, str] = {
    "bucket": "CONSUMER_RAW_BUCKET",
    "prefix": "CONSUMER_RAW_PREFIX",
    "max_bytes": "CONSUMER_RAW_MAX_BYTES",
    "max_records": "CONSUMER_RAW_MAX_RECORDS",
    "max_age": "CONSUMER_RAW_MAX_AGE_SECONDS",
    "connect_timeout": "CONSUMER_RAW_CONNECT_TIMEOUT_SECONDS",
    "read_timeout": "CONSUMER_RAW_READ_TIMEOUT_SECONDS",
}
_SECONDS = ("max_age", "connect_timeout", "read_timeout")  # the fields read as a number of seconds
#: A PUT's timeouts are at most this: the PUT holds its shard's lane (and so the shard) while it waits.
TIMEOUT_LIMIT = 60.0
#: Deprecated name -> its replacement (read when the replacement is unset).
DEPRECATED_RAW_VARIABLES: dict[str, str] = {
    "RAW_MAX_BYTES": "CONSUMER_RAW_MAX_BYTES",
    "RAW_MAX_RECORDS": "CONSUMER_RAW_MAX_RECORDS",
    "RAW_MAX_AGE_SECONDS": "CONSUMER_RAW_MAX_AGE_SECONDS",
}
_ALIAS_OF = {new: old for old, new in DEPRECATED_RAW_VARIABLES.items()}

_warned: set[str] = set()
_warned_lock = threading.Lock()


def _whole(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(name, f"must be a whole number > 0, got {value!r}")


def _seconds(name: str, value: float, limit: float | None = None) -> None:
    if isinstance(value, bool) or not (isinstance(value, int | float) and value > 0 and math.isfinite(value)):
        raise ConfigError(name, f"must be a number of seconds > 0, got {value!r}")
    if limit is not None and value > limit:
        raise ConfigError(
            name,
            f"must be at most {limit:g} seconds (a PUT holds its shard while it waits; a failed one is "
            f"tried again), got {value!r}",
        )


def _check_prefix(prefix: str) -> None:
    """A key prefix that S3 and the lake's readers keep as written: safe characters, no empty, ``.`` or
    ``..`` folder (``a//b``, ``raw/../x``: path tools collapse them, and the compaction reads another place)."""
    if not _PREFIX.match(prefix):
        bad = sorted({c for c in prefix if not _PREFIX.match(c)})
        raise ConfigError(
            "raw_sink.prefix",
            f"{prefix!r} has characters an S3 key prefix should not ({''.join(bad)!r}); use letters, digits, "
            "'/' and !_.*'()=-",
        )
    if len(prefix.encode()) > _PREFIX_MAX:
        raise ConfigError(
            "raw_sink.prefix", f"must be at most {_PREFIX_MAX} bytes, got {len(prefix.encode())}"
        )
    if any(part in ("", ".", "..") for part in prefix.strip("/").split("/")) and prefix.strip("/"):
        raise ConfigError(
            "raw_sink.prefix",
            f"{prefix!r} has an empty, '.' or '..' folder; give folders separated by one '/'",
        )


@dataclass(frozen=True)
class RawSinkConfig:
    """Where the raw sink writes and when a buffer becomes an object: at ``max_bytes`` (5 MiB) or
    ``max_records`` (10,000), or when its oldest record is ``max_age`` seconds old (60).

    ``connect_timeout`` (2 s) and ``read_timeout`` (5 s: each wait for S3 to take more of the body or to
    answer) bound one PUT of the sink's own S3 client, which makes one attempt per PUT: a PUT that times out
    is a failed write, tried again after the sink's backoff, instead of holding the shard's lane for botocore's
    retries (three attempts of 10 s before)."""

    bucket: str
    prefix: str = "raw"
    max_bytes: int = 5 * 1024 * 1024
    max_records: int = 10_000
    max_age: float = 60.0
    connect_timeout: float = 2.0
    read_timeout: float = 5.0

    def __post_init__(self) -> None:
        check_types("raw_sink", self)
        name = self.bucket.strip()
        if not name:
            raise ConfigError("raw_sink.bucket", "the raw sink needs a bucket name")
        if name.startswith("s3://") or "/" in name:
            raise ConfigError(
                "raw_sink.bucket",
                f"give the bucket name only, got {name!r} (the key prefix goes in raw_sink.prefix)",
            )
        if not _BUCKET.match(name) or ".." in name:
            raise ConfigError(
                "raw_sink.bucket", f"{name!r} is not an S3 bucket name (3-63 characters: a-z, 0-9, '.', '-')"
            )
        object.__setattr__(self, "bucket", name)
        _check_prefix(self.prefix)
        _whole("raw_sink.max_bytes", self.max_bytes)
        if self.max_bytes > MAX_BYTES_LIMIT:
            raise ConfigError(
                "raw_sink.max_bytes",
                f"must be at most {MAX_BYTES_LIMIT} (1 GiB: a buffer is held in memory per shard and hour, "
                f"and one S3 PUT takes at most 5 GiB), got {self.max_bytes}",
            )
        _whole("raw_sink.max_records", self.max_records)
        _seconds("raw_sink.max_age", self.max_age)
        _seconds("raw_sink.connect_timeout", self.connect_timeout, TIMEOUT_LIMIT)
        _seconds("raw_sink.read_timeout", self.read_timeout, TIMEOUT_LIMIT)


def _warn_deprecated(old: str, new: str, *, ignored: bool) -> None:
    with _warned_lock:
        if old in _warned:
            return
        _warned.add(old)
    log_event(
        logger,
        "deprecated_setting",
        logging.WARNING,
        variable=old,
        use=new,
        hint=f"{old} is deprecated: set {new} instead"
        + (f" ({old} is ignored: {new} is set)" if ignored else ""),
    )


def _read(env: Mapping[str, str], field: str) -> tuple[str | None, str]:
    """The raw text for ``field`` (None when unset) and the variable it came from."""
    name = RAW_SINK_VARIABLES[field]
    value = env.get(name)
    old = _ALIAS_OF.get(name)
    old_value = env.get(old, "").strip() if old else ""
    if old and old_value:
        _warn_deprecated(old, name, ignored=bool(value and value.strip()))
        if not (value and value.strip()):
            return old_value, old
    return value, name


def _number(raw: str, name: str, kind: type[int] | type[float]) -> Any:
    try:
        return kind(raw)
    except ValueError:
        what = "a whole number" if kind is int else "a number of seconds"
        raise ConfigError(name, f"must be {what} > 0, got {raw!r}") from None


def raw_sink_config_from_env(env: Mapping[str, str], **given: Any) -> RawSinkConfig:
    """The raw sink's settings from ``env`` (see the module); values in ``given`` (``bucket=...``) win.

    Every error names what to change: the variable it was read from, or the field when it was given."""
    values: dict[str, Any] = {}
    source: dict[str, str] = {}
    for field in RAW_SINK_VARIABLES:
        if given.get(field) is not None:
            values[field], source[field] = given[field], f"raw_sink.{field}"
            continue
        raw, name = _read(env, field)
        source[field] = name
        if field == "prefix":
            if raw is not None:
                values[field] = raw
        elif field == "bucket":
            values[field] = (raw or "").strip()
        elif raw is not None and raw.strip():
            values[field] = _number(raw.strip(), name, float if field in _SECONDS else int)
    try:
        return RawSinkConfig(**values)
    except ConfigError as exc:
        field = exc.field.removeprefix("raw_sink.")
        message = str(exc)[len(exc.field) + 2 :]
        for other, name in RAW_SINK_VARIABLES.items():
            if source.get(other, "").startswith("raw_sink."):
                continue
            message = message.replace(f"raw_sink.{other}", name)
        raise ConfigError(source.get(field, exc.field), message) from None


def with_overrides(config: RawSinkConfig, **given: Any) -> RawSinkConfig:
    """``config`` with the values in ``given`` that are not None (validated again)."""
    changes = {k: v for k, v in given.items() if v is not None}
    return dataclasses.replace(config, **changes) if changes else config
