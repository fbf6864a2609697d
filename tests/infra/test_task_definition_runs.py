"""Run what each environment's task definition says, as a real ``python -m consumer`` process on the emulators.

For dev, staging and prod: the consumer container's environment and command are read from the synthesized task
definition (the command from the image's ENTRYPOINT, as the task definition sets none), the values that are
CloudFormation references are resolved the way CloudFormation would resolve them, and exactly that runs.
The only additions are what the emulators need to be reached: their endpoints and test credentials (and each
container's /tmp is a folder of its own). Nothing else (no region, no tuning) comes from the test, so a
setting the stacks get wrong, or leave out, fails here.

dev runs in a fresh virtualenv holding exactly what dev's image holds: its staged build context installed by
the Dockerfile's own build script (``dev_image_venv``), with the example processor project
(examples/latest-per-key) that cdk.json deploys there. Its side effect, each key's newest record in the
processor's own table, must be there after the run, and a write with an older epoch must be refused. While
it runs, the task definition's health check command must pass.

Before the run, the resources the environment names are created on the emulators from their templates: the
streams as the streaming stack defines them, the tables with the state stack's key schema, the queue, and the
raw bucket. The worker must start, take a lease on every shard, consume every record (per its EMF metrics,
the ones the scaling alarms watch) and, on SIGTERM, land them all in the raw bucket and exit 0. The three
environments' workers run side by side, each on resources of its own.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from .conftest import ENVIRONMENTS, REPO_ROOT, ImageVenv, Synth

pytestmark = [pytest.mark.infra, pytest.mark.integration]

DOCKERFILE = REPO_ROOT / "consumer" / "Dockerfile"
# What the test adds to the container's environment: how to reach the emulators, and credentials for them.
EMULATOR_ACCESS = (
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_KINESIS",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
)
RECORDS_PER_STREAM = 40
DEADLINE_S = 60.0


# ------------------------------------------------------------------------------------------ the container


def _dockerfile() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    lines = [line.strip() for line in text.splitlines()]
    return [
        (parts[0].upper(), parts[1] if len(parts) > 1 else "")
        for parts in (line.split(None, 1) for line in lines if line and not line.startswith("#"))
    ]


def _image_environment() -> dict[str, str]:
    """The runtime stage's own ``ENV`` (``K=V`` pairs), which the container starts with."""
    instructions = _dockerfile()
    runtime = max(i for i, (op, _) in enumerate(instructions) if op == "FROM")
    pairs = [item for op, args in instructions[runtime:] if op == "ENV" for item in args.split()]
    return dict(pair.split("=", 1) for pair in pairs)


IMAGE_PYTHON = "/opt/venv/bin/python"  # the runtime stage's interpreter (consumer/Dockerfile)


def _command(container: dict[str, Any], python: str) -> list[str]:
    """ENTRYPOINT + CMD as ECS combines them: the task definition's if set, else the image's."""
    image = dict(_dockerfile())
    entrypoint = container.get("EntryPoint") or json.loads(image["ENTRYPOINT"])
    command = container.get("Command") or (json.loads(image["CMD"]) if "CMD" in image else [])
    argv = [*entrypoint, *command]
    assert argv[0] == IMAGE_PYTHON, argv  # the image's virtualenv; here ``python``, which holds the same
    return [python, *argv[1:]]


def _own_tmp(value: str, home: Path) -> str:
    """Every container has a /tmp of its own; the workers here share a machine."""
    return str(home / "tmp" / value.removeprefix("/tmp/")) if value.startswith("/tmp/") else value


# ------------------------------------------------------------------------------- the resources it names


