"""AWS's service quotas as the emulators enforce them, each on by default at the value AWS documents
(docs/emulators.md), and the rate primitives that count them: these take ``now`` (monotonic seconds), read no
clock and take no lock (the limiters decide under their own)."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Final, TypeVar

from tools.emulators.settings import EmulatorError

MIB: Final = 1024 * 1024
ENV_ALL: Final = "EMULATORS_LIMITS"
ENV_PREFIX: Final = "EMULATORS_LIMIT_"


class LimitsError(EmulatorError):
    """A limit setting that cannot be used; the message names the setting."""


@dataclass(frozen=True)
class Limits:
    """The quotas the emulators enforce (rates per second unless the name says otherwise); ``None`` switches one
    off, ``enabled=False`` all of them."""

    enabled: bool = True
    # -- Kinesis, per shard (ProvisionedThroughputExceededException)
    get_records_per_shard: float | None = 5
    #: Charged after each call, so a big read refuses the next ones.
    get_records_bytes_per_shard: float | None = 2 * MIB
    #: Bytes a shard may read ahead of its rate; 0 = AWS's "10 MiB read -> next 5 s throttled".
    get_records_burst_bytes: float = 0
    get_shard_iterator_per_shard: float | None = 5
    #: Seconds a shard iterator stays valid after it was issued (ExpiredIteratorException).
    iterator_ttl_seconds: float | None = 300
    #: Records and bytes (data + partition key) written per shard, PutRecord and PutRecords together.
    put_records_per_shard: float | None = 1000
    put_bytes_per_shard: float | None = 1 * MIB
    # -- Kinesis, per stream / account / consumer (LimitExceededException)
    list_shards_per_stream: float | None = 1000
    describe_stream_summary_per_account: float | None = 20
    describe_stream_per_account: float | None = 10
    list_stream_consumers_per_stream: float | None = 5
    register_stream_consumer_per_account: float | None = 5
    describe_stream_consumer_per_stream: float | None = 20
    deregister_stream_consumer_per_stream: float | None = 5
    subscribe_to_shard_per_consumer_shard: float | None = 1
    #: Seconds after a successful SubscribeToShard in which another of its consumer and shard is refused
    #: (ResourceInUseException); a later one takes the subscription over.
    subscribe_takeover_seconds: float | None = 5
    #: Seconds after which a SubscribeToShard event stream ends (the client subscribes again).
    subscription_seconds: float | None = 300
    # -- DynamoDB
    #: Capacity units per partition key value, in both capacity modes.
    dynamodb_partition_rcu: float | None = 3000
    dynamodb_partition_wcu: float | None = 1000
    #: Request units per on-demand table (the per-table account quota).
    dynamodb_on_demand_table_rru: float | None = 40_000
    dynamodb_on_demand_table_wru: float | None = 40_000
    #: Seconds of unused capacity a provisioned table may burst with (at its own RCU/WCU rate).
    dynamodb_burst_seconds: float = 300
    #: Length of the window that call-count limits are counted over, in seconds.
    window_seconds: float = 1.0

    def __post_init__(self) -> None:
        for name, value in dataclasses.asdict(self).items():
            if name == "enabled":
                valid, expected = isinstance(value, bool), "True or False"
            else:  # a bool is no number here; NaN and infinities are not finite
                number = type(value) in (int, float) and math.isfinite(value)
                valid = (value is None and name in _OPTIONAL) or (
                    number and (value > 0 or (value == 0 and name in _ZERO_OK))
                )
                expected = f"a number {'>= 0' if name in _ZERO_OK else '> 0'}{' or None (off)' * (name in _OPTIONAL)}"
            if not valid:
                raise LimitsError(f"Limits.{name}: expected {expected}, got {value!r}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Limits:
        """The defaults, changed by ``EMULATORS_LIMITS=off`` and ``EMULATORS_LIMIT_<FIELD>=<number>|off``."""
        env = os.environ if environ is None else environ
        overrides: dict[str, Any] = {}
        if ENV_ALL in env:
            overrides["enabled"] = _parse(ENV_ALL, "enabled", env[ENV_ALL])
        for key, raw in env.items():
            if key.startswith(ENV_PREFIX):
                name = key.removeprefix(ENV_PREFIX).lower()
                overrides[name] = _parse(key, name, raw)
                try:  # a value out of range: name the variable that was set
                    cls(**{name: overrides[name]})
                except LimitsError as exc:
                    raise LimitsError(f"{key}={raw}: {exc}") from None
        return cls(**overrides)

    @classmethod
    def resolve(cls, value: Limits | Mapping[str, Any] | bool | str | None) -> Limits:
        """``Emulators(limits=...)``: a Limits as it is; None = from the environment; True/"on" = the
        environment's switched on, False/"off" = none; a mapping = the environment's with these replaced."""
        if isinstance(value, Limits):
            return value
        base = cls.from_env()
        if isinstance(value, bool | str):
            return dataclasses.replace(base, enabled=bool(_parse("limits", "enabled", str(value))))
        changes = dict(value or {})
        for name, setting in changes.items():  # text as in the environment ("off", "5")
            if isinstance(setting, str) or name not in _FIELDS:
                changes[name] = _parse(f"Limits.{name}", name, str(setting))
        return dataclasses.replace(base, **changes)

    def to_json(self) -> str:
        """All fields as one JSON object (how the children get their settings)."""
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    def describe(self) -> dict[str, Any]:
        """``{"enabled": ..., name: value or "off"}`` for printing (``python -m tools.emulators``)."""
        return {name: "off" if value is None else value for name, value in dataclasses.asdict(self).items()}

    def active(self, name: str) -> float | None:
        """The value of limit ``name``, or None when it (or every limit) is switched off."""
        return getattr(self, name) if self.enabled else None


_FIELDS: Final = frozenset(f.name for f in fields(Limits))
_OPTIONAL: Final = frozenset(f.name for f in fields(Limits) if "None" in str(f.type))
_ZERO_OK: Final = frozenset({"get_records_burst_bytes", "dynamodb_burst_seconds"})


def _parse(setting: str, name: str, raw: str) -> bool | float | None:
    """A setting's text: on/off for ``enabled``, else a number, or off/none for a limit that may be off."""
    word = raw.strip().lower()
    if name == "enabled":
        if word in {"off", "none", "false", "no", "0"}:
            return False
        if word in {"on", "true", "yes", "1", ""}:
            return True
        raise LimitsError(f"{setting}: expected on or off, got {raw!r}")
    if name not in _FIELDS:
        raise LimitsError(f"{setting}: no such limit (known: {', '.join(sorted(_FIELDS - {'enabled'}))})")
    if word in {"off", "none"}:
        if name not in _OPTIONAL:
            raise LimitsError(f"{setting}: cannot be switched off, give a number")
        return None
    try:
        return float(word)
    except ValueError:
        raise LimitsError(f"{setting}: expected a number, got {raw!r}") from None


