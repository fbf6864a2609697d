"""Every bad input to the real CLI (``python -m consumer ...`` as a subprocess, against the emulators) fails
with the documented exit code, one line naming the variable, flag or resource to fix, and no traceback; and
``run`` fails before it takes (or creates) anything in the lease table.

The cases run as concurrent subprocesses (each is mostly interpreter start-up), a handful at a time.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from consumer.leases.dynamodb import DynamoDBLeaseRepository
from consumer.leases.model import Lease
from consumer.lifecycle.processor import BaseProcessor, ProcessRecordsInput

from .support import REPO, create_stream, make_names, put_records, stored_checkpoints

pytestmark = pytest.mark.integration


class Exploding(BaseProcessor):
    """A processor whose constructor fails."""

    def __init__(self) -> None:
        raise RuntimeError("boom: cannot connect to the orders database")

    def process_records(self, data: ProcessRecordsInput) -> None:
        raise AssertionError("never constructed")


def not_a_processor() -> str:
    """A factory that returns something that is not a processor."""
    return "surprise"


@dataclass
class Case:
    name: str
    args: tuple[str, ...]
    env: dict[str, str]
    code: int
    needles: tuple[str, ...]
    absent: tuple[str, ...] = field(default=())
    drop: tuple[str, ...] = field(default=())  # variables removed from the environment


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the block ends: nothing listens there


# What an application embedding a worker does (``create_worker()`` reads the same variables as ``run``),
# reporting a refusal the way the CLI does, so that the two messages can be compared line for line.
_API_SCRIPT = """
import sys
from consumer import ConsumerError, UnreachableError, create_worker
try:
    create_worker()
except ConsumerError as exc:
    print(f"error: {exc}", file=sys.stderr)
    sys.exit(4 if isinstance(exc, UnreachableError) else 2)
print("error: create_worker() accepted it", file=sys.stderr)
"""


def _run(
    base: Mapping[str, str], case: Case, api: bool = False
) -> tuple[Case, subprocess.CompletedProcess[str]]:
    env = {k: v for k, v in {**base, **case.env}.items() if k not in case.drop}
    command = ["-c", _API_SCRIPT] if api else ["-m", "consumer", *case.args]
    out = subprocess.run(
        [sys.executable, *command],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return case, out


def _check_all(base: Mapping[str, str], cases: list[Case], api: bool = False) -> dict[str, str]:
    """Run every case; fail unless each gives its exit code and one ``error:`` line with its needles.
    Returns each case's error line."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda c: _run(base, c, api), cases))
    problems = []
    lines = {}
    for case, out in results:
        errors = [line for line in out.stderr.splitlines() if line.startswith("error: ")]
        ok = (
            out.returncode == case.code
            and "Traceback" not in out.stderr
            and len(errors) == 1
            and all(n in errors[0] for n in case.needles)
            and not any(a in errors[0] for a in case.absent)
        )
        print(f"{case.name} -> {out.returncode}: {errors}")  # shown with -s: every message, for review
        if not ok:
            problems.append(f"{case.name}: exit {out.returncode}, stderr:\n{out.stderr[-1500:]}")
        lines[case.name] = errors[0] if errors else ""
    assert not problems, "\n\n".join(problems)
    return lines


_NO_FILES = {
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/credentials",
    "AWS_CONFIG_FILE": "/nonexistent/config",
}
_CREDENTIALS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE")
_REGION = ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE")


