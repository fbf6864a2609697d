"""A processor call that does not return, in a worker run as the container runs it (``python -m consumer
run``): its heartbeats go on and the lease stays, so nothing else would tell. The worker logs it once
(``processor_call_slow``, WARNING, with the stack it is stuck in) and counts it in the ``ProcessorCallsSlow``
gauge until it returns; then the shard goes on with nothing lost."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
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
    stop_process,
    wait_until,
)

pytestmark = pytest.mark.integration


class HangsOnR2(BaseProcessor):
    """Journals every delivery; a batch holding ``r2`` waits until the file ``HANG_RELEASE`` exists."""

    def process_records(self, data: ProcessRecordsInput) -> None:
        payloads = [r.data.decode() for r in data.records]
        if "r2" in payloads:
            wait_for_release(Path(os.environ["HANG_RELEASE"]))
        with open(os.environ["JOURNAL_PATH"], "a", encoding="utf-8") as out:
            out.write("".join(json.dumps({"p": p}) + "\n" for p in payloads))


def wait_for_release(path: Path) -> None:
    """Where the stack of the stuck call shows it is stuck."""
    while not path.exists():
        time.sleep(0.05)


def test_a_processor_call_that_does_not_return_is_told_once_and_counted(
    emulators, kinesis_client, dynamodb_client, unique_name, tmp_path
) -> None:
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 1)
    journal, log, release = tmp_path / "journal.jsonl", tmp_path / "worker.log", tmp_path / "release"
    env = {
        **os.environ,
        **emulators.env(),
        "CONSUMER_APPLICATION": "it",
        "CONSUMER_STREAMS": names.stream,
        "CONSUMER_PROCESSOR": "tests.integration.test_oncall_processor:HangsOnR2",
        "CONSUMER_LEASE_TABLE": names.lease_table,
        "CONSUMER_CHECKPOINT_TABLE": names.checkpoint_table,
        "CONSUMER_WORKER_ID": "w",
        "CONSUMER_LEASE_DURATION_SECONDS": str(LEASES.lease_duration),
        "CONSUMER_SAFETY_MARGIN_SECONDS": str(LEASES.safety_margin),
        "CONSUMER_IDLE_TIME_SECONDS": "0.05",
        "CONSUMER_METRICS_INTERVAL_SECONDS": "0.5",
        "CONSUMER_SHUTDOWN_DEADLINE_SECONDS": "10",
        "JOURNAL_PATH": str(journal),
        "HANG_RELEASE": str(release),
    }
    metrics: list[dict] = []
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "consumer", "run"], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=err
        )
    assert proc.stdout is not None
    reader = threading.Thread(target=lambda: metrics.extend(json.loads(x) for x in proc.stdout), daemon=True)
    reader.start()

    def slow_gauges() -> list[float]:
        return [m["ProcessorCallsSlow"] for m in list(metrics) if "ProcessorCallsSlow" in m]

    def told() -> list[dict]:
        return log_events(log, "processor_call_slow")

    try:
        put_records(kinesis_client, names.stream, [b"r0", b"r1"])
        wait_until(lambda: len(read_journal(journal)) == 2, timeout=30, what="r0 and r1 delivered")
        put_records(kinesis_client, names.stream, [b"r2", b"r3"])
        wait_until(told, timeout=4 * LEASES.lease_duration, what="the stuck call told")
        flushes = len(slow_gauges())
        wait_until(lambda: len(slow_gauges()) >= flushes + 3, timeout=10, what="three more metric flushes")
        assert len(told()) == 1  # once per call, not once per flush
        assert slow_gauges()[-1] == 1
        release.touch()
        wait_until(
            lambda: len(read_journal(journal)) == 4, timeout=10, what="r2 and r3 delivered once released"
        )
        wait_until(lambda: slow_gauges()[-1] == 0, timeout=10, what="the gauge back to 0")
    finally:
        release.touch()
        assert stop_process(proc) == 0
    (event,) = told()
    assert event["level"] == "WARNING" and event["stream"] == names.stream
    assert (
        event["shard"] == "shardId-000000000000" and event["running_s"] >= LEASES.lease_duration
    )  # rounded to 0.1 s
    assert "wait_for_release" in event["stack"]
    assert [x["p"] for x in read_journal(journal)] == ["r0", "r1", "r2", "r3"]
