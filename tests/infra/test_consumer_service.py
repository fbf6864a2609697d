"""The consumer service: timeouts in order, contract environment, scaling bounds, capacity, least privilege."""

from __future__ import annotations

from typing import Any

import pytest

from .cfn import as_list, logical_id, render, statements_of
from .conftest import ENVIRONMENTS, Synth

pytestmark = pytest.mark.infra

CONTRACT = {
    "CONSUMER_APPLICATION",
    "CONSUMER_STREAMS",
    "CONSUMER_PROCESSOR",
    "CONSUMER_LEASE_TABLE",
    "CONSUMER_CHECKPOINT_TABLE",
    "CONSUMER_DLQ_URL",
    "CONSUMER_ON_FAILURE",
    "CONSUMER_LEASE_DURATION_SECONDS",
    "CONSUMER_SHUTDOWN_DEADLINE_SECONDS",
    "CONSUMER_RAW_BUCKET",
    "CONSUMER_RAW_PREFIX",
    "AWS_REGION",
}


def _container(synth: Synth, env: str) -> dict[str, Any]:
    task = synth.one(env, "consumer", "AWS::ECS::TaskDefinition")
    (container,) = task["Properties"]["ContainerDefinitions"]
    return dict(container)


def _environment(synth: Synth, env: str) -> dict[str, str]:
    return {e["Name"]: render(e["Value"]) for e in _container(synth, env)["Environment"]}


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_environment_is_the_consumer_contract(synth: Synth, env: str) -> None:
    settings = synth.settings[env]
    variables = _environment(synth, env)
    assert set(variables) == CONTRACT
    assert variables["CONSUMER_APPLICATION"] == settings["consumer"]["application"]
    assert variables["CONSUMER_STREAMS"] == ",".join(s["name"] for s in settings["streams"])
    assert variables["CONSUMER_PROCESSOR"] == "consumer.sinks.raw_s3:RawS3Sink"
    assert variables["CONSUMER_ON_FAILURE"] in {"dlq", "halt"}
    assert "StateLeaseTable" in variables["CONSUMER_LEASE_TABLE"]
    assert "StateCheckpointTable" in variables["CONSUMER_CHECKPOINT_TABLE"]
    assert "StateDeadLetterQueue" in variables["CONSUMER_DLQ_URL"]
    assert "DataLakeRaw" in variables["CONSUMER_RAW_BUCKET"]
    assert variables["CONSUMER_RAW_PREFIX"] == "raw"
    assert variables["AWS_REGION"] == "AWS::Region"
    assert (
        float(variables["CONSUMER_LEASE_DURATION_SECONDS"]) == settings["consumer"]["lease_duration_seconds"]
    )


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_stop_timeout_exceeds_the_workers_shutdown_deadline(synth: Synth, env: str) -> None:
    container = _container(synth, env)
    deadline = float(_environment(synth, env)["CONSUMER_SHUTDOWN_DEADLINE_SECONDS"])
    assert deadline < container["StopTimeout"] <= 120
    assert container["LinuxParameters"]["InitProcessEnabled"] is True
    assert "EntryPoint" not in container and "Command" not in container  # the image's exec-form entrypoint
    assert container["LogConfiguration"]["LogDriver"] == "awslogs"  # EMF metrics travel in the logs


@pytest.mark.parametrize("env", ["staging", "prod"])
def test_ec2_capacity_drains_before_termination(synth: Synth, env: str) -> None:
    stop_timeout = _container(synth, env)["StopTimeout"]
    hook = synth.one(env, "consumer", "AWS::AutoScaling::LifecycleHook")["Properties"]
    assert hook["LifecycleTransition"] == "autoscaling:EC2_INSTANCE_TERMINATING"
    assert hook["HeartbeatTimeout"] > stop_timeout
    assert hook["DefaultResult"] == "CONTINUE"
    provider = synth.one(env, "consumer", "AWS::ECS::CapacityProvider")["Properties"]
    asg_provider = provider["AutoScalingGroupProvider"]
    assert asg_provider["ManagedScaling"]["Status"] == "ENABLED"
    assert asg_provider["ManagedTerminationProtection"] == "ENABLED"
    assert asg_provider["ManagedDraining"] == "ENABLED"
    group = synth.one(env, "consumer", "AWS::AutoScaling::AutoScalingGroup")["Properties"]
    assert group["NewInstancesProtectedFromScaleIn"] is True
    capacity = synth.settings[env]["capacity"]
    assert (int(group["MinSize"]), int(group["MaxSize"])) == (
        capacity["min_instances"],
        capacity["max_instances"],
    )
    template = synth.one(env, "consumer", "AWS::EC2::LaunchTemplate")["Properties"]["LaunchTemplateData"]
    assert template["MetadataOptions"]["HttpTokens"] == "required"
    assert template["InstanceType"] == capacity["instance_type"]
    assert all(d["Ebs"]["Encrypted"] for d in template["BlockDeviceMappings"])
    service = synth.one(env, "consumer", "AWS::ECS::Service")["Properties"]
    (strategy,) = service["CapacityProviderStrategy"]
    assert render(strategy["CapacityProvider"]).startswith("ConsumerCapacityCapacityProvider")


