"""Errors decided by their ``retriable`` flag: what may pass is retried (a throttle never counts towards
giving up), a bug or a refusal surfaces at once: the shard loop ends FAILED, a heartbeat that cannot be
written ends the worker, and ``join()`` raises it."""

from __future__ import annotations

import queue
import time
from typing import Any

import pytest

from consumer.config import LeaseConfig, RetrievalConfig
from consumer.errors import RefusedError, ThrottledError, UnreachableError
from consumer.leases.memory import InMemoryLeaseRepository, InMemoryTables
from consumer.lifecycle.messages import Outcome, ShardFinished
from consumer.lifecycle.retry import Verdict, verdict
from consumer.lifecycle.shard_consumer import ShardConsumer
from consumer.retrieval.kinesis import GetRecordsResult
from consumer.retrieval.memory import InMemoryKinesis
from tests.unit.helpers import Journal, RecordingProcessor, lone_shard_consumer, make_worker, wait_until

VALIDATION = RefusedError(
    "DynamoDB refused (heartbeat w1 on leases): ValidationException: Item size too large"
)


def test_the_verdict_reads_the_flag_and_throttles_are_their_own() -> None:
    assert verdict(ThrottledError("slow down")) is Verdict.BACK_OFF
    assert verdict(UnreachableError("cannot reach")) is Verdict.RETRY
    assert verdict(VALIDATION) is Verdict.SURFACE
    assert verdict(KeyError("epoch")) is Verdict.SURFACE  # a bug of ours


class _RefusingHeartbeats(InMemoryLeaseRepository):
    """DynamoDB refusing every heartbeat as it is made (say, an item grown past 400 KB)."""

    def heartbeat(self, *args: Any, **kwargs: Any) -> int:
        raise VALIDATION


def test_a_heartbeat_that_is_refused_ends_the_worker_and_join_raises_it() -> None:
    kinesis = InMemoryKinesis()
    kinesis.create_stream("s", 1)
    worker = make_worker(
        "w1", InMemoryTables(), kinesis, Journal(), wrap_repo=lambda r: _RefusingHeartbeats(r.t)
    )
    worker.start()
    try:
        with pytest.raises(RefusedError) as raised:
            assert worker.join(10.0), "the worker kept retrying a heartbeat that can never be written"
        assert raised.value is VALIDATION
    finally:
        worker.request_shutdown()


class _FailingKinesis(InMemoryKinesis):
    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error
        self.fetches = 0

    def get_records(self, iterator: str, limit: int) -> GetRecordsResult:
        self.fetches += 1
        raise self.error


def _shard(
    kinesis: InMemoryKinesis, give_up_after: float
) -> tuple[ShardConsumer, queue.Queue[ShardFinished]]:
    journal = Journal()
    retrieval = RetrievalConfig(
        idle_time_between_reads=0.01, backoff_base=0.01, backoff_max=0.02, reads_per_second=100
    )
    lease = LeaseConfig(lease_duration=3.0, give_up_after=give_up_after)
    consumer, finished, _, _ = lone_shard_consumer(
        kinesis, lambda: RecordingProcessor(journal, "w1"), retrieval, lease=lease
    )
    return consumer, finished


def test_a_refused_fetch_ends_the_shard_failed_at_once() -> None:
    kinesis = _FailingKinesis(RefusedError("Kinesis refused (s): ValidationException: Limit"))
    consumer, finished = _shard(kinesis, give_up_after=60.0)
    consumer.start()
    done = finished.get(timeout=10)
    assert done.outcome is Outcome.FAILED and "ValidationException" in done.detail
    assert kinesis.fetches == 1  # never tried again


def test_an_unreachable_endpoint_is_retried_until_the_give_up_bound() -> None:
    kinesis = _FailingKinesis(UnreachableError("cannot reach Kinesis (s)"))
    consumer, finished = _shard(kinesis, give_up_after=0.3)
    consumer.start()
    done = finished.get(timeout=10)
    assert done.outcome is Outcome.GAVE_UP
    wait_until(lambda: kinesis.fetches > 1, what="retries before giving up")


class _RefusingTableReads(InMemoryLeaseRepository):
    """The lease table refusing the leader's scans as made (say, a policy that denies Scan)."""

    def __init__(self, tables: InMemoryTables, error: Exception) -> None:
        super().__init__(tables)
        self.error = error
        self.scans = 0

    def snapshot(self, consistent: bool = True) -> Any:
        self.scans += 1
        raise self.error


def _worker_whose_scans_fail(error: Exception) -> tuple[Any, _RefusingTableReads]:
    kinesis = InMemoryKinesis()
    kinesis.create_stream("s", 1)
    repos: list[_RefusingTableReads] = []
    worker = make_worker(
        "w1",
        InMemoryTables(),
        kinesis,
        Journal(),
        wrap_repo=lambda r: repos.append(_RefusingTableReads(r.t, error)) or repos[0],
    )
    return worker, repos[0]


@pytest.mark.parametrize(
    "error",
    [RefusedError("DynamoDB refused (scan leases): AccessDeniedException"), KeyError("epoch")],
    ids=["refused", "a-bug"],
)
def test_a_coordinator_read_that_cannot_pass_ends_the_worker_and_join_raises_it(error: Exception) -> None:
    worker, repo = _worker_whose_scans_fail(error)
    worker.start()
    try:
        with pytest.raises(type(error)) as raised:
            assert worker.join(10.0), "the worker kept retrying a scan that can never pass"
        assert raised.value is error and repo.scans == 1
    finally:
        worker.request_shutdown()


def test_a_coordinator_read_that_may_pass_is_retried_on_schedule() -> None:
    worker, repo = _worker_whose_scans_fail(UnreachableError("cannot reach"))
    worker.start()
    try:
        wait_until(lambda: repo.scans >= 3, what="the scan tried again")
        assert worker.running
    finally:
        worker.request_shutdown()
        assert worker.join(10.0)


class _ScansFailLater(InMemoryLeaseRepository):
    """Scans that start being refused once ``refuse`` is set (after the worker took its leases)."""

    def __init__(self, tables: InMemoryTables) -> None:
        super().__init__(tables)
        self.refuse = False

    def snapshot(self, consistent: bool = True) -> Any:
        if self.refuse:
            raise RefusedError("DynamoDB refused (scan leases): AccessDeniedException")
        return super().snapshot(consistent)


def test_a_worker_ended_by_an_error_stops_its_shards_at_once_instead_of_waiting_for_each() -> None:
    kinesis = InMemoryKinesis()
    kinesis.create_stream("s", 4)
    repos: list[_ScansFailLater] = []
    worker = make_worker(
        "w1",
        InMemoryTables(),
        kinesis,
        Journal(),
        wrap_repo=lambda r: repos.append(_ScansFailLater(r.t)) or repos[0],
    )
    worker.start()
    try:
        wait_until(lambda: len(worker.owned) == 4 and len(worker.consumers) == 4, what="four shards consumed")
        repos[0].refuse = True
        refused = time.monotonic()
        with pytest.raises(RefusedError):
            worker.join(30.0)
        # Each consumer would otherwise be waited for up to the final checkpoint timeout (2 s here): 8 s in all.
        assert time.monotonic() - refused < 4.0
        assert all(c.finished for c in worker.consumers.values())
    finally:
        worker.request_shutdown()
