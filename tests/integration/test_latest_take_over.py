"""A new application started with ``CONSUMER_INITIAL_POSITION=LATEST`` whose reading worker is SIGKILLed before
the shard's first checkpoint: the worker that takes the shard over delivers every record put after the
application started reading, none from before. Before, the new owner resolved ``LATEST`` again and every record
put between the two owners' reads was lost (13-18 of 40 in the audit with a 4 s lease; here all of them)."""

from __future__ import annotations

import pytest

from .support import (
    PROCESS_START,
    create_stream,
    log_events,
    make_names,
    put_numbered,
    read_journal,
    spawn_worker,
    stop_process,
    wait_until,
)

pytestmark = pytest.mark.integration


def test_a_take_over_before_the_first_checkpoint_reads_from_when_latest_was_fixed(
    emulators, kinesis_client, dynamodb_client, unique_name, tmp_path
) -> None:
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 1)
    put_numbered(kinesis_client, names.stream, "old-", 5)  # before the application: never delivered
    journal = tmp_path / "j.jsonl"
    first = spawn_worker(emulators, names, "a", journal, CONSUMER_INITIAL_POSITION="LATEST")
    second = None
    try:
        log_a, log_b = (journal.with_suffix(f".{w}.log") for w in ("a", "b"))
        wait_until(lambda: log_events(log_a, "shard_started"), PROCESS_START, what="a reads the shard")
        second = spawn_worker(emulators, names, "b", journal, CONSUMER_INITIAL_POSITION="LATEST")
        wait_until(lambda: log_events(log_b, "worker_started"), PROCESS_START, what="b is up")
        first.kill()  # a crash before any record: nothing was checkpointed
        first.wait(10)
        put_numbered(kinesis_client, names.stream, "r-", 40)  # after the application started reading

        def delivered() -> list[str]:
            return [e["p"] for e in read_journal(journal) if e["k"] == "d"]

        wait_until(
            lambda: sum(p.startswith("r-") for p in delivered()) == 40,
            PROCESS_START,
            what="every record put after the start, by the worker that took over",
        )
        assert sorted(delivered()) == sorted(f"r-{i}" for i in range(40)), delivered()
        [started_a], [started_b] = log_events(log_a, "shard_started"), log_events(log_b, "shard_started")
        # Both read from the same moment, fixed when the lease was created.
        assert started_a["starting_position"] == started_b["starting_position"] == "AT_TIMESTAMP"
        assert started_a["from_time"] == started_b["from_time"] is not None
    finally:
        if first.poll() is None:
            first.kill()
        if second is not None:
            assert stop_process(second) == 0