@dataclass
class LocalStack:
    """Physical names of what was created on the emulators, by (stack unit, logical id)."""

    env: str
    synth: Synth
    emulators: Any
    unique_name: Callable[..., str]
    physical: dict[tuple[str, str], str] = field(default_factory=dict)

    def stream_names(self) -> dict[str, dict[str, Any]]:
        """Stream name -> its properties in the streaming stack."""
        streams = self.synth.resources(self.env, "streaming", "AWS::Kinesis::Stream").values()
        return {s["Properties"]["Name"]: s["Properties"] for s in streams}

    def create_stream(self, name: str) -> list[str]:
        """The stream as its template defines it (replacing a leftover of an earlier run); its shard ids."""
        properties = self.stream_names()[name]
        kinesis = self.emulators.client("kinesis")
        if name in kinesis.list_streams()["StreamNames"]:
            kinesis.delete_stream(StreamName=name, EnforceConsumerDeletion=True)
            _wait(lambda: name not in kinesis.list_streams()["StreamNames"], f"{name} deleted")
        mode = properties["StreamModeDetails"]["StreamMode"]
        if mode == "ON_DEMAND":
            kinesis.create_stream(StreamName=name, StreamModeDetails={"StreamMode": "ON_DEMAND"})
        else:
            kinesis.create_stream(StreamName=name, ShardCount=int(properties["ShardCount"]))

        def active() -> bool:
            summary = kinesis.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]
            return bool(summary["StreamStatus"] == "ACTIVE")

        _wait(active, f"{name} ACTIVE")
        return [s["ShardId"] for s in kinesis.list_shards(StreamName=name)["Shards"]]

    def ref(self, unit: str, logical: str) -> str:
        """What ``{"Ref": logical}`` in stack ``unit`` is: created on first use, as its template defines it."""
        if (unit, logical) not in self.physical:
            resource = self.synth.template(self.env, unit)["Resources"][logical]
            properties, kind = resource["Properties"], resource["Type"]
            name = self.unique_name(logical[:20])
            if kind == "AWS::DynamoDB::Table":
                dynamodb = self.emulators.client("dynamodb")
                dynamodb.create_table(
                    TableName=name,
                    KeySchema=properties["KeySchema"],
                    AttributeDefinitions=properties["AttributeDefinitions"],
                    BillingMode="PAY_PER_REQUEST",
                )
                dynamodb.get_waiter("table_exists").wait(TableName=name)
                value = name  # Ref of a table: its name
            elif kind == "AWS::SQS::Queue":
                value = self.emulators.client("sqs").create_queue(QueueName=name)["QueueUrl"]  # Ref: its URL
            elif kind == "AWS::S3::Bucket":
                s3, region = self.emulators.client("s3"), self.emulators.region
                where = (
                    {}
                    if region == "us-east-1"
                    else {"CreateBucketConfiguration": {"LocationConstraint": region}}
                )
                s3.create_bucket(Bucket=name, **where)
                value = name  # Ref of a bucket: its name
            else:
                raise AssertionError(f"{unit}/{logical}: no local stand-in for a {kind}")
            self.physical[(unit, logical)] = value
        return self.physical[(unit, logical)]

    def resolve(self, value: Any) -> str:
        """CloudFormation's part: a literal stays; ``Ref AWS::Region`` is the region deployed to;
        ``Fn::GetStackOutput`` is the producing stack's output, here a ``Ref`` of one of its resources."""
        if isinstance(value, str):
            return value
        ((fn, arg),) = value.items()
        if fn == "Ref" and arg == "AWS::Region":
            return str(self.emulators.region)
        if fn == "Fn::GetStackOutput":
            unit = arg["StackName"].removeprefix(f"kinesis-fleet-{self.env}-")
            output = self.synth.template(self.env, unit)["Outputs"][arg["OutputName"]]["Value"]
            assert set(output) == {"Ref"}, f"{arg['OutputName']}: only Refs are resolved here, got {output}"
            return self.ref(unit, output["Ref"])
        if fn == "Fn::Join":
            separator, parts = arg
            return str(separator).join(self.resolve(p) for p in parts)
        raise AssertionError(f"no resolution for {value}")


