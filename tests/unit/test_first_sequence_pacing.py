"""``replay --timestamp`` walks each shard to its first record with GetRecords; the shard's owner is reading it
at the same time (5 reads a second per shard, shared), so the walk is paced: start to start at least
``WALK_INTERVAL`` apart. Before, up to 100 calls went out back to back and throttled the owner."""

from __future__ import annotations

from typing import Any

from consumer.admin.ops import WALK_INTERVAL, first_sequence


class Shard:
    """GetRecords that find nothing ``empty`` times, then a record; records when each call was made."""

    def __init__(self, empty: int, clock: Any) -> None:
        self.empty, self.clock, self.calls = empty, clock, []

    def get_shard_iterator(self, **_: Any) -> dict[str, str]:
        return {"ShardIterator": "it"}

    def get_records(self, **_: Any) -> dict[str, Any]:
        self.calls.append(self.clock.t)
        self.clock.t += 0.05  # the call's own time
        if len(self.calls) <= self.empty:
            return {"Records": [], "NextShardIterator": "it", "MillisBehindLatest": 1000}
        return {"Records": [{"SequenceNumber": "49"}], "NextShardIterator": "it"}


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def test_the_walk_makes_at_most_two_reads_a_second() -> None:
    clock = Clock()
    shard = Shard(9, clock)
    assert (
        first_sequence(shard, "s", "sh", sleep=clock.sleep, clock=clock.now, ShardIteratorType="AT_TIMESTAMP")
        == "49"
    )
    assert len(shard.calls) == 10
    gaps = [b - a for a, b in zip(shard.calls, shard.calls[1:], strict=False)]
    assert min(gaps) >= WALK_INTERVAL - 1e-9 and WALK_INTERVAL >= 0.4, gaps
