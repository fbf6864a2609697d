"""A team's own KCL 2.x/3.x properties file under ``python -m consumer multilang``: Java properties syntax
(continuations, escapes, ``:`` and blank separators), the keys the KCL's MultiLangDaemonConfiguration reads
beyond the sample's (``AWSCredentialsProvider`` of the 2.x samples, endpoints, ``tableName``, ...), each
mapped, ignored or refused in one line naming the key."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.kclpy_support import events, spawn_daemon
from tests.integration.support import create_stream, error_lines, make_names, run_multilang
from tests.unit.helpers import wait_until

pytestmark = pytest.mark.integration

_KCL2_FILE = r"""# A KCL 2.x MultiLangDaemon file as teams write them
executableName = {python} \
    app.py --verbose
streamName : orders
applicationName	= Caf\u00e9Orders
AWSCredentialsProvider = DefaultAWSCredentialsProviderChain
AWSCredentialsProviderDynamoDB = com.amazonaws.auth.DefaultAWSCredentialsProviderChain
processingLanguage = python/3.11
initialPositionInStream = TRIM_HORIZON
regionName = eu-west-1
workerIdentifier = host\:1
tableName = CafeOrders
maxLeasesForWorker = 4
metricsLevel = NONE
maxLeasesToStealAtOneTime = 2
retrievalMode = POLLING
kinesisEndpoint = https://kinesis.eu-west-1.amazonaws.com
dynamoDBEndpoint = https://dynamodb.eu-west-1.amazonaws.com
! a bang comment
"""


def test_a_kcl2_file_with_java_syntax_and_more_keys_checks(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text("")
    path = tmp_path / "app.properties"
    path.write_text(_KCL2_FILE.format(python=Path(sys.executable).name), encoding="utf-8")
    out = run_multilang(path, "--check")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    expected = [
        f"executableName = {Path(sys.executable).name} app.py --verbose  -> the child command",
        "streamName = orders  -> the stream",
        "applicationName = CaféOrders  -> WorkerConfig.application",
        "AwsCredentialsProvider = DefaultAWSCredentialsProviderChain  ignored: credentials",
        "AwsCredentialsProviderDynamoDB = com.amazonaws.auth.DefaultAWSCredentialsProviderChain  ignored",
        "workerIdentifier = host:1  -> WorkerConfig.worker_id",
        "tableName = CafeOrders  ignored: the KCL's own lease table",
        "maxLeasesForWorker = 4  -> lease.max_leases_per_worker",
        "metricsLevel = NONE  ignored:",
        "maxLeasesToStealAtOneTime = 2  ignored:",
        "retrievalMode = POLLING  -> retrieval.mode",
        "kinesisEndpoint = https://kinesis.eu-west-1.amazonaws.com  -> the Kinesis client's endpoint",
        "dynamoDBEndpoint = https://dynamodb.eu-west-1.amazonaws.com  -> the DynamoDB client's endpoint",
    ]
    for start in expected:
        assert any(line.startswith(start) for line in lines), (start, out.stdout)
    assert lines[-1].startswith(f"stream orders, child {Path(sys.executable).name} app.py --verbose")


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "dynamoDBRegionName = us-west-2",
            "dynamoDBRegionName: 'us-west-2' is refused: every client uses regionName",
        ),
        ("retrievalMode = SOMETIMES", "retrievalMode: must be POLLING, FANOUT or DEFAULT; got 'SOMETIMES'"),
        ("kinesisEndpoint = kinesis.local:4567", "kinesisEndpoint: not a URL: 'kinesis.local:4567'"),
        ("maxLeasesForWorker = 0", "maxLeasesForWorker: must be a whole number > 0, got 0"),
        ("maxRecords = 1e3", "maxRecords: must be a whole number, got '1e3'"),
        ("timeoutInSeconds = inf", "timeoutInSeconds: must be a number > 0, got inf"),
        (
            "initialPositionInStream = TRIM_HORIZON\ninitialPositionInStreamExtended = 1636609142",
            "initialPositionInStreamExtended: is set with initialPositionInStream = TRIM_HORIZON",
        ),
        ("executableName = python3 /srv/o'brien/app.py", "executableName: cannot be split into words"),
        ("applicationName = bad\\u00zz", "malformed \\uXXXX escape"),
        (
            "AWSCredentialsProvider = ProfileCredentialsProvider|prod",
            "AwsCredentialsProvider: 'ProfileCredentialsProvider|prod' is refused",
        ),
    ],
)
def test_a_refused_or_bad_kcl_key_is_one_line(tmp_path: Path, line: str, expected: str) -> None:
    path = tmp_path / "bad.properties"
    path.write_text(
        f"executableName = {Path(sys.executable).name}\nstreamName = s\napplicationName = a\n"
        f"regionName = us-east-1\n{line}\n"
    )
    out = run_multilang(path, "--check")
    errors = error_lines(out)
    assert out.returncode == 2 and len(errors) == 1, out.stderr
    assert errors[0].startswith(f"error: {path}") and expected in errors[0], out.stderr
    assert "Traceback" not in out.stderr


def test_endpoints_and_lease_cap_of_the_file_are_the_ones_used(
    emulators: Any, kinesis_client: Any, dynamodb_client: Any, unique_name: Any, tmp_path: Path
) -> None:
    """kinesisEndpoint/dynamoDBEndpoint reach the clients (no AWS_ENDPOINT_URL* in the environment: without
    them the daemon would go to AWS and fail its start-up checks), and maxLeasesForWorker caps the leases."""
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 3)
    path = tmp_path / "app.properties"
    path.write_text(
        f"executableName = {Path(sys.executable).name} -c 'import time; time.sleep(60)'\n"
        f"streamName = {names.stream}\napplicationName = {unique_name('app')}\n"
        f"regionName = {emulators.region}\ninitialPositionInStream = TRIM_HORIZON\n"
        f"kinesisEndpoint = {emulators.kinesis_endpoint}\ndynamoDBEndpoint = {emulators.aws_endpoint}\n"
        "maxLeasesForWorker = 1\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONSUMER_", "AWS_ENDPOINT_URL"))}
    env.update({k: v for k, v in emulators.env().items() if not k.startswith("AWS_ENDPOINT_URL")})
    env.update(
        CONSUMER_SCAN_INTERVAL_SECONDS="0.5",
        CONSUMER_DISCOVERY_INTERVAL_SECONDS="0.5",
        CONSUMER_INBOX_POLL_SECONDS="0.2",
        CONSUMER_METRICS_INTERVAL_SECONDS="1",  # worker_stats once a second
        CONSUMER_SHUTDOWN_DEADLINE_SECONDS="3",  # the child never answers: the stop waits this long
    )
    log = tmp_path / "daemon.log"
    proc = spawn_daemon(path, names, env, "w1", log)
    try:
        wait_until(
            lambda: proc.poll() is not None or any(e.get("event") == "child_started" for e in events(log)),
            timeout=45,
            what="a child started by the daemon",
        )
        assert proc.poll() is None, log.read_text()[-3000:]

        def owned() -> list[str]:
            items = dynamodb_client.scan(TableName=names.lease_table, ConsistentRead=True)["Items"]
            return [
                i["shard_id"]["S"]
                for i in items
                if i.get("item_type", {}).get("S") == "lease" and i.get("owner", {}).get("S") == "w1"
            ]

        wait_until(lambda: len(owned()) >= 1, timeout=30, what="a lease taken")
        # Several of the leader's plans later (a scan every 0.5 s; worker_stats once a second): still one
        # shard, though three are free.
        wait_until(
            lambda: len([e for e in events(log) if e.get("event") == "worker_stats"]) >= 3,
            timeout=40,
            what="three worker_stats reports",
        )
        started = [e["shard"] for e in events(log) if e.get("event") == "child_started"]
        assert len(owned()) == 1 and len(set(started)) == 1, (owned(), started)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.wait(30)