def _wait(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


# ------------------------------------------------------------------------------------------- the process


class Worker:
    """The running process; stdout (EMF metric documents) and stderr (JSON log lines) collected as they come."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        self.proc = subprocess.Popen(
            argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self._terminated = False
        self._threads = [
            threading.Thread(target=self._pump, args=(self.proc.stdout, self.stdout), daemon=True),
            threading.Thread(target=self._pump, args=(self.proc.stderr, self.stderr), daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    @staticmethod
    def _pump(stream: Any, into: list[str]) -> None:
        for line in stream:
            into.append(line)

    def metrics(self) -> list[dict[str, Any]]:
        docs = []
        for line in list(self.stdout):
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict) and "_aws" in doc:
                docs.append(doc)
        return docs

    def tail(self) -> str:
        return "".join(self.stderr[-40:])

    def wait_for(self, condition: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while not condition():
            code = self.proc.poll()
            assert code is None, f"the worker exited ({code}) before {what}:\n{self.tail()}"
            assert time.monotonic() < deadline, f"timed out waiting for {what}:\n{self.tail()}"
            time.sleep(0.2)

    def terminate(self) -> None:
        """SIGTERM, once."""
        if self.proc.poll() is None and not self._terminated:
            self.proc.send_signal(signal.SIGTERM)
        self._terminated = True

    def stop(self) -> int:
        self.terminate()
        try:
            code = self.proc.wait(timeout=60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(timeout=10)
            for thread in self._threads:
                thread.join(timeout=5)
        return code


def _container(synth: Synth, env: str) -> dict[str, Any]:
    task = synth.one(env, "consumer", "AWS::ECS::TaskDefinition")
    (container,) = task["Properties"]["ContainerDefinitions"]
    return dict(container)


def _landed(s3: Any, bucket: str, prefix: str) -> list[dict[str, Any]]:
    """Every line of every raw object under ``prefix/``."""
    lines: list[dict[str, Any]] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/"):
        for item in page.get("Contents", []):
            body = s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
            lines.extend(json.loads(line) for line in gzip.decompress(body).splitlines() if line.strip())
    return lines


@dataclass
class Run:
    """One environment's worker, started as its task definition says, and what it must consume."""

    env: str
    worker: Worker
    task_env: dict[str, str]
    shards: dict[str, list[str]]
    emulators: Any  # in the task's region

    @property
    def streams(self) -> list[str]:
        return list(self.shards)

    def leased(self) -> set[tuple[str, str]]:
        metrics = self.worker.metrics()
        return {(d["Stream"], d["Shard"]) for d in metrics if d.get("LeasesTaken") and "Shard" in d}

    def processed(self, stream: str) -> float:
        metrics = self.worker.metrics()
        return sum(d.get("RecordsProcessed", 0) for d in metrics if d["Stream"] == stream and "Shard" in d)


def _start(
    env: str, synth: Synth, emulators: Any, unique_name: Callable[..., str], home: Path, python: str
) -> Run:
    container = _container(synth, env)
    # Where cdk.json names the region (prod), the task says it literally: its resources live in that region.
    emulators = dataclasses.replace(emulators, region=synth.settings[env].get("region") or emulators.region)
    local = LocalStack(env, synth, emulators, unique_name)
    (home / "tmp").mkdir(parents=True)
    task_env = {e["Name"]: _own_tmp(local.resolve(e["Value"]), home) for e in container["Environment"]}
    streams = task_env["CONSUMER_STREAMS"].split(",")
    shards = {stream: local.create_stream(stream) for stream in streams}

    # Records first: the worker starts at TRIM_HORIZON (no checkpoint yet) and must consume all of them.
    run = uuid.uuid4().hex[:8]
    kinesis = emulators.client("kinesis")
    for stream in streams:
        entries = [
            {"Data": json.dumps({"run": run, "stream": stream, "n": n}).encode(), "PartitionKey": f"key-{n}"}
            for n in range(RECORDS_PER_STREAM)
        ]
        assert kinesis.put_records(StreamName=stream, Records=entries).get("FailedRecordCount", 0) == 0

    access = emulators.env()
    process_env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),  # what any container has; HOME without AWS config
        "HOME": str(home),
        **{k: _own_tmp(v, home) for k, v in _image_environment().items()},
        **task_env,
        **{key: access[key] for key in EMULATOR_ACCESS},
    }
    return Run(env, Worker(_command(container, python), process_env, home), task_env, shards, emulators)


def _consumes_everything(run: Run) -> None:
    every_shard = {(stream, shard) for stream, ids in run.shards.items() for shard in ids}
    run.worker.wait_for(
        lambda: run.leased() >= every_shard, f"{run.env}: a lease on every shard of {run.streams}"
    )
    run.worker.wait_for(
        lambda: all(run.processed(s) >= RECORDS_PER_STREAM for s in run.streams),
        f"{run.env}: {RECORDS_PER_STREAM} records per stream",
    )
    # The scaling alarms watch MillisBehindLatest by Application and Stream: the worker must report it so.
    lag = [d for d in run.worker.metrics() if "MillisBehindLatest" in d]
    assert {d["Stream"] for d in lag} == set(run.streams), run.env
    assert {d["Application"] for d in run.worker.metrics()} == {run.task_env["CONSUMER_APPLICATION"]}, run.env


