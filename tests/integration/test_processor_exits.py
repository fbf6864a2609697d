"""A processor that calls ``sys.exit()`` (or raises ``asyncio.CancelledError``) on a poison record, in a
worker run as the container runs it (``python -m consumer run``) with one processor thread: the record's
shard halts with the failure logged (and its traceback), and the other shard goes on. Before, the exception
ended the worker's only processor thread without a line in the log, and every shard stopped."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from consumer import BaseProcessor, ProcessRecordsInput

from .support import (
    LEASES,
    REPO,
    create_stream,
    log_events,
    make_names,
    put_records,
    read_journal,
    wait_until,
)

pytestmark = pytest.mark.integration


class ExitsOnPoison(BaseProcessor):
    """Journals every delivery; a batch holding ``poison`` calls ``sys.exit(3)`` (``CancelledError`` when
    ``ABORT=cancel``)."""

    def process_records(self, data: ProcessRecordsInput) -> None:
        payloads = [r.data.decode() for r in data.records]
        if "poison" in payloads:
            if os.environ.get("ABORT") == "cancel":
                raise asyncio.CancelledError("interrupted")
            sys.exit(3)
        with open(os.environ["JOURNAL_PATH"], "a", encoding="utf-8") as out:
            out.write("".join(json.dumps({"p": p}) + "\n" for p in payloads))


@pytest.mark.parametrize("abort", ["exit", "cancel"])
def test_a_processor_that_exits_halts_its_shard_and_the_other_shard_goes_on(
    abort: str, emulators, kinesis_client, dynamodb_client, unique_name, tmp_path: Path
) -> None:
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 2)
    journal, log = tmp_path / "journal.jsonl", tmp_path / "worker.log"
    env = {
        **os.environ,
        **emulators.env(),
        "CONSUMER_APPLICATION": "it",
        "CONSUMER_STREAMS": names.stream,
        "CONSUMER_PROCESSOR": "tests.integration.test_processor_exits:ExitsOnPoison",
        "CONSUMER_LEASE_TABLE": names.lease_table,
        "CONSUMER_CHECKPOINT_TABLE": names.checkpoint_table,
        "CONSUMER_WORKER_ID": "w",
        "CONSUMER_LEASE_DURATION_SECONDS": str(LEASES.lease_duration),
        "CONSUMER_SAFETY_MARGIN_SECONDS": str(LEASES.safety_margin),
        "CONSUMER_IDLE_TIME_SECONDS": "0.05",
        "CONSUMER_SHUTDOWN_DEADLINE_SECONDS": "10",
        "CONSUMER_PROCESSOR_THREADS": "1",
        "CONSUMER_MAX_ATTEMPTS": "2",
        "CONSUMER_ON_FAILURE": "halt",
        "JOURNAL_PATH": str(journal),
        "ABORT": abort,
    }
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "consumer", "run"],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        [poisoned] = put_records(kinesis_client, names.stream, [b"poison"], ["key-0"])
        poisoned_shard = poisoned["ShardId"]
        wait_until(lambda: log_events(log, "shard_halted"), timeout=60, what="the poisoned shard halted")
        later = put_records(kinesis_client, names.stream, [f"ok{i}".encode() for i in range(20)])
        healthy = sorted(f"ok{i}" for i, r in enumerate(later) if r["ShardId"] != poisoned_shard)
        assert healthy, "some records went to the other shard"
        wait_until(
            lambda: sorted(x["p"] for x in read_journal(journal)) == healthy,
            timeout=30,
            what="the other shard's records delivered",
        )
    finally:
        proc.terminate()
        code = proc.wait(30)
    assert code == 0
    [halted] = log_events(log, "shard_halted")
    assert halted["level"] == "ERROR" and halted["shard"] == poisoned_shard
    original = "SystemExit(3)" if abort == "exit" else "CancelledError('interrupted')"
    assert f"ExitsOnPoison.process_records raised {original}" in halted["error"]
    assert "in process_records" in halted["exc"]  # the traceback shows where the processor exited
    assert len(log_events(log, "processor_failed")) == 2 + 2  # the batch's attempts, then the record's