class SlidingWindow:
    """At most ``limit`` events in any window of ``window`` seconds; a refused call is not counted (as on AWS,
    where a throttled request consumes no quota)."""

    __slots__ = ("_times", "limit", "window")

    def __init__(self, limit: int, window: float = 1.0) -> None:
        self.limit = limit
        self.window = window
        self._times: deque[float] = deque(maxlen=limit)

    def try_acquire(self, now: float) -> bool:
        """Count one event at ``now`` if the window has room; False (nothing counted) if it is full."""
        if len(self._times) == self.limit and now - self._times[0] < self.window:
            return False
        self._times.append(now)  # maxlen drops the oldest
        return True


class TokenBucket:
    """Tokens refill at ``rate`` per second up to ``capacity``; ``charge`` may leave a debt (a big read, known from
    its response), and ``admit`` refuses calls until it is paid back."""

    __slots__ = ("_last", "capacity", "level", "rate")

    def __init__(self, rate: float, capacity: float, now: float = -math.inf) -> None:
        self.rate = rate
        self.capacity = capacity
        self.level = capacity
        self._last = now

    def available(self, now: float) -> float:
        """The level at ``now`` (negative while a debt is outstanding)."""
        if now > self._last:
            self.level = min(self.capacity, self.level + (now - self._last) * self.rate)
            self._last = now
        return self.level

    def try_take(self, now: float, amount: float) -> bool:
        """Take ``amount`` tokens if at least that many are there (or, for an amount larger than the
        capacity, if the bucket is full); otherwise take nothing and return False."""
        if self.available(now) >= min(amount, self.capacity):
            self.level -= amount
            return True
        return False

    def admit(self, now: float) -> bool:
        """True while the level is not negative (no outstanding debt)."""
        return self.available(now) >= 0

    def charge(self, now: float, amount: float) -> None:
        """Spend ``amount`` tokens unconditionally (the level may go negative)."""
        self.available(now)
        self.level -= amount


T = TypeVar("T")


class Keyed(OrderedDict[object, T]):
    """Rate objects by key, made by ``factory()`` on first use. Past ``max_keys`` the least recently used one
    is dropped: long idle, as no 50,000 keys see calls within a second here."""

    def __init__(self, factory: Callable[[], T], max_keys: int = 50_000) -> None:
        super().__init__()
        self.factory = factory
        self.max_keys = max_keys

    def at(self, key: object) -> T:
        """The rate object for ``key``, created (full) if it is new."""
        if key not in self:
            if len(self) >= self.max_keys:
                self.popitem(last=False)
            self[key] = self.factory()
        self.move_to_end(key)
        return self[key]