def _landed_everything(run: Run, emulators: Any) -> None:
    task_env = run.task_env
    landed = _landed(emulators.client("s3"), task_env["CONSUMER_RAW_BUCKET"], task_env["CONSUMER_RAW_PREFIX"])
    # Fresh streams and a fresh bucket: every raw line is one of ours. Stream and partition key are kept by
    # every version of the raw format (docs/data-format.md), whatever the payload's encoding.
    assert {(line["stream"], line["partition_key"]) for line in landed} == {
        (stream, f"key-{n}") for stream in run.streams for n in range(RECORDS_PER_STREAM)
    }, run.env
    assert len(landed) >= len(run.streams) * RECORDS_PER_STREAM, run.env


def _health_check_passes(run: Run, synth: Synth, python: str) -> None:
    """The task definition's health check command, run beside the worker as ECS runs it in the container."""
    check = _container(synth, run.env)["HealthCheck"]["Command"]
    assert check[0] == "CMD" and check[1] == IMAGE_PYTHON, check
    done = subprocess.run([python, *check[2:]], env=_env_of(run), capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"{run.env}: {done.stdout}{done.stderr}"
    assert done.stdout.startswith("healthy"), done.stdout


def _env_of(run: Run) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **run.task_env}


def _newest_per_key_is_fenced(run: Run, emulators: Any) -> None:
    """The example's side effect: every key's newest record in its table, written under the shard's epoch;
    a write carrying an older epoch is refused by the table's condition."""
    from latest_per_key.table import FencedLatestTable, StaleEpochError

    from consumer.records import Record

    table = run.task_env["LATEST_TABLE"]
    dynamodb = emulators.client("dynamodb")
    items = {i["key"]["S"]: i for i in dynamodb.scan(TableName=table, ConsistentRead=True)["Items"]}
    (stream,) = run.streams
    assert set(items) == {f"key-{n}" for n in range(RECORDS_PER_STREAM)}, run.env
    for n in range(RECORDS_PER_STREAM):
        item = items[f"key-{n}"]
        assert json.loads(item["data"]["B"])["n"] == n and item["shard"]["S"] in run.shards[stream]
        assert int(item["epoch"]["N"]) >= 1
    key, item = "key-0", items["key-0"]
    stale = Record(
        stream=stream,
        shard_id=item["shard"]["S"],
        sequence_number="9" * 56,  # even a later position
        sub_sequence_number=0,
        partition_key=key,
        data=b'{"stale": true}',
        approximate_arrival=datetime.now(UTC),
    )
    with pytest.raises(StaleEpochError):
        FencedLatestTable(dynamodb, table).upsert(item["shard"]["S"], int(item["epoch"]["N"]) - 1, stale)
    after = dynamodb.get_item(TableName=table, Key={"key": {"S": key}}, ConsistentRead=True)["Item"]
    assert after == item


def test_each_environments_task_definition_runs_a_consuming_worker(
    synth: Synth,
    emulators: Any,
    unique_name: Callable[..., str],
    worker_processes: list[Worker],
    tmp_path: Path,
    dev_image_venv: ImageVenv,
) -> None:
    """The three environments' workers run side by side, each on resources of its own; dev's from the
    virtualenv its image's build installs, with the example processor."""
    pythons = {env: sys.executable for env in ENVIRONMENTS} | {"dev": str(dev_image_venv.python)}
    runs = []
    for env in ENVIRONMENTS:
        runs.append(_start(env, synth, emulators, unique_name, tmp_path / env, pythons[env]))
        worker_processes.append(runs[-1].worker)
    for run in runs:
        _consumes_everything(run)
    _health_check_passes(runs[0], synth, pythons["dev"])
    for run in runs:  # SIGTERM: each lands what it consumed in the raw bucket and exits 0
        run.worker.terminate()
    for run in runs:
        assert run.worker.stop() == 0, f"{run.env}: {run.worker.tail()}"
        _landed_everything(run, run.emulators)
    _newest_per_key_is_fenced(runs[0], runs[0].emulators)
