"""Enhanced fan-out (``consumer.retrieval: fanout``): the task is told to use it and may register and subscribe.

No environment uses fan-out today, so this synthesizes prod once more with it turned on.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App

import app as entry

from .cfn import as_list, logical_id, render, statements_of
from .conftest import REPO_ROOT, _spark_jobs_dir
from .test_task_role_calls import Stage, _denied, _stage, _task_environment

pytestmark = pytest.mark.infra


@pytest.fixture(scope="module")
def fanout_assembly(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]]:
    """prod's templates (by unit: consumer, monitoring, ...) with fan-out on, and the consumer stack's cdk-nag
    messages."""
    tmp = tmp_path_factory.mktemp("fanout")
    context = copy.deepcopy(entry.cdk_json_context(REPO_ROOT))
    context["environments"]["prod"]["consumer"]["retrieval"] = "fanout"
    context.update({"env": "prod", "@aws-cdk/core:failSynthOnValidationErrors": False})
    cdk_app = App(context=context, outdir=str(tmp / "cdk.out"))
    entry.build(cdk_app, REPO_ROOT, spark_jobs=_spark_jobs_dir(tmp))
    assembly = cdk_app.synth().get_nested_assembly("assembly-prod")
    templates = {
        s.stack_name.removeprefix("kinesis-fleet-prod-"): json.loads(Path(s.template_full_path).read_text())
        for s in assembly.stacks
    }
    (stack,) = [s for s in assembly.stacks if s.stack_name == "kinesis-fleet-prod-consumer"]
    messages = [{"path": m.id, "type": m.entry.type, "data": m.entry.data} for m in stack.messages]
    yield templates, messages


@pytest.fixture(scope="module")
def fanout(
    fanout_assembly: tuple[dict[str, dict[str, Any]], list[dict[str, Any]]],
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The prod consumer template with fan-out on, and the stack's cdk-nag messages."""
    templates, messages = fanout_assembly
    return templates["consumer"], messages


@pytest.fixture(scope="module")
def fanout_prod(fanout_assembly: tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]) -> Stage:
    """The same templates, resolved as CloudFormation would (test_task_role_calls.py)."""
    return _stage(fanout_assembly[0], "prod")


def test_the_task_is_told_to_use_fanout_under_its_application_name(
    fanout: tuple[dict[str, Any], list[dict[str, Any]]],
) -> None:
    template, _ = fanout
    (task,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::ECS::TaskDefinition"]
    (container,) = task["Properties"]["ContainerDefinitions"]
    variables = {e["Name"]: render(e["Value"]) for e in container["Environment"]}
    assert variables["CONSUMER_RETRIEVAL"] == "fanout"
    assert variables["CONSUMER_FANOUT_NAME"] == variables["CONSUMER_APPLICATION"] == "kinesis-fleet-prod"


def test_fanout_grants_act_on_the_stream_and_on_the_consumer(
    fanout: tuple[dict[str, Any], list[dict[str, Any]]],
) -> None:
    """Register/List act on the stream; Subscribe/DescribeStreamConsumer on the consumer's own ARN
    (``<stream ARN>/consumer/<name>:<creation time>``), which a grant on the stream ARN does not cover."""
    template, _ = fanout
    role = logical_id(template, "AWS::IAM::Role", "TaskRole")
    granted: dict[str, set[str]] = {}
    for statement in statements_of(template, role):
        assert statement["Effect"] == "Allow" and "Condition" not in statement
        for action in as_list(statement["Action"]):
            granted.setdefault(action, set()).update(render(r) for r in as_list(statement["Resource"]))
    streams = {
        render(r)
        for r in granted["kinesis:GetRecords"]  # the stream ARNs, as the read grant names them
    }
    assert len(streams) == 2 and all("Streamskinesisfleetprod" in s for s in streams)
    assert streams <= granted["kinesis:RegisterStreamConsumer"]
    assert streams <= granted["kinesis:ListStreamConsumers"]
    consumers = {f"{s}/consumer/kinesis-fleet-prod:*" for s in streams}
    assert consumers <= granted["kinesis:SubscribeToShard"]
    assert consumers <= granted["kinesis:DescribeStreamConsumer"]


def test_fanout_grants_are_explained_to_cdk_nag(fanout: tuple[dict[str, Any], list[dict[str, Any]]]) -> None:
    _, messages = fanout
    findings = [
        str(m["data"]).splitlines()[0]
        for m in messages
        if m["type"] in ("aws:cdk:error", "aws:cdk:warning") and "AwsSolutions-" in str(m["data"])
    ]
    assert findings == []


def test_with_fanout_the_task_role_allows_every_call_the_consumer_makes(fanout_prod: Stage) -> None:
    assert _task_environment(fanout_prod)["CONSUMER_RETRIEVAL"] == "fanout"
    assert _denied(fanout_prod, None) == []


def test_with_fanout_kinesis_alarms_watch_metrics_kinesis_publishes_for_the_fleet(fanout_prod: Stage) -> None:
    """A fan-out fleet makes no GetRecords call, so ``GetRecords.*`` never gets a data point (and an alarm
    that treats missing data as fine stays OK forever); Kinesis publishes ``SubscribeToShardEvent.*`` per
    stream and stream consumer instead."""
    consumer_name = _task_environment(fanout_prod)["CONSUMER_FANOUT_NAME"]
    streams = {
        r["Properties"]["Name"]
        for r in fanout_prod.templates["streaming"]["Resources"].values()
        if r["Type"] == "AWS::Kinesis::Stream"
    }
    watched = {}
    for lid, alarm in fanout_prod.templates["monitoring"]["Resources"].items():
        props = alarm["Properties"]
        if alarm["Type"] != "AWS::CloudWatch::Alarm" or props.get("Namespace") != "AWS/Kinesis":
            continue
        dimensions = {d["Name"]: fanout_prod.resolve("monitoring", d["Value"]) for d in props["Dimensions"]}
        watched[lid] = (props["MetricName"], dimensions)
    assert len(watched) == len(streams) == 2
    for metric, dimensions in watched.values():
        assert metric == "SubscribeToShardEvent.MillisBehindLatest"
        assert dimensions["ConsumerName"] == consumer_name and dimensions["StreamName"] in streams
    assert {d["StreamName"] for _, d in watched.values()} == streams
