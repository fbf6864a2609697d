"""Kinesis quota decisions, without I/O: what AWS would answer to a call, given the rates and the shard
iterators seen issued before. Every method takes ``now`` (monotonic seconds)."""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from functools import partial
from typing import Final

from tools.emulators.limits import Keyed, Limits, SlidingWindow, TokenBucket
from tools.emulators.settings import ACCOUNT_ID

logger = logging.getLogger(__name__)

THROUGHPUT: Final = "ProvisionedThroughputExceededException"
LIMIT: Final = "LimitExceededException"
EXPIRED: Final = "ExpiredIteratorException"
IN_USE: Final = "ResourceInUseException"
#: Seconds after a subscription ended within which kinesis-local may still refuse the next one (it frees an
#: ended subscription late; AWS takes the next at once): the proxy asks it again meanwhile, as for a takeover.
_FREED_LATE: Final = 10.0

#: Call rates by operation: (limit field, counted per "shard", "consumer" (and shard), "stream" or "account").
CALL_LIMITS: Final[dict[str, tuple[str, str]]] = {
    "GetShardIterator": ("get_shard_iterator_per_shard", "shard"),
    "SubscribeToShard": ("subscribe_to_shard_per_consumer_shard", "consumer"),
    "ListShards": ("list_shards_per_stream", "stream"),
    "DescribeStreamSummary": ("describe_stream_summary_per_account", "account"),
    "DescribeStream": ("describe_stream_per_account", "account"),
    "ListStreamConsumers": ("list_stream_consumers_per_stream", "stream"),
    "RegisterStreamConsumer": ("register_stream_consumer_per_account", "account"),
    "DescribeStreamConsumer": ("describe_stream_consumer_per_stream", "stream"),
    "DeregisterStreamConsumer": ("deregister_stream_consumer_per_stream", "stream"),
}
_WINDOWS: Final = ("get_records_per_shard", *(name for name, _ in CALL_LIMITS.values()))


@dataclass(frozen=True)
class Refusal:
    """An AWS error answer: HTTP 400 with ``{"__type": code, "message": message}``."""

    code: str
    message: str


def shard_throttled(stream: str, shard: str) -> Refusal:
    """The message AWS gives for a per-shard throttle (as in the PutRecords API reference's example)."""
    return Refusal(
        THROUGHPUT, f"Rate exceeded for shard {shard} in stream {stream} under account {ACCOUNT_ID}."
    )


def _limit(where: str) -> Refusal:
    return Refusal(LIMIT, f"Rate exceeded for {where}.")


def _http_date(wall: float) -> str:
    return time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime(wall))


