"""AWS's service quotas as the emulators enforce them: one typed, frozen setting per limit (docs/emulators.md).

Every limit is on by default at the value AWS documents; each can be changed or switched off:

* environment: ``EMULATORS_LIMITS=off`` switches them all off; ``EMULATORS_LIMIT_<NAME>=<value>`` sets one
  (``<NAME>`` is the field name in upper case, e.g. ``EMULATORS_LIMIT_GET_RECORDS_PER_SHARD=10``), and
  ``off`` (or ``none``) as the value switches that one off;
* code: ``Emulators(limits=Limits(get_records_per_shard=10))``, ``Emulators(limits="off")`` or
  ``Emulators(limits={"iterator_ttl_seconds": 2})`` (a mapping is applied over the environment's settings).

A field set to ``None`` is not enforced. Rates are per second unless the name says otherwise.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Final

from tools.emulators.settings import EmulatorError

logger = logging.getLogger(__name__)

MIB: Final = 1024 * 1024
ENV_ALL: Final = "EMULATORS_LIMITS"
ENV_PREFIX: Final = "EMULATORS_LIMIT_"
_OFF_WORDS: Final = frozenset({"off", "none", "false", "no", "0"})
_ON_WORDS: Final = frozenset({"on", "true", "yes", "1", ""})


class LimitsError(EmulatorError):
    """A limit setting that cannot be used; the message names the setting."""


@dataclass(frozen=True)
class Limits:
    """The quotas the emulators enforce; ``None`` switches one off, ``enabled=False`` all of them."""

    enabled: bool = True
    # -- Kinesis, per shard
    #: GetRecords calls per second per shard (ProvisionedThroughputExceededException).
    get_records_per_shard: float | None = 5
    #: GetRecords bytes per second per shard, charged after each call (a big read refuses the next ones).
    get_records_bytes_per_shard: float | None = 2 * MIB
    #: Bytes a shard may read ahead of its rate; 0 = AWS's "10 MiB read -> next 5 s throttled".
    get_records_burst_bytes: float = 0
    #: GetShardIterator calls per second per shard (ProvisionedThroughputExceededException).
    get_shard_iterator_per_shard: float | None = 5
    #: Seconds a shard iterator stays valid after it was issued (ExpiredIteratorException).
    iterator_ttl_seconds: float | None = 300
    #: Records written per second per shard, PutRecord and PutRecords together.
    put_records_per_shard: float | None = 1000
    #: Bytes (data + partition key) written per second per shard.
    put_bytes_per_shard: float | None = 1 * MIB
    # -- Kinesis, per stream / account / consumer (LimitExceededException)
    list_shards_per_stream: float | None = 1000
    describe_stream_summary_per_account: float | None = 20
    describe_stream_per_account: float | None = 10
    list_stream_consumers_per_stream: float | None = 5
    register_stream_consumer_per_account: float | None = 5
    describe_stream_consumer_per_stream: float | None = 20
    deregister_stream_consumer_per_stream: float | None = 5
    #: SubscribeToShard calls per second per consumer and shard.
    subscribe_to_shard_per_consumer_shard: float | None = 1
    #: Seconds after which a SubscribeToShard event stream ends (the client subscribes again).
    subscription_seconds: float | None = 300
    # -- DynamoDB
    #: Read / write capacity units per second per partition key value, in both capacity modes.
    dynamodb_partition_rcu: float | None = 3000
    dynamodb_partition_wcu: float | None = 1000
    #: Per-table read / write request units per second of an on-demand table (account quota per table).
    dynamodb_on_demand_table_rru: float | None = 40_000
    dynamodb_on_demand_table_wru: float | None = 40_000
    #: Seconds of unused provisioned capacity a provisioned table may burst with (its own RCU/WCU rate).
    dynamodb_burst_seconds: float = 300
    #: Length of the window that call-count limits are counted over, in seconds.
    window_seconds: float = 1.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "enabled":
                if not isinstance(value, bool):
                    raise LimitsError(f"Limits.enabled: expected True or False, got {value!r}")
                continue
            if value is None and _optional(f):
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
                raise LimitsError(f"Limits.{f.name}: expected a number{_or_none(f)}, got {value!r}")
            if value < 0 or (value == 0 and f.name not in _ZERO_OK):
                raise LimitsError(f"Limits.{f.name}: must be {'>= 0' if f.name in _ZERO_OK else '> 0'}")

    # -- construction

    @classmethod
    def off(cls) -> Limits:
        """No limit enforced (the emulators as they come)."""
        return cls(enabled=False)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Limits:
        """The defaults, changed by ``EMULATORS_LIMITS`` and ``EMULATORS_LIMIT_<NAME>`` variables."""
        env = os.environ if environ is None else environ
        known = {f.name for f in fields(cls)} - {"enabled"}
        overrides: dict[str, Any] = {}
        switch = env.get(ENV_ALL)
        if switch is not None:
            overrides["enabled"] = _parse_switch(ENV_ALL, switch)
        for key, raw in env.items():
            if not key.startswith(ENV_PREFIX):
                continue
            name = key[len(ENV_PREFIX) :].lower()
            if name not in known:
                raise LimitsError(f"{key}: no such limit (known: {', '.join(sorted(known))})")
            overrides[name] = _parse_value(key, cls._field(name), raw)
        return cls(**overrides)

    @classmethod
    def resolve(cls, value: Limits | Mapping[str, Any] | bool | str | None) -> Limits:
        """``Emulators(limits=...)``: None = from the environment; True/"on" = the environment's settings
        switched on; False/"off" = none; a mapping = the environment's settings with these fields replaced."""
        if isinstance(value, Limits):
            return value
        base = cls.from_env()
        if value is None:
            return base
        if isinstance(value, bool):
            return dataclasses.replace(base, enabled=value)
        if isinstance(value, str):
            return dataclasses.replace(base, enabled=_parse_switch("limits", value))
        return base.replace(**value)

    def replace(self, **changes: Any) -> Limits:
        """A copy with some fields changed; string values are parsed as in the environment ("off", "5")."""
        parsed: dict[str, Any] = {}
        for name, value in changes.items():
            f = self._field(name, where=f"Limits.{name}")
            parsed[name] = _parse_value(f"Limits.{name}", f, value) if isinstance(value, str) else value
        return dataclasses.replace(self, **parsed)

    # -- serialization (children get their settings as one JSON document)

    def to_json(self) -> str:
        """All fields as one JSON object."""
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Limits:
        """The inverse of :meth:`to_json`."""
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise LimitsError(f"limits JSON: {exc}") from exc
        return cls(**data)

    def describe(self) -> dict[str, Any]:
        """``{"enabled": ..., name: value or "off"}`` for printing (``python -m tools.emulators``)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = "off" if value is None else value
        return out

    def active(self, name: str) -> float | None:
        """The value of limit ``name``, or None when it (or every limit) is switched off."""
        if not self.enabled:
            return None
        value: float | None = getattr(self, name)
        return value

    @classmethod
    def _field(cls, name: str, where: str | None = None) -> dataclasses.Field[Any]:
        for f in fields(cls):
            if f.name == name and name != "enabled":
                return f
        raise LimitsError(f"{where or name}: no such limit")


_ZERO_OK: Final = frozenset({"get_records_burst_bytes", "dynamodb_burst_seconds"})


def _optional(f: dataclasses.Field[Any]) -> bool:
    return "None" in str(f.type)


def _or_none(f: dataclasses.Field[Any]) -> str:
    return " or None (off)" if _optional(f) else ""


def _parse_switch(setting: str, raw: str) -> bool:
    word = raw.strip().lower()
    if word in _OFF_WORDS:
        return False
    if word in _ON_WORDS:
        return True
    raise LimitsError(f"{setting}: expected on or off, got {raw!r}")


def _parse_value(setting: str, f: dataclasses.Field[Any], raw: str) -> float | None:
    word = raw.strip().lower()
    if word in {"off", "none"}:
        if not _optional(f):
            raise LimitsError(f"{setting}: cannot be switched off, give a number")
        return None
    try:
        return float(word)
    except ValueError:
        raise LimitsError(f"{setting}: expected a number{_or_none(f)}, got {raw!r}") from None
