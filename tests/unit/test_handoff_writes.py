"""The hand-off writes of a step: plain releases put together, ``RELEASE_ALL_MAX`` a write, the rest one each,
and a batch that did not go through run again lease by lease. Against the in-memory repository and a recording
one, through ``Effects``."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from consumer.leases.model import Lease
from consumer.leases.repository import RELEASE_ALL_MAX
from consumer.lifecycle.handoff_writes import HandoffWriter
from consumer.lifecycle.messages import ActionResult, Event, LeaseWrite, Result, WriteKind


class Recorder:
    """Answers every write OK and records how it was asked; ``refuse`` batches answer None."""

    def __init__(self, refuse: int = 0) -> None:
        self.lock = threading.Lock()
        self.ones: list[LeaseWrite] = []
        self.batches: list[list[LeaseWrite]] = []
        self.refuse = refuse

    def run(self, w: LeaseWrite) -> Event | None:
        with self.lock:
            self.ones.append(w)
        return ActionResult(w.kind, w.lease, Result.OK)

    def release_all(self, writes: Sequence[LeaseWrite]) -> list[Event] | None:
        with self.lock:
            self.batches.append(list(writes))
            if self.refuse > 0:
                self.refuse -= 1
                return None
        return [ActionResult(w.kind, w.lease, Result.OK) for w in writes]


def _release(i: int, given_up: bool = False) -> LeaseWrite:
    return LeaseWrite(WriteKind.RELEASE, Lease("s", f"sh{i}", "w1", 1), given_up=given_up)


def _keys(events: list[Event]) -> list[str]:
    return sorted(e.lease.key for e in events if isinstance(e, ActionResult))


def test_a_shutdown_of_128_leases_is_three_release_writes_and_one_each_for_the_rest() -> None:
    rec = Recorder()
    writer = HandoffWriter(rec.run, rec.release_all, "t")
    releases = [_release(i) for i in range(128)]
    transfer = LeaseWrite(WriteKind.TRANSFER, Lease("s", "t1", "w1", 1), to="w2")
    given_up = _release(999, given_up=True)
    events = writer.write([*releases, transfer, given_up])
    writer.close()
    assert sorted(len(b) for b in rec.batches) == [28, RELEASE_ALL_MAX, RELEASE_ALL_MAX]
    assert sorted(w.lease.key for b in rec.batches for w in b) == sorted(w.lease.key for w in releases)
    assert {w.lease.key for w in rec.ones} == {transfer.lease.key, given_up.lease.key}  # not put together
    assert _keys(events) == sorted(w.lease.key for w in [*releases, transfer, given_up])


def test_a_batch_that_did_not_go_through_is_run_again_lease_by_lease() -> None:
    rec = Recorder(refuse=1)
    writer = HandoffWriter(rec.run, rec.release_all, "t")
    releases = [_release(i) for i in range(RELEASE_ALL_MAX + 5)]
    events = writer.write(releases)
    writer.close()
    refused = next(b for b in rec.batches if len(b) in (RELEASE_ALL_MAX, 5))
    assert sorted(w.lease.key for w in rec.ones) == sorted(w.lease.key for w in refused)
    assert _keys(events) == sorted(w.lease.key for w in releases)  # every lease answered once


def test_one_release_alone_is_an_ordinary_write() -> None:
    rec = Recorder()
    writer = HandoffWriter(rec.run, rec.release_all, "t")
    assert _keys(writer.write([_release(1)])) == ["shard#s#sh1"]
    writer.close()
    assert rec.batches == [] and len(rec.ones) == 1
