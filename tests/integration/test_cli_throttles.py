"""Operator commands survive throttles, over the network: emulators of their own whose limits layer gives each
on-demand table 1 read and 5 writes a second (AWS's per-table quota, scaled down: less than a worker alone
reads), with a worker running on them. ``status``, ``replay`` and ``drain`` run as ``python -m consumer`` are throttled, try again after a
jittered backoff (a ``call_throttled`` warning each time) and finish with exit 0 and the right result."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.support import Names, create_stream, make_names, put_numbered, read_journal, run_cli
from tests.integration.support import spawn_worker as spawn_session_worker
from tests.unit.helpers import wait_until

pytestmark = pytest.mark.integration

READS, WRITES = 1, 5  # request units per second per table: less than the worker alone reads


@pytest.fixture(scope="module")
def tight() -> Iterator[Any]:
    from tools.emulators import Emulators

    limits = {"dynamodb_on_demand_table_rru": READS, "dynamodb_on_demand_table_wru": WRITES}
    with Emulators(limits=limits) as emulators:
        yield emulators.endpoints


def _cli(endpoints: Any, names: Names, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(endpoints, names, *args, timeout=120)


def test_status_replay_and_drain_are_throttled_and_finish(
    tight: Any, unique_name: Any, tmp_path: Path
) -> None:
    kinesis, ddb = tight.client("kinesis"), tight.client("dynamodb")
    names = make_names(unique_name, ddb)
    (shard,) = create_stream(kinesis, names.stream, 1)
    seqs = put_numbered(kinesis, names.stream, "r", 10)
    journal = tmp_path / "journal.jsonl"
    # The worker at the defaults' pace, so that the tables' budget is shared and the commands meet throttles.
    worker = spawn_session_worker(
        tight,
        names,
        "tight-w",
        journal,
        CONSUMER_IDLE_TIME_SECONDS="0.25",
        CONSUMER_SCAN_INTERVAL_SECONDS="1",
        CONSUMER_LEASE_DURATION_SECONDS="10",
        CONSUMER_SAFETY_MARGIN_SECONDS="2",
    )
    try:
        wait_until(
            lambda: sum(e["k"] == "d" for e in read_journal(journal)) >= 10, timeout=60, what="delivered"
        )

        status = _cli(tight, names, "status", "--json")
        assert status.returncode == 0, status.stderr
        view = json.loads(status.stdout)
        assert [s["shard_id"] for s in view["leases"]] == [shard], view

        replay = _cli(tight, names, "replay", "--stream", names.stream, "--sequence", seqs[4], "--yes")
        assert replay.returncode == 0, replay.stderr
        wait_until(
            lambda: sum(e["k"] == "d" for e in read_journal(journal)) >= 16,
            timeout=60,
            what="records 4..9 again",
        )

        drain = _cli(tight, names, "drain", "tight-w")
        assert drain.returncode == 0, drain.stderr
        assert worker.wait(60) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    stderr = status.stderr + replay.stderr + drain.stderr
    assert "call_throttled" in stderr, "no command met a throttle: the test proves nothing"
    assert "Traceback" not in stderr
    delivered = [e["q"] for e in read_journal(journal) if e["k"] == "d"]
    assert delivered == seqs + seqs[4:]


def test_a_command_throttled_past_its_retries_exits_4_saying_to_try_again_later(
    emulators: Any, dynamodb_client: Any, unique_name: Any
) -> None:
    """The checkpoint table provisioned at 1 read unit a second, its burst spent and deep in debt: ``status``
    is throttled on every try, gives up after its retries and says so (before: exit 2, "invalid input")."""
    names = make_names(unique_name, dynamodb_client)
    for i in range(4):  # 300 KB each: a consistent scan of them costs about 300 read units
        item = {"lease_key": {"S": f"shard#pad#p{i}"}, "sequence": {"S": "1"}, "pad": {"S": "x" * 300_000}}
        dynamodb_client.put_item(TableName=names.checkpoint_table, Item=item)
    dynamodb_client.update_table(
        TableName=names.checkpoint_table,
        BillingMode="PROVISIONED",
        ProvisionedThroughput={"ReadCapacityUnits": 1, "WriteCapacityUnits": 1},
    )
    once = emulators.client("dynamodb", retries={"total_max_attempts": 1})
    for _ in range(10):  # spend the burst (AWS keeps 300 s of unused units), then run up a debt
        try:
            once.scan(TableName=names.checkpoint_table, ConsistentRead=True)
        except once.exceptions.ProvisionedThroughputExceededException:
            break
    else:
        raise AssertionError("the provisioned table never throttled")
    out = _cli(emulators, names, "status")
    assert out.returncode == 4, out.stderr
    [line] = [x for x in out.stderr.splitlines() if x.startswith("error: ")]
    # The first read of the table throttles: the start-up check of the two tables (a few items of each).
    assert line.startswith("error: CONSUMER_CHECKPOINT_TABLE: DynamoDB throttled ("), line
    assert f"'{names.checkpoint_table}'): ProvisionedThroughputExceededException" in line, line
    assert line.endswith("try again later, or raise the capacity of the table or stream named"), line
    assert "call_throttled" in out.stderr and "Traceback" not in out.stderr


def test_the_worker_counts_the_throttles_of_its_own_lease_table_calls(
    tight: Any, unique_name: Any, tmp_path: Path
) -> None:
    """A worker alone on the tight tables: its inbox polls (GetItem) and the leader's scans (Scan) are
    throttled, and each is counted in ``Throttles.<Operation>`` under its stream, as AWS-refused calls of the
    shards and of discovery are (before, only the log's failure episodes told them)."""
    kinesis, ddb = tight.client("kinesis"), tight.client("dynamodb")
    names = make_names(unique_name, ddb)
    create_stream(kinesis, names.stream, 1)
    journal, metrics = tmp_path / "journal.jsonl", tmp_path / "metrics.jsonl"
    worker = spawn_session_worker(
        tight, names, "tight-w", journal, stdout=metrics, CONSUMER_METRICS_INTERVAL_SECONDS="1"
    )

    def throttles() -> dict[str, float]:
        counted: dict[str, float] = {}
        for line in metrics.read_text().split("\n")[:-1]:  # whole lines: the last may be half written
            doc = json.loads(line)
            for name in doc["_aws"]["CloudWatchMetrics"][0]["Metrics"]:
                if name["Name"].startswith("Throttles.") and doc["Stream"] == names.stream:
                    counted[name["Name"]] = counted.get(name["Name"], 0) + doc[name["Name"]]
        return counted

    try:
        wait_until(
            lambda: {"Throttles.Scan", "Throttles.GetItem"} & set(throttles()),
            timeout=90,
            what="a throttled scan or inbox poll counted",
        )
    finally:
        worker.terminate()
        assert worker.wait(60) == 0