def test_run_refuses_every_bad_setting_before_taking_a_lease(
    emulators, kinesis_client, dynamodb_client, s3_client, unique_name
) -> None:
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 1)
    bucket = unique_name("raw")
    s3_client.create_bucket(Bucket=bucket)
    wrong_keys = unique_name("wrongkey")
    dynamodb_client.create_table(
        TableName=wrong_keys,
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "N"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    missing_queue = f"{emulators.aws_endpoint}/123456789012/{unique_name('noq')}"
    # A fleet ran on (old, kept); a rolling restart changes only the lease table, to a new one.
    old, kept = make_names(unique_name, dynamodb_client), make_names(unique_name, dynamodb_client)
    old_repo = DynamoDBLeaseRepository(dynamodb_client, old.lease_table, kept.checkpoint_table)
    old_repo.create_lease(Lease(names.stream, "shardId-000000000000"))
    old_repo.take(Lease(names.stream, "shardId-000000000000"), "w-old", None)  # the checkpoint at epoch 1
    base = {
        **os.environ,
        **emulators.env(),
        "CONSUMER_APPLICATION": "cli-errors",
        "CONSUMER_STREAMS": names.stream,
        "CONSUMER_PROCESSOR": "consumer.examples.logging_processor:LoggingProcessor",
        "CONSUMER_LEASE_TABLE": names.lease_table,
        "CONSUMER_CHECKPOINT_TABLE": names.checkpoint_table,
    }
    raw = {"CONSUMER_PROCESSOR": "consumer.sinks.raw_s3:RawS3Sink", "CONSUMER_RAW_BUCKET": bucket}
    copier = {"CONSUMER_PROCESSOR": "consumer.examples.copier:StreamCopier"}
    run = ("run",)
    cases = [
        Case(
            "metrics",
            run,
            {"CONSUMER_METRICS_INTERVAL_SECONDS": "often"},
            2,
            ("CONSUMER_METRICS_INTERVAL_SECONDS", "'often'"),
        ),
        Case(
            "metrics dimensions",
            run,
            {"CONSUMER_METRICS_DIMENSIONS": "worker"},
            2,
            ("CONSUMER_METRICS_DIMENSIONS", "shard or stream", "'worker'"),
        ),
        Case(
            "inf lease",
            run,
            {"CONSUMER_LEASE_DURATION_SECONDS": "inf"},
            2,
            ("CONSUMER_LEASE_DURATION_SECONDS",),
            ("safety", "lease."),
        ),
        Case(
            "nan scan", run, {"CONSUMER_SCAN_INTERVAL_SECONDS": "nan"}, 2, ("CONSUMER_SCAN_INTERVAL_SECONDS",)
        ),
        Case(
            "margin",
            run,
            {"CONSUMER_SAFETY_MARGIN_SECONDS": "30"},
            2,
            ("CONSUMER_SAFETY_MARGIN_SECONDS", "CONSUMER_LEASE_DURATION_SECONDS"),
        ),
        Case(
            "deadline",
            run,
            {"CONSUMER_SHUTDOWN_DEADLINE_SECONDS": "3", "CONSUMER_FINAL_CHECKPOINT_TIMEOUT_SECONDS": "5"},
            2,
            ("CONSUMER_FINAL_CHECKPOINT_TIMEOUT_SECONDS", "CONSUMER_SHUTDOWN_DEADLINE_SECONDS"),
            ("shutdown.",),
        ),
        Case("on failure", run, {"CONSUMER_ON_FAILURE": "skip"}, 2, ("CONSUMER_ON_FAILURE", "halt, dlq")),
        Case("dlq url", run, {"CONSUMER_ON_FAILURE": "dlq"}, 2, ("CONSUMER_DLQ_URL", "CONSUMER_ON_FAILURE")),
        Case("flag", ("run", "--on-failure", "skip"), {}, 2, ("--on-failure", "CONSUMER_ON_FAILURE")),
        Case(
            "naive time",
            run,
            {
                "CONSUMER_INITIAL_POSITION": "AT_TIMESTAMP",
                "CONSUMER_INITIAL_TIMESTAMP": "2024-05-01T12:00:00",
            },
            2,
            ("CONSUMER_INITIAL_TIMESTAMP", "time zone"),
        ),
        Case("log level", run, {"CONSUMER_LOG_LEVEL": "loud"}, 2, ("CONSUMER_LOG_LEVEL",)),
        Case("no streams", run, {"CONSUMER_STREAMS": ""}, 2, ("CONSUMER_STREAMS", "required")),
        Case(
            "import",
            run,
            {"CONSUMER_PROCESSOR": "nowhere.mod:Proc"},
            2,
            ("CONSUMER_PROCESSOR", "nowhere.mod"),
        ),
        Case(
            "init raises",
            run,
            {"CONSUMER_PROCESSOR": "tests.integration.test_cli_errors:Exploding"},
            2,
            ("CONSUMER_PROCESSOR", "Exploding", "boom"),
        ),
        Case(
            "not a processor",
            run,
            {"CONSUMER_STREAMS": f"{names.stream}=tests.integration.test_cli_errors:not_a_processor"},
            2,
            ("CONSUMER_STREAMS", "not a record processor", "'str'"),
        ),
        Case("raw no bucket", run, {**raw, "CONSUMER_RAW_BUCKET": ""}, 2, ("CONSUMER_RAW_BUCKET",)),
        Case(
            "raw missing bucket",
            run,
            {**raw, "CONSUMER_RAW_BUCKET": "no-such-bucket-x1"},
            2,
            ("CONSUMER_RAW_BUCKET", "no-such-bucket-x1", "does not exist"),
        ),
        Case(
            "raw max records (old name)",
            run,
            {**raw, "RAW_MAX_RECORDS": "lots"},
            2,
            ("error: RAW_MAX_RECORDS: must be a whole number > 0, got 'lots'",),
        ),
        Case(
            "raw max age",
            run,
            {**raw, "CONSUMER_RAW_MAX_AGE_SECONDS": "soon"},
            2,
            ("CONSUMER_RAW_MAX_AGE_SECONDS: must be a number of seconds > 0, got 'soon'",),
        ),
        Case("copier no target", run, copier, 2, ("COPIER_TARGET_STREAM",)),
        Case(
            "copier missing target",
            run,
            {**copier, "COPIER_TARGET_STREAM": "no-such-target"},
            2,
            ("COPIER_TARGET_STREAM", "no-such-target", "does not exist"),
        ),
        Case(
            "missing stream",
            run,
            {"CONSUMER_STREAMS": "no-such-stream"},
            2,
            ("CONSUMER_STREAMS", "Kinesis stream 'no-such-stream' does not exist"),
        ),
        Case(
            "missing table",
            run,
            {"CONSUMER_CHECKPOINT_TABLE": "no-such-table"},
            2,
            ("CONSUMER_CHECKPOINT_TABLE", "'no-such-table' does not exist"),
        ),
        Case(
            "wrong key schema",
            run,
            {"CONSUMER_LEASE_TABLE": wrong_keys},
            2,
            ("CONSUMER_LEASE_TABLE", wrong_keys, "lease_key", "id (N, HASH)"),
        ),
        Case(
            "missing dlq",
            run,
            {"CONSUMER_ON_FAILURE": "dlq", "CONSUMER_DLQ_URL": missing_queue},
            2,
            ("CONSUMER_DLQ_URL", "does not exist"),
        ),
        Case(
            "dlq not a url",
            run,
            {"CONSUMER_ON_FAILURE": "dlq", "CONSUMER_DLQ_URL": "my-dlq"},
            2,
            ("CONSUMER_DLQ_URL", "queue URL"),
        ),
        Case(
            "dynamodb unreachable",
            run,
            {"AWS_ENDPOINT_URL_DYNAMODB": f"http://127.0.0.1:{_closed_port()}"},
            4,
            ("cannot reach DynamoDB", "AWS_ENDPOINT_URL_DYNAMODB"),
        ),
        Case("no credentials", run, _NO_FILES, 2, ("AWS_ACCESS_KEY_ID", "credentials"), drop=_CREDENTIALS),
        Case("no region", run, _NO_FILES, 2, ("AWS_REGION",), drop=_REGION),
        Case(
            "one table for both",
            run,
            {"CONSUMER_CHECKPOINT_TABLE": names.lease_table},
            2,
            ("error: CONSUMER_CHECKPOINT_TABLE: must differ from the lease table",),
        ),
        Case(
            "lease table replaced",
            run,
            {"CONSUMER_CHECKPOINT_TABLE": kept.checkpoint_table, "CONSUMER_LEASE_TABLE": kept.lease_table},
            2,
            (
                f"error: CONSUMER_CHECKPOINT_TABLE: DynamoDB table '{kept.checkpoint_table}' holds checkpoints "
                f"of leases that '{kept.lease_table}' does not hold (shard#{names.stream}#shardId-000000000000: "
                "its checkpoint at epoch 1, its lease absent)",
                "not one application's pair",
                "CONSUMER_LEASE_TABLE",
            ),
        ),
        Case(
            "endpoint not a url",
            run,
            {"AWS_ENDPOINT_URL": "notaurl"},
            2,
            ("error: AWS_ENDPOINT_URL: not a URL: 'notaurl'",),
        ),
        Case(
            "copier into itself",
            run,
            {**copier, "COPIER_TARGET_STREAM": names.stream},
            2,
            (f"error: COPIER_TARGET_STREAM: must differ from the stream being copied ('{names.stream}')",),
        ),
        Case(
            "processor flag",
            ("run", "--processor", "nowhere.mod:Proc"),
            {},
            2,
            ("error: --processor (CONSUMER_PROCESSOR): processor 'nowhere.mod:Proc'",),
        ),
    ]
    cli = _check_all(base, cases)
    # The same settings through the embedding API: the same start-up checks, the very same one line each
    # (flags and CONSUMER_LOG_LEVEL belong to the CLI alone).
    api_cases = [c for c in cases if c.name not in {"flag", "log level", "processor flag"}]
    api = _check_all(base, api_cases, api=True)
    assert {c.name: api[c.name] for c in api_cases} == {c.name: cli[c.name] for c in api_cases}
    # Nothing was registered, created or taken by any of them.
    assert dynamodb_client.scan(TableName=names.lease_table, ConsistentRead=True)["Items"] == []
    assert dynamodb_client.scan(TableName=kept.lease_table, ConsistentRead=True)["Items"] == []


def test_operator_commands_refuse_bad_input_and_move_nothing(
    emulators, kinesis_client, dynamodb_client, unique_name
) -> None:
    names = make_names(unique_name, dynamodb_client)
    shards = create_stream(kinesis_client, names.stream, 2)
    put = put_records(kinesis_client, names.stream, [f"r{i}".encode() for i in range(20)])
    seq = {}
    for r in put:
        seq.setdefault(r["ShardId"], r["SequenceNumber"])
    repo = DynamoDBLeaseRepository(dynamodb_client, names.lease_table, names.checkpoint_table)
    for shard in shards:
        repo.create_lease(Lease(names.stream, shard))
    wrong_keys = unique_name("wrongkey")
    dynamodb_client.create_table(
        TableName=wrong_keys,
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        BillingMode="PAY_PER_REQUEST",
    )
    base = {
        **os.environ,
        **emulators.env(),
        "CONSUMER_LEASE_TABLE": names.lease_table,
        "CONSUMER_CHECKPOINT_TABLE": names.checkpoint_table,
    }
    future = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    replay = ("replay", "--stream", names.stream, "--yes")
    first, second = shards
    closed = f"http://127.0.0.1:{_closed_port()}"
    cases = [
        Case("future", (*replay, "--timestamp", future), {}, 2, ("--timestamp", "in the future")),
        Case("naive", (*replay, "--timestamp", "2024-05-01T12:00:00"), {}, 2, ("--timestamp", "time zone")),
        Case("not iso", (*replay, "--timestamp", "yesterday"), {}, 2, ("--timestamp", "ISO-8601")),
        Case("seq too small", (*replay, "--shard", first, "--sequence", "1"), {}, 2, ("--sequence", first)),
        Case(
            "seq of other shard",
            (*replay, "--shard", first, "--sequence", seq[second]),
            {},
            2,
            ("--sequence", first, "--shard"),
        ),
        Case(
            "seq without shard", (*replay, "--sequence", seq[first]), {}, 2, ("--sequence", second, "--shard")
        ),
        Case("checkpoint", (*replay, "--checkpoint", "abc"), {}, 2, ("--checkpoint",)),
        Case(
            "status unreachable",
            ("status",),
            {"AWS_ENDPOINT_URL_DYNAMODB": closed},
            4,
            ("cannot reach DynamoDB",),
        ),
        Case(
            "drain unreachable", ("drain", "w1"), {"AWS_ENDPOINT_URL": closed}, 4, ("cannot reach DynamoDB",)
        ),
        Case("status no region", ("status",), _NO_FILES, 2, ("AWS_REGION",), drop=_REGION),
        Case("status no credentials", ("status",), _NO_FILES, 2, ("AWS_ACCESS_KEY_ID",), drop=_CREDENTIALS),
        Case(
            "status no table flag",
            ("status",),
            {"CONSUMER_LEASE_TABLE": ""},
            2,
            ("--lease-table", "CONSUMER_LEASE_TABLE"),
        ),
        Case(
            "status wrong table",
            ("status", "--lease-table", wrong_keys),
            {},
            2,
            ("--lease-table", wrong_keys, "pk (S, HASH) + sk (S, RANGE)"),
        ),
        Case(
            "status one table for both",
            ("status",),
            {"CONSUMER_CHECKPOINT_TABLE": names.lease_table},
            2,
            ("error: CONSUMER_CHECKPOINT_TABLE: must differ from the lease table",),
        ),
        Case(
            "status lease duration",
            ("status",),
            {"CONSUMER_LEASE_DURATION_SECONDS": "-3"},
            2,
            ("error: CONSUMER_LEASE_DURATION_SECONDS: must be a finite number > 0, got -3.0",),
        ),
        Case(
            "create-tables endpoint",
            ("create-tables",),
            {"AWS_ENDPOINT_URL": "http://[::1"},
            2,
            ("error: AWS_ENDPOINT_URL: not a URL",),
        ),
        Case(
            "create-tables wrong schema",
            ("create-tables", "--lease-table", wrong_keys, "--checkpoint-table", unique_name("c")),
            {},
            2,
            ("--lease-table", wrong_keys, "lease_key"),
        ),
    ]
    _check_all(base, cases)
    assert stored_checkpoints(dynamodb_client, names.checkpoint_table) == {}  # no replay moved anything
    assert all(x.owner is None and x.epoch == 0 for x in repo.snapshot().leases)
