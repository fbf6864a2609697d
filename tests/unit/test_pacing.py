"""The read pacing of one shard, on made-up time: AWS's per-shard limits while behind, the idle pace once
caught up, slower after throttles; and the polling reader that follows it."""

from __future__ import annotations

import itertools

import pytest

from consumer.clock import FakeClock
from consumer.config import RetrievalConfig
from consumer.errors import ThrottledError
from consumer.retrieval.kinesis import GetRecordsResult, WireRecord
from consumer.retrieval.pacing import Pacer, PaceSettings
from consumer.retrieval.polling import PollingReader

MIB = 1024 * 1024
DEFAULTS = RetrievalConfig()
SETTINGS = PaceSettings(
    DEFAULTS.idle_time_between_reads, DEFAULTS.reads_per_second, DEFAULTS.read_bytes_per_second
)


def test_defaults_stay_under_aws_per_shard_limits() -> None:
    assert DEFAULTS.max_records == 10_000
    assert DEFAULTS.reads_per_second < 5
    assert DEFAULTS.read_bytes_per_second < 2 * MIB
    # Six calls paced from their starts span 5 intervals: they fit in one second at the service only if their
    # network delays differ by more than 50 ms.
    assert 5 * SETTINGS.min_interval - 1.0 >= 0.05


def test_behind_small_records_start_to_start_at_the_call_rate() -> None:
    pacer = Pacer(SETTINGS)
    assert pacer.next_start == float("-inf")  # the first call goes at once
    pacer.served(10.0, 10.0, records=10_000, data_bytes=100_000, limit=10_000, behind_ms=60_000)
    assert pacer.behind
    assert pacer.next_start == pytest.approx(10.0 + 1 / 4.75)


def test_behind_big_records_wait_for_the_bytes_to_refill_from_when_they_came() -> None:
    pacer = Pacer(SETTINGS)
    pacer.served(10.0, 10.0, records=1_000, data_bytes=10 * MIB, limit=10_000, behind_ms=5_000)
    assert pacer.next_start == pytest.approx(10.0 + 10 * MIB / DEFAULTS.read_bytes_per_second)
    pacer.served(20.0, 21.5, records=1_000, data_bytes=1 * MIB, limit=10_000, behind_ms=5_000)
    assert pacer.next_start == pytest.approx(
        21.5 + MIB / DEFAULTS.read_bytes_per_second
    )  # a slow call: counted from its end
    # Over any stretch of calls the bytes read stay within the budget.
    start, read = 10.0, 0
    pacer = Pacer(SETTINGS)
    for _ in range(50):
        start = max(start, pacer.next_start)
        pacer.served(start, start, records=2_000, data_bytes=2_000 * 1024, limit=10_000, behind_ms=1)
        read += 2_000 * 1024
    assert read / (pacer.next_start - 10.0) <= DEFAULTS.read_bytes_per_second + 1


def test_caught_up_keeps_the_idle_pace() -> None:
    pacer = Pacer(SETTINGS)
    pacer.served(10.0, 10.0, records=3, data_bytes=300, limit=10_000, behind_ms=0)
    assert not pacer.behind
    assert pacer.next_start == pytest.approx(10.25)


def test_without_millis_behind_a_full_call_means_behind() -> None:
    pacer = Pacer(SETTINGS)
    pacer.served(0.0, 0.0, records=100, data_bytes=1, limit=100, behind_ms=None)
    assert pacer.behind
    pacer.served(1.0, 1.0, records=99, data_bytes=1, limit=100, behind_ms=None)
    assert not pacer.behind


def test_an_idle_time_below_the_call_rate_is_raised_to_it() -> None:
    pacer = Pacer(PaceSettings(0.01, 4.75, 2_000_000))
    pacer.served(0.0, 0.0, records=0, data_bytes=0, limit=10_000, behind_ms=0)
    assert pacer.next_start == pytest.approx(1 / 4.75)


def test_throttles_slow_down_and_calls_served_recover() -> None:
    pacer = Pacer(SETTINGS)
    base = SETTINGS.min_interval
    pacer.throttled(0.0)
    assert pacer.slowdown == 2.0 and pacer.next_start == pytest.approx(2 * base)
    for _ in range(5):
        pacer.throttled(0.0)
    assert pacer.slowdown == SETTINGS.max_slowdown  # bounded: a throttle never stalls the shard
    t = 100.0
    pacer.served(t, t, records=10_000, data_bytes=1, limit=10_000, behind_ms=1)
    assert pacer.next_start == pytest.approx(t + base * SETTINGS.max_slowdown)
    for _ in range(30):
        t = pacer.next_start
        pacer.served(t, t, records=10_000, data_bytes=1, limit=10_000, behind_ms=1)
    assert pacer.slowdown == 1.0
    assert pacer.next_start == pytest.approx(t + base)


