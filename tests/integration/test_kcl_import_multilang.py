"""The runbook end to end with a MultiLang child: a KCL 3.x lease table (multi-stream keys, 3.x attributes)
imported, then ``python -m consumer multilang`` on the same application: the child is initialized where the
KCL left each shard and gets exactly the records after it (none before, none twice), also on a shard the
KCL left at TRIM_HORIZON, whose first record a child must not take for done."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.kclpy_support import events
from tests.integration.support import REPO, create_stream, make_names, put_records
from tests.unit.helpers import wait_until

pytestmark = pytest.mark.integration

# Logs its initialize position and each record it takes; like many children, it skips a record at or before
# the position it was initialized at (a restart's duplicate); checkpoints each batch.
_CHILD = r"""#!/usr/bin/env python3
import json, sys
start = None
for line in sys.stdin:
    if not line.strip():
        continue
    m = json.loads(line)
    if m["action"] == "initialize":
        start = m["sequenceNumber"]
        sys.stderr.write("init %s %s\n" % (m["shardId"], start))
    for r in m.get("records", []):
        if start.isdigit() and int(r["sequenceNumber"]) <= int(start):
            continue
        sys.stderr.write("took %s %s\n" % (m.get("action"), r["sequenceNumber"]))
    if m["action"] in ("processRecords", "shutdownRequested"):
        print(json.dumps({"action": "checkpoint", "sequenceNumber": None, "subSequenceNumber": None}))
        sys.stdout.flush()
        sys.stdin.readline()
    sys.stderr.flush()
    print(json.dumps({"action": "status", "responseFor": m["action"]}))
    sys.stdout.flush()
"""


def _kcl3_lease(key: str, checkpoint: str) -> dict[str, Any]:
    """A KCL 3.x lease item (multi-stream key), with the attributes 3.x adds."""
    return {
        "leaseKey": {"S": key},
        "checkpoint": {"S": checkpoint},
        "checkpointSubSequenceNumber": {"N": "0"},
        "leaseOwner": {"S": "kcl3-worker"},
        "leaseCounter": {"N": "42"},
        "ownerSwitchesSinceCheckpoint": {"N": "0"},
        "throughputKBps": {"N": "12.5"},
        "leaseKeyIndexAttr": {"S": key},
        "childShardIds": {"SS": ["shardId-000000000009"]},
    }


def test_import_then_multilang_resumes_exactly_after_each_kcl_checkpoint(
    emulators: Any, kinesis_client: Any, dynamodb_client: Any, unique_name: Any, tmp_path: Path
) -> None:
    names = make_names(unique_name, dynamodb_client)
    s0, s1 = create_stream(kinesis_client, names.stream, 2)
    seqs: dict[str, list[str]] = {s0: [], s1: []}
    for r in put_records(kinesis_client, names.stream, [f"r-{i}".encode() for i in range(40)]):
        seqs[r["ShardId"]].append(r["SequenceNumber"])
    assert min(len(v) for v in seqs.values()) >= 4, seqs  # 40 keys spread over both shards
    kcl_table = unique_name("kcl3")
    dynamodb_client.create_table(
        TableName=kcl_table,
        KeySchema=[{"AttributeName": "leaseKey", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "leaseKey", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    created = kinesis_client.describe_stream_summary(StreamName=names.stream)["StreamDescriptionSummary"]
    epoch = int(created["StreamCreationTimestamp"].timestamp())  # the KCL's creationEpoch: whole seconds
    prefix = f"123456789012:{names.stream}:{epoch}"
    for item in (_kcl3_lease(f"{prefix}:{s0}", seqs[s0][2]), _kcl3_lease(f"{prefix}:{s1}", "TRIM_HORIZON")):
        dynamodb_client.put_item(TableName=kcl_table, Item=item)
    base = {k: v for k, v in os.environ.items() if not k.startswith("CONSUMER_")}
    env = {**base, **emulators.env(), "CONSUMER_LOG_LEVEL": "WARNING"}
    tables = ["--lease-table", names.lease_table, "--checkpoint-table", names.checkpoint_table]
    out = subprocess.run(
        [sys.executable, "-m", "consumer", "import-kcl", "--kcl-table", kcl_table, *tables, "--failover-millis", "300"],
        cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr

    child = tmp_path / "child.py"
    child.write_text(_CHILD.replace("/usr/bin/env python3", sys.executable))
    child.chmod(0o755)
    path = tmp_path / "app.properties"
    # LATEST: the KCL's default, and what matters here is that nothing comes from the initial position.
    path.write_text(f"executableName = child.py\nstreamName = {names.stream}\napplicationName = app\n")
    log = tmp_path / "daemon.log"
    env.update(
        CONSUMER_LOG_LEVEL="INFO", CONSUMER_IDLE_TIME_SECONDS="0.2", CONSUMER_SCAN_INTERVAL_SECONDS="0.5"
    )
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "consumer", "multilang", str(path), *tables],
            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip

    def said() -> str:
        return "".join(str(e["text"]) for e in events(log) if e.get("event") == "child_stderr")

    def stored() -> set[str]:
        items = dynamodb_client.scan(TableName=names.checkpoint_table, ConsistentRead=True)["Items"]
        return {i.get("sequence", {}).get("S", "") for i in items}

    try:
        wanted = {seqs[s0][-1], seqs[s1][-1]}  # each shard checkpointed at its last record: all taken
        wait_until(lambda: proc.poll() is not None or wanted <= stored(), 60, "both shards read to the end")
        assert proc.poll() is None, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    text = said()
    took = [line.split()[-1] for line in text.splitlines() if line.startswith("took ")]
    assert sorted(took) == sorted(seqs[s0][3:] + seqs[s1]), (
        text
    )  # after s0's checkpoint; all of s1; once each
    assert f"init {s0} {seqs[s0][2]}\n" in text, text
    assert f"init {s1} {int(seqs[s1][0]) - 1}\n" in text, text  # just before its first record, not at it
