"""Helpers for integration tests: streams and tables on the emulators, workers in-process or as processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from consumer.checkpoint.dynamodb import DynamoDBCheckpointStore
from consumer.config import (
    CheckpointConfig,
    LeaseConfig,
    ProcessingConfig,
    RetrievalConfig,
    ShutdownConfig,
    StreamSpec,
    WorkerConfig,
)
from consumer.dynamo import create_tables
from consumer.leases.dynamodb import DynamoDBLeaseRepository
from consumer.lifecycle.processor import RecordProcessor
from consumer.lifecycle.worker import Worker
from consumer.metrics.sink import InMemoryMetrics
from consumer.retrieval.kinesis import BotoKinesis
from consumer.sinks.dlq import DeadLetterQueue
from tests.unit.helpers import wait_until  # noqa: F401 - re-exported for the integration tests

REPO = Path(__file__).resolve().parents[2]
# The longest a wait that includes a worker process's start (imports, clients, preflight: about 1.3 CPU-seconds)
# may take: on a 2-core machine busy with other work, a start has taken more than 10 s. Passing waits return at
# their event; only a failing one waits this long.
PROCESS_START = 60.0
LEASES = LeaseConfig(
    lease_duration=3.0,
    safety_margin=0.8,
    scan_interval=0.25,
    inbox_poll_interval=0.1,
    discovery_interval=0.5,
    idle_poll_interval=0.25,
    leader_check_interval=0.25,
)


def create_stream(kinesis: Any, name: str, shards: int) -> list[str]:
    kinesis.create_stream(StreamName=name, ShardCount=shards)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        summary = kinesis.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]
        if summary["StreamStatus"] == "ACTIVE":
            return [s["ShardId"] for s in kinesis.list_shards(StreamName=name)["Shards"]]
        time.sleep(0.05)
    raise AssertionError(f"stream {name} never became ACTIVE")


def wait_active(kinesis: Any, name: str) -> None:
    deadline = time.monotonic() + 30
    while (
        kinesis.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]["StreamStatus"]
        != "ACTIVE"
    ):
        assert time.monotonic() < deadline, f"{name} not ACTIVE"
        time.sleep(0.05)


def put_records(
    kinesis: Any, stream: str, payloads: list[bytes], shard_keys: list[str] | None = None
) -> list[dict]:
    """Put each payload (with PutRecords in batches); returns the results with their shard and sequence."""
    out: list[dict] = []
    for start in range(0, len(payloads), 250):
        chunk = payloads[start : start + 250]
        entries = [
            {"Data": p, "PartitionKey": shard_keys[start + i] if shard_keys else f"pk-{start + i}"}
            for i, p in enumerate(chunk)
        ]
        res = kinesis.put_records(StreamName=stream, Records=entries)
        assert res.get("FailedRecordCount", 0) == 0, res
        out.extend(res["Records"])
    return out


def put_numbered(kinesis: Any, stream: str, prefix: str, count: int) -> list[str]:
    """Put ``count`` records ``{prefix}0``, ``{prefix}1``, ... (``put_records``); their sequence numbers, in order."""
    return [
        r["SequenceNumber"]
        for r in put_records(kinesis, stream, [f"{prefix}{i}".encode() for i in range(count)])
    ]


@dataclass
class Names:
    stream: str
    lease_table: str
    checkpoint_table: str


def make_names(unique_name: Callable[..., str], dynamodb: Any) -> Names:
    names = Names(unique_name("s"), unique_name("leases"), unique_name("cps"))
    create_tables(dynamodb, names.lease_table, names.checkpoint_table)
    return names


def dynamo_worker(
    worker_id: str,
    emulators: Any,
    names: Names,
    factory: Callable[[], RecordProcessor],
    *,
    streams: tuple[str, ...] | None = None,
    factories: dict[str, Callable[[], RecordProcessor]] | None = None,
    processing: ProcessingConfig | None = None,
    checkpoint: CheckpointConfig | None = None,
    dlq: DeadLetterQueue | None = None,
) -> Worker:
    ddb = emulators.client("dynamodb")
    specs = tuple(StreamSpec(s, (factories or {}).get(s, factory)) for s in (streams or (names.stream,)))
    config = WorkerConfig(
        application="it",
        lease_table=names.lease_table,
        checkpoint_table=names.checkpoint_table,
        worker_id=worker_id,
        streams=specs,
        lease=LEASES,
        retrieval=RetrievalConfig(idle_time_between_reads=0.05, max_records=500),
        processing=processing or ProcessingConfig(backoff_base=0.01, backoff_max=0.05),
        checkpoint=checkpoint or CheckpointConfig(),
        shutdown=ShutdownConfig(deadline=10.0),
    )
    return Worker(
        config,
        DynamoDBLeaseRepository(ddb, names.lease_table, names.checkpoint_table),
        DynamoDBCheckpointStore(ddb, names.checkpoint_table),
        BotoKinesis(emulators.client("kinesis")),
        dlq=dlq,
        metrics=InMemoryMetrics(),
    )


def run_in_thread(worker: Worker) -> threading.Thread:
    t = threading.Thread(target=worker.run, daemon=True, name=f"worker-{worker.id}")
    t.start()
    return t


def stored_checkpoints(dynamodb: Any, table: str) -> dict[str, tuple[str | None, int, int]]:
    """shard id -> (sequence, sub-sequence, epoch) as stored."""
    out = {}
    for item in dynamodb.scan(TableName=table, ConsistentRead=True)["Items"]:
        shard = item["lease_key"]["S"].rsplit("#", 1)[1]
        seq = item.get("sequence", {}).get("S")
        out[shard] = (seq, int(item.get("sub_sequence", {}).get("N", 0)), int(item["epoch"]["N"]))
    return out


def read_journal(path: Path) -> list[dict]:
    """The JSON lines of a file (a journal, a worker's log) written so far; none if it does not exist yet."""
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def log_events(path: Path, event: str) -> list[dict[str, Any]]:
    """The lines of a worker's JSON log (``spawn_worker``'s ``<journal>.<id>.log``) that are ``event``; other
    lines, JSON or not (a warning Python printed), are not read."""
    if not path.exists():
        return []
    marker = f'"event": "{event}"'
    return [json.loads(line) for line in path.read_text().splitlines() if marker in line]


def spawn_worker(
    emulators: Any, names: Names, worker_id: str, journal: Path, *, stdout: Path | None = None, **env: str
) -> subprocess.Popen[bytes]:
    """``python -m consumer run`` as its own process, the way the container runs it; its log (stderr) in
    ``<journal>.<worker_id>.log``, its metrics (stdout) in ``stdout`` if given."""
    full_env = {
        **os.environ,
        **emulators.env(),
        "CONSUMER_APPLICATION": "it",
        "CONSUMER_STREAMS": names.stream,
        "CONSUMER_PROCESSOR": "consumer.examples.journal:JournalProcessor",
        "CONSUMER_LEASE_TABLE": names.lease_table,
        "CONSUMER_CHECKPOINT_TABLE": names.checkpoint_table,
        "CONSUMER_WORKER_ID": worker_id,
        "CONSUMER_LEASE_DURATION_SECONDS": str(LEASES.lease_duration),
        "CONSUMER_SAFETY_MARGIN_SECONDS": str(LEASES.safety_margin),
        "CONSUMER_SCAN_INTERVAL_SECONDS": str(LEASES.scan_interval),
        "CONSUMER_INBOX_POLL_SECONDS": str(LEASES.inbox_poll_interval),
        "CONSUMER_DISCOVERY_INTERVAL_SECONDS": "1",
        "CONSUMER_IDLE_TIME_SECONDS": "0.05",
        "CONSUMER_SHUTDOWN_DEADLINE_SECONDS": "10",
        "JOURNAL_PATH": str(journal),
        **env,
    }
    log = open(journal.with_suffix(f".{worker_id}.log"), "wb")  # noqa: SIM115 - closed by the process' end
    out = open(stdout, "wb") if stdout is not None else subprocess.DEVNULL  # noqa: SIM115 - likewise
    return subprocess.Popen(
        [sys.executable, "-m", "consumer", "run"],
        cwd=REPO,
        env=full_env,
        stdout=out,
        stderr=log,
    )


def run_cli(
    endpoints: Any, names: Names, *args: str, stdin: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``python -m consumer <args>`` against ``endpoints`` (``AwsEndpoints``) and the tables of ``names``."""
    env = {
        **os.environ,
        **endpoints.env(),
        "CONSUMER_LEASE_TABLE": names.lease_table,
        "CONSUMER_CHECKPOINT_TABLE": names.checkpoint_table,
    }
    return subprocess.run(
        [sys.executable, "-m", "consumer", *args],
        cwd=REPO,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def kcl_lease_table(ddb: Any, name: str, items: list[dict[str, Any]]) -> None:
    """A KCL lease table (key ``leaseKey``) holding ``items``, put in this order (a scan returns them so)."""
    ddb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "leaseKey", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "leaseKey", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    for item in items:
        ddb.put_item(TableName=name, Item=item)


def sigint_default() -> None:
    """A ``preexec_fn``: SIGINT's default action in the child before it starts, as in a terminal. A process
    started while its parent ignores SIGINT (a background job of a non-interactive shell) inherits that, and
    Python then installs no KeyboardInterrupt handler: Ctrl-C would do nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_multilang(
    path: Path, *flags: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m consumer multilang <path> <flags>`` to its end (60 s at most), its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "consumer", "multilang", str(path), *flags],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env=env,
    )


def error_lines(out: subprocess.CompletedProcess[str]) -> list[str]:
    """A command's stderr without its JSON log lines: what a person reads (``error: ...``)."""
    return [line for line in out.stderr.splitlines() if not line.startswith("{")]


def stop_process(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 20) -> int:
    if proc.poll() is None:
        proc.send_signal(sig)
    return proc.wait(timeout)
