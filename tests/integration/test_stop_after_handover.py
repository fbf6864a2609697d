"""A worker stopped (SIGTERM) just after a lease was handed to it, before it read its own item: it hands the
lease on at once instead of leaving it to expire. Before, its shutdown ended at once (it held nothing yet),
deregistered, and the lease stayed its own, unread, for a whole lease duration until the leader saw it expire
(the soak audit: 2 of 4 tries in a deploy's churn, then ``lease_expired``)."""

from __future__ import annotations

import os
import signal

import pytest

from consumer.leases.dynamodb import DynamoDBLeaseRepository
from consumer.leases.model import lease_key

from .support import (
    PROCESS_START,
    create_stream,
    log_events,
    make_names,
    spawn_worker,
    stop_process,
    wait_until,
)

pytestmark = pytest.mark.integration


def test_a_lease_handed_over_just_before_sigterm_is_handed_on_not_left_to_expire(
    emulators, kinesis_client, dynamodb_client, unique_name, tmp_path
) -> None:
    names = make_names(unique_name, dynamodb_client)
    [shard] = create_stream(kinesis_client, names.stream, 1)
    repo = DynamoDBLeaseRepository(dynamodb_client, names.lease_table, names.checkpoint_table)
    key = lease_key(names.stream, shard)
    journal = tmp_path / "j.jsonl"
    a = spawn_worker(emulators, names, "a", journal)
    # b reads its own item only every 30 s while it holds nothing: the hand-over below stays unseen.
    b = spawn_worker(emulators, names, "b", journal, CONSUMER_IDLE_POLL_SECONDS="30")
    try:
        log_a, log_b = journal.with_suffix(".a.log"), journal.with_suffix(".b.log")
        wait_until(lambda: log_events(log_a, "shard_started"), PROCESS_START, what="a reads the shard")
        wait_until(lambda: log_events(log_b, "worker_started"), PROCESS_START, what="b is up")
        wait_until(lambda: repo.get_worker("b") is not None, 10, what="b registered")
        [lease] = repo.get_leases((key,))
        handed = repo.transfer(lease, "b")  # as an owner hands a lease over (a loses it: that is fine here)
        os.kill(b.pid, signal.SIGTERM)  # at once: b has not read its item since
        assert b.wait(30) == 0
        [after] = repo.get_leases((key,))
        assert after.owner != "b", after  # handed on (released for the leader), not left to expire
        assert after.epoch > handed.epoch
        [done] = log_events(log_b, "shutdown_complete")
        assert done["left_to_expire"] == [], done
    finally:
        if b.poll() is None:
            b.kill()
        assert stop_process(a) == 0