def test_dev_runs_on_fargate(synth: Synth) -> None:
    assert not synth.resources("dev", "consumer", "AWS::AutoScaling::AutoScalingGroup")
    assert not synth.resources("dev", "consumer", "AWS::AutoScaling::LifecycleHook")
    service = synth.one("dev", "consumer", "AWS::ECS::Service")["Properties"]
    assert service["CapacityProviderStrategy"] == [{"CapacityProvider": "FARGATE", "Weight": 1}]
    task = synth.one("dev", "consumer", "AWS::ECS::TaskDefinition")["Properties"]
    assert task["RequiresCompatibilities"] == ["FARGATE"]


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_scaling_is_bounded_by_shards_plus_standbys(synth: Synth, env: str) -> None:
    settings = synth.settings[env]
    shards = sum(s["shard_count"] for s in settings["streams"])
    target = synth.one(env, "consumer", "AWS::ApplicationAutoScaling::ScalableTarget")["Properties"]
    assert target["ScalableDimension"] == "ecs:service:DesiredCount"
    assert target["MinCapacity"] == settings["scaling"]["min_tasks"]
    assert target["MaxCapacity"] == settings["scaling"]["max_tasks"]
    assert target["MaxCapacity"] <= shards + settings["scaling"]["standby_tasks"]
    policies = synth.resources(env, "consumer", "AWS::ApplicationAutoScaling::ScalingPolicy")
    adjustments = sorted(
        a["ScalingAdjustment"]
        for p in policies.values()
        for a in p["Properties"]["StepScalingPolicyConfiguration"]["StepAdjustments"]
    )
    assert adjustments == [-1, 1, 3]


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_scaling_alarms_watch_consumer_lag(synth: Synth, env: str) -> None:
    settings = synth.settings[env]
    alarms = synth.resources(env, "consumer", "AWS::CloudWatch::Alarm")
    assert len(alarms) == 2
    thresholds = sorted(a["Properties"]["Threshold"] for a in alarms.values())
    assert thresholds == [settings["scaling"]["lag_target_ms"] // 10, settings["scaling"]["lag_target_ms"]]
    for alarm in alarms.values():
        props = alarm["Properties"]
        metrics = props.get("Metrics") or [{"MetricStat": {"Metric": props}}]
        stats = [m["MetricStat"]["Metric"] for m in metrics if "MetricStat" in m]
        assert len(stats) == len(settings["streams"])
        for metric in stats:
            assert metric["Namespace"] == "KinesisFleetConsumer"
            assert metric["MetricName"] == "MillisBehindLatest"
            assert {d["Name"] for d in metric["Dimensions"]} == {"Application", "Stream"}
        assert any("ScaleOut" in render(a) or "ScaleIn" in render(a) for a in props["AlarmActions"])


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_task_role_reaches_only_its_own_resources(synth: Synth, env: str) -> None:
    template = synth.template(env, "consumer")
    role = logical_id(template, "AWS::IAM::Role", "TaskRole")
    grants: dict[str, set[str]] = {}
    for statement in statements_of(template, role):
        assert statement["Effect"] == "Allow"
        resources = {render(r) for r in as_list(statement["Resource"])}
        assert "*" not in resources
        for action in as_list(statement["Action"]):
            grants.setdefault(action.split(":")[0], set()).update(resources)
    assert set(grants) == {"kinesis", "kms", "dynamodb", "sqs", "s3"}
    streams = synth.settings[env]["streams"]
    assert len(grants["kinesis"]) == len(streams)
    assert all("streaming:" in r and "Streamskinesisfleet" in r for r in grants["kinesis"])
    assert {r.split("FnGetAtt")[1].split("Table")[0] for r in grants["dynamodb"]} == {
        "StateLease",
        "StateCheckpoint",
    }
    assert len(grants["sqs"]) == 1 and "StateDeadLetterQueue" in next(iter(grants["sqs"]))
    (raw,) = grants["s3"]
    assert "DataLakeRaw" in raw and raw.endswith("/raw/*")
    assert {r.split("FnGetAtt")[1].split("Key")[0] for r in grants["kms"]} == {"Streams", "State", "DataLake"}


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_network_and_cluster(synth: Synth, env: str) -> None:
    flow_log = synth.one(env, "consumer", "AWS::EC2::FlowLog")["Properties"]
    assert flow_log["TrafficType"] == "ALL" and flow_log["ResourceType"] == "VPC"
    cluster = synth.one(env, "consumer", "AWS::ECS::Cluster")["Properties"]
    assert {"Name": "containerInsights", "Value": "enabled"} in cluster["ClusterSettings"]
    endpoints = synth.resources(env, "consumer", "AWS::EC2::VPCEndpoint")
    assert {render(e["Properties"]["ServiceName"]).split(".")[-1] for e in endpoints.values()} == {
        "s3",
        "dynamodb",
    }
    groups = synth.resources(env, "consumer", "AWS::EC2::SecurityGroup")
    assert not synth.resources(env, "consumer", "AWS::EC2::SecurityGroupIngress")
    assert all("SecurityGroupIngress" not in g["Properties"] for g in groups.values())
    tasks = groups[
        logical_id(synth.template(env, "consumer"), "AWS::EC2::SecurityGroup", "TaskSecurityGroup")
    ]
    assert [(r["FromPort"], r["ToPort"]) for r in tasks["Properties"]["SecurityGroupEgress"]] == [(443, 443)]
