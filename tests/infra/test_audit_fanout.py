"""prod synthesized once more with ``consumer.retrieval: fanout`` (no environment uses it today): the task role
allows every call a fan-out worker makes, and the read-age alarm watches a metric Kinesis publishes for it."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from aws_cdk import App

import app as entry

from .conftest import REPO_ROOT, _spark_jobs_dir
from .test_audit_iam import Stage, _denied, _stage, _task_environment

pytestmark = pytest.mark.infra


@pytest.fixture(scope="module")
def fanout_prod(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stage]:
    tmp = tmp_path_factory.mktemp("audit-fanout")
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
    yield _stage(templates, "prod")


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
