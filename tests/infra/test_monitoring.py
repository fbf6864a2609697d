"""Alarms and dashboard on the consumer's EMF metrics and the AWS service metrics."""

from __future__ import annotations

import json
from typing import Any

import pytest

from .cfn import render
from .conftest import ENVIRONMENTS, Synth

pytestmark = pytest.mark.infra

EMF_METRICS = (
    "RecordsProcessed",
    "MillisBehindLatest",
    "Checkpoints",
    "LeasesTaken",
    "LeasesLost",
    "HandoffLatencyMs",
    "HandoffsStalled",
    "DeadLettered",
    "ProcessorFailures",
    "RawWriteFailures",
)


def _alarms(synth: Synth, env: str) -> dict[str, dict[str, Any]]:
    """Alarm properties keyed by the construct id (logical id minus the Monitoring prefix and hash)."""
    return {
        k.removeprefix("Monitoring")[:-8]: r["Properties"]
        for k, r in synth.resources(env, "monitoring", "AWS::CloudWatch::Alarm").items()
    }


def _dimensions(alarm: dict[str, Any]) -> dict[str, str]:
    return {d["Name"]: render(d["Value"]) for d in alarm["Dimensions"]}


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_per_stream_alarms_use_the_application_stream_rollup(synth: Synth, env: str) -> None:
    settings = synth.settings[env]
    thresholds, application = settings["alarms"], settings["consumer"]["application"]
    alarms = _alarms(synth, env)
    expected = {
        "ConsumerLag": ("MillisBehindLatest", "Maximum", thresholds["consumer_lag_ms"]),
        "LeasesLost": ("LeasesLost", "Sum", thresholds["leases_lost_per_5_minutes"]),
        "HandoffLatency": ("HandoffLatencyMs", "p99", thresholds["handoff_latency_ms"]),
        "HandoffsStalled": ("HandoffsStalled", "Sum", 1),
        "HaltedShards": ("HaltedShards", "Maximum", 1),
        "ProcessorCallsSlow": ("ProcessorCallsSlow", "Maximum", 1),
        "ShardsGivenUp": ("ShardsGivenUp", "Sum", 1),
        "RawWriteFailures": ("RawWriteFailures", "Sum", 1),
    }
    for stream in (s["name"] for s in settings["streams"]):
        stream_id = stream.replace("-", "")
        for prefix, (metric, statistic, threshold) in expected.items():
            alarm = alarms[f"{prefix}{stream_id}"]
            assert alarm["Namespace"] == "KinesisFleetConsumer"
            assert alarm["MetricName"] == metric
            assert alarm.get("Statistic", alarm.get("ExtendedStatistic")) == statistic
            assert _dimensions(alarm) == {"Application": application, "Stream": stream}
            assert alarm["Threshold"] == threshold
        age = alarms[f"IteratorAge{stream_id}"]
        assert (age["Namespace"], age["MetricName"]) == ("AWS/Kinesis", "GetRecords.IteratorAgeMilliseconds")
        assert age["Threshold"] == thresholds["iterator_age_ms"]


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_fleet_alarms_and_their_actions(synth: Synth, env: str) -> None:
    alarms = _alarms(synth, env)
    dlq = alarms["DeadLetterQueueDepth"]
    assert (dlq["Namespace"], dlq["MetricName"]) == ("AWS/SQS", "ApproximateNumberOfMessagesVisible")
    assert "StateDeadLetterQueue" in _dimensions(dlq)["QueueName"]
    assert dlq["Threshold"] == synth.settings[env]["alarms"]["dlq_depth"]
    tasks = alarms["TasksBelowMinimum"]
    assert tasks["Threshold"] == synth.settings[env]["scaling"]["min_tasks"]
    assert tasks["ComparisonOperator"] == "LessThanThreshold"
    assert alarms["CompactionFailed"]["MetricName"] == "ExecutionsFailed"
    topic = synth.one(env, "monitoring", "AWS::SNS::Topic")["Properties"]
    assert render(topic["KmsMasterKeyId"]).startswith("MonitoringTopicKey")
    for name, alarm in alarms.items():
        actions = [render(a) for a in alarm["AlarmActions"]]
        assert len(actions) == 1 and actions[0].startswith("MonitoringAlarmTopic"), name


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_dashboard_shows_every_consumer_metric(synth: Synth, env: str) -> None:
    dashboard = synth.one(env, "monitoring", "AWS::CloudWatch::Dashboard")["Properties"]
    body = json.loads(render(dashboard["DashboardBody"]))
    plotted = {
        m[1]
        for widget in body["widgets"]
        for m in widget["properties"].get("metrics", [])
        if m and m[0] == "KinesisFleetConsumer"
    }
    assert plotted == set(EMF_METRICS)
    namespaces = {m[0] for w in body["widgets"] for m in w["properties"].get("metrics", []) if m}
    assert {"AWS/Kinesis", "AWS/SQS", "ECS/ContainerInsights", "AWS/States"} <= namespaces