class _ScriptedKinesis:
    """GetRecords answers from a script, on the fake clock (each call takes ``took`` seconds)."""

    def __init__(self, clock: FakeClock, script: list[GetRecordsResult | Exception], took: float = 0.05):
        self.clock, self.script, self.took = clock, script, took
        self.starts: list[float] = []

    def get_shard_iterator(self, stream: str, shard_id: str, iterator_type: str, **_: object) -> str:
        return "it-0"

    def get_records(self, iterator: str, limit: int) -> GetRecordsResult:
        self.starts.append(self.clock.monotonic())
        self.clock.advance(self.took)
        item = self.script.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    def list_shards(self, stream: str) -> list[object]:
        return []


def _records(n: int, size: int, first: int = 0) -> list[WireRecord]:
    from datetime import UTC, datetime

    at = datetime(2026, 1, 1, tzinfo=UTC)
    return [
        {
            "SequenceNumber": str(1000 + first + i),
            "PartitionKey": "k",
            "Data": b"x" * size,
            "ApproximateArrivalTimestamp": at,
        }
        for i in range(n)
    ]


def test_polling_reader_paces_from_start_to_start_on_the_injected_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = FakeClock()
    script: list[GetRecordsResult | Exception] = [
        GetRecordsResult(_records(100, 10), "it-1", 9_000),
        GetRecordsResult(_records(100, 10, 100), "it-2", 4_000),
        ThrottledError("GetRecords: ProvisionedThroughputExceededException"),
        GetRecordsResult(_records(5, 10, 200), "it-3", 0),
        GetRecordsResult([], "it-4", 0),
    ]
    api = _ScriptedKinesis(clock, script)
    reader = PollingReader(
        api, "s", "shard-0", RetrievalConfig(), after=None, initial_position="TRIM_HORIZON", clock=clock
    )
    # The reader's pacing wait is an Event wait on real time: make it advance the fake clock instead.
    monkeypatch.setattr(reader, "_interrupted", _AdvancingEvent(clock))

    assert [len(reader.fetch().records) for _ in range(2)] == [100, 100]  # type: ignore[union-attr]
    with pytest.raises(ThrottledError):
        reader.fetch()
    assert len(reader.fetch().records) == 5  # type: ignore[union-attr]
    assert reader.fetch().records == []  # type: ignore[union-attr]
    gaps = [b - a for a, b in zip(api.starts, api.starts[1:], strict=False)]
    rate = 1 / 4.75
    assert gaps[:2] == pytest.approx([rate, rate])  # behind: at the call rate, from start to start
    assert gaps[2] == pytest.approx(2 * rate)  # after the throttle: slowed down
    assert gaps[3] == pytest.approx(2 * 0.25)  # caught up: the idle pace, still slowed down once


class _AdvancingEvent:
    def __init__(self, clock: FakeClock) -> None:
        self._clock = clock

    def is_set(self) -> bool:
        return False

    def wait(self, timeout: float) -> bool:
        self._clock.advance(timeout)
        return False

    def set(self) -> None:
        return None


class _BrokenSubscriptions:
    """Every subscription breaks before its first event (a reset), on the fake clock."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.starts: list[float] = []

    def subscribe(self, arn: str, shard: str, position: str, **_: object) -> object:
        self.starts.append(self.clock.monotonic())
        clock = self.clock

        class Broken:
            def __iter__(self) -> object:
                clock.advance(0.1)
                raise ConnectionResetError("reset mid-stream")

            def close(self) -> None:
                return None

        return Broken()


def test_fanout_subscribes_at_most_once_per_interval_even_when_each_breaks_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from consumer.retrieval.fanout import FanOutReader

    clock = FakeClock()
    api = _BrokenSubscriptions(clock)
    cfg = RetrievalConfig(mode="fanout", fanout_consumer_name="c")
    reader = FanOutReader(
        api, "arn", "s", "shard-0", cfg, after=None, initial_position="TRIM_HORIZON", clock=clock
    )  # type: ignore[arg-type]
    monkeypatch.setattr(reader, "_wake", _AdvancingEvent(clock))
    for _ in range(4):
        with pytest.raises(ConnectionResetError):
            reader.fetch()
        clock.advance(0.2)  # the shard loop's backoff
    gaps = [b - a for a, b in itertools.pairwise(api.starts)]
    assert gaps == pytest.approx([cfg.fanout_subscribe_interval] * 3)  # AWS: 1 SubscribeToShard a second