class KinesisLimiter:
    """The rates and iterator ages of one Kinesis emulator. Thread-safe (one lock, held briefly)."""

    def __init__(self, limits: Limits, *, wall_offset: float | None = None) -> None:
        self.limits = limits
        self._lock = threading.Lock()
        #: wall time = monotonic + offset (for ExpiredIteratorException's message only)
        self._wall_offset = time.time() - time.monotonic() if wall_offset is None else wall_offset
        self._windows: dict[str, Keyed[SlidingWindow]] = {}
        for name in _WINDOWS:
            if (rate := limits.active(name)) is not None:
                calls = max(1, round(rate * limits.window_seconds))  # below 1 per window: a longer window
                window = max(limits.window_seconds, calls / rate)
                self._windows[name] = Keyed(partial(SlidingWindow, calls, window))
        self._read_bytes = self._buckets("get_records_bytes_per_shard", limits.get_records_burst_bytes)
        self._put_records = self._buckets("put_records_per_shard")
        self._put_bytes = self._buckets("put_bytes_per_shard")
        self._ttl = limits.active("iterator_ttl_seconds")
        #: iterator -> (stream, shard, issued at), in issue order
        self._iterators: OrderedDict[str, tuple[str, str, float]] = OrderedDict()
        self._takeover = limits.active("subscribe_takeover_seconds")
        #: (consumer ARN, shard) -> (when its last SubscribeToShard was let through, set when it is taken over)
        self._subscriptions: dict[tuple[str, str], tuple[float, threading.Event]] = {}
        #: (consumer ARN, shard) -> when its last subscription ended (until the next one is let through)
        self._ended: dict[tuple[str, str], float] = {}
        #: Refused calls (PutRecords: records) by operation.
        self.refusals: dict[str, int] = {}

    def _buckets(self, name: str, burst: float | None = None) -> Keyed[TokenBucket] | None:
        rate = self.limits.active(name)
        if rate is None:
            return None
        capacity = rate * self.limits.window_seconds if burst is None else burst
        return Keyed(partial(TokenBucket, rate, capacity))

    def _refuse(self, refusal: Refusal, operation: str) -> Refusal:
        self.refusals[operation] = self.refusals.get(operation, 0) + 1
        logger.debug("%s refused: %s", operation, refusal.message)
        return refusal

    def _window_full(self, name: str, key: object, now: float) -> bool:
        keyed = self._windows.get(name)
        return keyed is not None and not keyed.at(key).try_acquire(now)

    def check_call(
        self, operation: str, stream: str, shard: str, now: float, consumer: str = ""
    ) -> Refusal | None:
        """The refusal when ``operation`` is over its rate of :data:`CALL_LIMITS`, else None: per shard a
        ProvisionedThroughputExceededException, otherwise a LimitExceededException."""
        if operation not in CALL_LIMITS:
            return None
        name, per = CALL_LIMITS[operation]
        key: object
        match per:
            case "shard":
                key, refusal = (stream, shard), shard_throttled(stream, shard)
            case "consumer":
                key, refusal = (consumer, shard), _limit(f"consumer {consumer} and shard {shard}")
            case "stream":
                key, refusal = stream, _limit(f"stream {stream} under account {ACCOUNT_ID}")
            case _:
                key, refusal = None, _limit(f"account {ACCOUNT_ID}")
        with self._lock:
            return self._refuse(refusal, operation) if self._window_full(name, key, now) else None

    def iterator_issued(self, iterator: str, stream: str, shard: str, now: float) -> None:
        """Remember when ``iterator`` (from GetShardIterator or a NextShardIterator) was issued, for which shard."""
        # Expired iterators are kept another TTL (a late caller still gets ExpiredIteratorException), and
        # 10 minutes' worth when iterators never expire.
        keep = 2 * self._ttl if self._ttl is not None else 600.0
        with self._lock:
            self._iterators[iterator] = (stream, shard, now)
            self._iterators.move_to_end(iterator)
            while now - next(iter(self._iterators.values()))[2] > keep:  # this one is 0 s old
                self._iterators.popitem(last=False)

    def adopt_iterators(self, other: KinesisLimiter) -> None:
        """Share ``other``'s iterators from now on (limits changed while clients hold iterators): one registry,
        and the lock that guards it, for both. A copy lost the iterators that calls under way when the limits
        changed noted in ``other`` afterwards, and a GetRecords on an iterator never seen passes unlimited, so
        each such shard escaped every limit for good. Call it before this limiter serves any request."""
        self._lock = other._lock
        self._iterators = other._iterators

    def check_get_records(self, iterator: str, now: float) -> tuple[tuple[str, str] | None, Refusal | None]:
        """Before a GetRecords call: (its (stream, shard) if its iterator was seen issued, a refusal or None).
        The iterator's age first (as AWS), then the calls per second, then the debt of bytes read."""
        with self._lock:
            entry = self._iterators.get(iterator)
            if entry is None:
                return None, None
            stream, shard, issued = entry
            key = (stream, shard)
            if self._ttl is not None and now - issued > self._ttl:
                wall = self._wall_offset
                message = (
                    f"Iterator expired. The iterator was created at time {_http_date(issued + wall)} while "
                    f"right now it is {_http_date(now + wall)} which is further in the future than the "
                    f"tolerated delay of {int(self._ttl * 1000)} milliseconds."
                )
                return key, self._refuse(Refusal(EXPIRED, message), "GetRecords")
            if (  # the debt first: a call it refuses takes no place in the window
                self._read_bytes is not None and not self._read_bytes.at(key).admit(now)
            ) or self._window_full("get_records_per_shard", key, now):
                return key, self._refuse(shard_throttled(stream, shard), "GetRecords")
            return key, None

    def records_read(self, key: tuple[str, str], nbytes: int, now: float) -> None:
        """Charge a served GetRecords call's data bytes to its shard's read rate."""
        if self._read_bytes is not None and nbytes:
            with self._lock:
                self._read_bytes.at(key).charge(now, nbytes)

    def admit_puts(self, stream: str, records: list[tuple[str, int]], now: float) -> list[bool]:
        """For each (shard, size) of a PutRecord(s) call, in order: True if the shard can take it now (a refused
        record takes nothing: a later, smaller one may still fit)."""
        admitted: list[bool] = []
        with self._lock:
            for shard, size in records:
                counts = self._put_records.at((stream, shard)) if self._put_records is not None else None
                sizes = self._put_bytes.at((stream, shard)) if self._put_bytes is not None else None
                ok = (counts is None or counts.available(now) >= min(1, counts.capacity)) and (
                    sizes is None or sizes.try_take(now, size)
                )
                if ok and counts is not None:
                    counts.charge(now, 1)
                admitted.append(ok)
            if refused := admitted.count(False):
                self.refusals["PutRecords"] = self.refusals.get("PutRecords", 0) + refused
        return admitted

    def check_subscribe(self, consumer: str, stream: str, shard: str, now: float) -> Refusal | None:
        """ResourceInUseException for a SubscribeToShard too soon after the last one let through, else None."""
        with self._lock:
            last = self._subscriptions.get((consumer, shard))
        if self._takeover is None or last is None or now - last[0] >= self._takeover:
            return None
        name = consumer.split("/consumer/", 1)[-1].split(":", 1)[0]
        where = f"this consumer: {ACCOUNT_ID}:{stream}:{shard}:{name}"
        return self._refuse(
            Refusal(IN_USE, f"Another active subscription exists for {where}"), "SubscribeToShard"
        )

    def subscribing(self, consumer: str, shard: str, now: float) -> tuple[threading.Event, bool]:
        """Note a SubscribeToShard let through: (an event set once another takes it over, whether kinesis-local
        may still hold an earlier one: it takes one over, or follows one that ended within ``_FREED_LATE``
        seconds, which kinesis-local frees late and refuses until then)."""
        ended = threading.Event()
        with self._lock:
            earlier = self._subscriptions.get((consumer, shard))
            self._subscriptions[(consumer, shard)] = (now, ended)
            gone = self._ended.pop((consumer, shard), None)
        if earlier is not None:
            earlier[1].set()
        return ended, earlier is not None or (gone is not None and now - gone < _FREED_LATE)

    def unsubscribed(
        self, consumer: str, shard: str, ended: threading.Event, now: float | None = None
    ) -> None:
        """Forget a subscription that failed or ran its length (on AWS minutes after it began), if not taken
        over; ``now``: when it ended (the next one may find kinesis-local still holding it)."""
        with self._lock:
            if self._subscriptions.get((consumer, shard), (0.0, None))[1] is ended:
                del self._subscriptions[(consumer, shard)]
                if now is not None:
                    self._ended[(consumer, shard)] = now
