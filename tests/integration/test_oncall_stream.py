"""The stream deleted under a running worker (``python -m consumer run``): the worker keeps running, and the
log lines that say the shard failed and was given up name the stream and the shard (the first failure, a
GetRecords, once named the operation as if it were the stream)."""

from __future__ import annotations

import pytest

from .support import (
    create_stream,
    log_events,
    make_names,
    put_records,
    read_journal,
    spawn_worker,
    stop_process,
    wait_until,
)

pytestmark = pytest.mark.integration


def test_a_deleted_stream_is_named_in_the_failure_and_the_give_up(
    emulators, kinesis_client, dynamodb_client, unique_name, tmp_path
) -> None:
    names = make_names(unique_name, dynamodb_client)
    (shard,) = create_stream(kinesis_client, names.stream, 1)
    put_records(kinesis_client, names.stream, [f"r{i}".encode() for i in range(5)])
    journal = tmp_path / "journal.jsonl"
    log = journal.with_suffix(".w.log")
    proc = spawn_worker(emulators, names, "w", journal)
    try:
        wait_until(
            lambda: sum(e["k"] == "d" for e in read_journal(journal)) >= 5, timeout=30, what="deliveries"
        )
        kinesis_client.delete_stream(StreamName=names.stream, EnforceConsumerDeletion=True)
        wait_until(lambda: log_events(log, "shard_given_up"), timeout=30, what="the shard given up")
        assert proc.poll() is None  # the worker goes on (its other streams would)
    finally:
        assert stop_process(proc) == 0
    first = log_events(log, "shard_given_up")[0]
    assert f"'{names.stream}'" in first["why"] and shard in first["why"], first
    assert "'GetRecords'" not in first["why"], first
    failed = log_events(log, "shard_failed")[0]
    assert (failed["stream"], failed["shard"]) == (names.stream, shard), failed
