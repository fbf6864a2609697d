"""The consumer service: timeouts in order, contract environment, scaling bounds, capacity, least privilege."""

from __future__ import annotations

import json
from typing import Any

import pytest

from .cfn import as_list, logical_id, render, statements_of
from .conftest import ENVIRONMENTS, REPO_ROOT, Synth, arn_parts

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
    "CONSUMER_RETRIEVAL",
    "CONSUMER_HEALTH_FILE",
    "CONSUMER_HEALTH_MAX_AGE_SECONDS",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
}


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_every_consumer_variable_the_task_sets_is_one_the_consumer_reads_by_its_current_name(
    synth: Synth, env: str
) -> None:
    from consumer.env_vars import ENV_VARS, PROCESSOR_ENV_VARS
    from consumer.settings.raw_sink import DEPRECATED_RAW_VARIABLES

    read = {v.name for v in (*ENV_VARS, *PROCESSOR_ENV_VARS)}
    variables = set(_environment(synth, env))
    assert {v for v in variables if v.startswith("CONSUMER_")} <= read
    assert not variables & set(DEPRECATED_RAW_VARIABLES)


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
    table = settings["consumer"].get("processor_table")
    # The processor's own table, where cdk.json gives it one, under the variable cdk.json names.
    assert set(variables) == CONTRACT | ({table["variable"]} if table else set())
    if table:
        assert "StateProcessorTable" in variables[table["variable"]]
    assert variables["CONSUMER_APPLICATION"] == settings["consumer"]["application"]
    assert variables["CONSUMER_STREAMS"] == ",".join(s["name"] for s in settings["streams"])
    assert variables["CONSUMER_PROCESSOR"] == settings["consumer"]["processor"]
    assert variables["CONSUMER_ON_FAILURE"] in {"dlq", "halt"}
    assert "StateLeaseTable" in variables["CONSUMER_LEASE_TABLE"]
    assert "StateCheckpointTable" in variables["CONSUMER_CHECKPOINT_TABLE"]
    assert "StateDeadLetterQueue" in variables["CONSUMER_DLQ_URL"]
    assert "DataLakeRaw" in variables["CONSUMER_RAW_BUCKET"]
    assert variables["CONSUMER_RAW_PREFIX"] == "raw"
    assert variables["CONSUMER_RETRIEVAL"] == settings["consumer"]["retrieval"] == "polling"
    # botocore reads AWS_DEFAULT_REGION, and on EC2 the ECS agent adds neither variable when one is set.
    assert variables["AWS_REGION"] == variables["AWS_DEFAULT_REGION"] == arn_parts(synth.settings, env)[1]
    assert (
        float(variables["CONSUMER_LEASE_DURATION_SECONDS"]) == settings["consumer"]["lease_duration_seconds"]
    )


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_stop_timeout_exceeds_the_workers_shutdown_deadline(synth: Synth, env: str) -> None:
    container = _container(synth, env)
    deadline = float(_environment(synth, env)["CONSUMER_SHUTDOWN_DEADLINE_SECONDS"])
    # the deadline, then up to twice the final checkpoint timeout for a processor call that does not return
    assert deadline + 2 * min(5.0, deadline) < container["StopTimeout"] <= 120
    assert "CONSUMER_FINAL_CHECKPOINT_TIMEOUT_SECONDS" not in _environment(synth, env)  # min(5, deadline)
    assert container["LinuxParameters"]["InitProcessEnabled"] is True
    assert "EntryPoint" not in container and "Command" not in container  # the image's exec-form entrypoint
    assert container["LogConfiguration"]["LogDriver"] == "awslogs"  # EMF metrics travel in the logs


@pytest.mark.parametrize("env", ["staging", "prod"])
def test_ec2_capacity_drains_through_ecs(synth: Synth, env: str) -> None:
    # No lifecycle hook of our own: ECS managed draining brings its own, and one without a target would only
    # hold every terminating instance (empty ones included) for its whole timeout.
    assert not synth.resources(env, "consumer", "AWS::AutoScaling::LifecycleHook")
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


@pytest.mark.parametrize("env", ["staging", "prod"])
def test_spot_interruptions_drain_the_instance(synth: Synth, env: str) -> None:
    template = synth.one(env, "consumer", "AWS::EC2::LaunchTemplate")["Properties"]["LaunchTemplateData"]
    user_data = render(template["UserData"]["Fn::Base64"])
    assert "echo ECS_ENABLE_SPOT_INSTANCE_DRAINING=true >> /etc/ecs/ecs.config" in user_data


@pytest.mark.parametrize("env", ["staging", "prod"])
def test_capacity_holds_a_whole_deployment_with_room_to_spare(synth: Synth, env: str) -> None:
    """At scaling.max_tasks a 100%/200% deployment runs twice the tasks: the group at its maximum holds them,
    and managed scaling keeps spare instances so a deployment or a drain need not wait for a launch."""
    from stacks.config import INSTANCE_TYPES

    provider = synth.one(env, "consumer", "AWS::ECS::CapacityProvider")["Properties"]
    target_capacity = provider["AutoScalingGroupProvider"]["ManagedScaling"]["TargetCapacity"]
    assert target_capacity == synth.settings[env]["capacity"]["target_capacity_percent"] < 100
    template = synth.one(env, "consumer", "AWS::EC2::LaunchTemplate")["Properties"]["LaunchTemplateData"]
    task = synth.one(env, "consumer", "AWS::ECS::TaskDefinition")["Properties"]
    (container,) = task["ContainerDefinitions"]
    assert task["NetworkMode"] == "awsvpc"  # one ENI per task
    per_instance = INSTANCE_TYPES[template["InstanceType"]].tasks_per_instance(
        container["Cpu"], container["Memory"]
    )
    max_instances = int(
        synth.one(env, "consumer", "AWS::AutoScaling::AutoScalingGroup")["Properties"]["MaxSize"]
    )
    max_tasks = synth.one(env, "consumer", "AWS::ApplicationAutoScaling::ScalableTarget")["Properties"][
        "MaxCapacity"
    ]
    deployment = synth.one(env, "consumer", "AWS::ECS::Service")["Properties"]["DeploymentConfiguration"]
    during_deploy = -(-max_tasks * deployment["MaximumPercent"] // 100)
    assert max_instances * per_instance >= during_deploy


def test_instance_sizes_count_enis_cpu_and_memory() -> None:
    from stacks.config import INSTANCE_TYPES

    m6i_large = INSTANCE_TYPES["m6i.large"]
    assert m6i_large.tasks_per_instance(512, 1024) == 2  # 3 ENIs, one the instance's own
    assert m6i_large.tasks_per_instance(2048, 1024) == 1  # 2 vCPUs
    assert INSTANCE_TYPES["c6i.large"].tasks_per_instance(512, 2048) == 1  # 4 GiB less the agent's share
    assert INSTANCE_TYPES["m6i.4xlarge"].tasks_per_instance(512, 1024) == 7


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_service_waits_for_the_capacity_provider_association(synth: Synth, env: str) -> None:
    """Created before the association, the service fails ("capacity provider is not associated with the
    cluster"); deleted after it, the association fails ("capacity provider is in use")."""
    template = synth.template(env, "consumer")
    association = logical_id(template, "AWS::ECS::ClusterCapacityProviderAssociations", "Cluster")
    service = template["Resources"][logical_id(template, "AWS::ECS::Service", "Service")]
    assert association in as_list(service.get("DependsOn", []))
    strategy = {render(s["CapacityProvider"]) for s in service["Properties"]["CapacityProviderStrategy"]}
    associated = template["Resources"][association]["Properties"]["CapacityProviders"]
    assert strategy <= {render(p) for p in associated}


@pytest.mark.parametrize("env", ["staging", "prod"])
def test_capacity_provider_comes_after_the_cluster(synth: Synth, env: str) -> None:
    """Creating the cluster makes ECS create its service-linked role, which managed scaling needs."""
    template = synth.template(env, "consumer")
    cluster = logical_id(template, "AWS::ECS::Cluster", "Cluster")
    provider = template["Resources"][logical_id(template, "AWS::ECS::CapacityProvider", "Capacity")]
    assert cluster in as_list(provider.get("DependsOn", []))


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
def test_scale_out_steps_are_the_documented_multiples_of_the_target(synth: Synth, env: str) -> None:
    """docs/infrastructure.md: +1 task at or above the target, +3 above 4x the target."""
    target = synth.settings[env]["scaling"]["lag_target_ms"]
    assert "+1 task, +3 above 4x the target" in (REPO_ROOT / "docs" / "infrastructure.md").read_text()
    alarms = synth.resources(env, "consumer", "AWS::CloudWatch::Alarm")
    (threshold,) = [a["Properties"]["Threshold"] for k, a in alarms.items() if "LagAboveTarget" in k]
    assert threshold == target
    policies = synth.resources(env, "consumer", "AWS::ApplicationAutoScaling::ScalingPolicy")
    (scale_out,) = [p for k, p in policies.items() if "ScaleOut" in k]
    steps = {
        a["ScalingAdjustment"]: (a.get("MetricIntervalLowerBound"), a.get("MetricIntervalUpperBound"))
        for a in scale_out["Properties"]["StepScalingPolicyConfiguration"]["StepAdjustments"]
    }
    # Step bounds are offsets from the alarm threshold.
    assert steps == {1: (0, 3 * target), 3: (3 * target, None)}
    assert threshold + steps[3][0] == 4 * target


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_scaling_uses_the_ecs_service_linked_role(synth: Synth, env: str) -> None:
    """Application Auto Scaling acts on ECS through its service-linked role; no unused role is created."""
    target = synth.one(env, "consumer", "AWS::ApplicationAutoScaling::ScalableTarget")["Properties"]
    partition, _, account = arn_parts(synth.settings, env)
    assert render(target["RoleARN"]) == (
        f"arn:{partition}:iam::{account}:role/aws-service-role/ecs.application-autoscaling.amazonaws.com"
        "/AWSServiceRoleForApplicationAutoScaling_ECSService"
    )
    roles = synth.resources(env, "consumer", "AWS::IAM::Role").values()
    principals = {
        str(s["Principal"]) for r in roles for s in r["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    }
    assert not [p for p in principals if "application-autoscaling" in p]


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
    actions = {a for s in statements_of(template, role) for a in as_list(s["Action"])}
    assert "kinesis:RegisterStreamConsumer" not in actions  # polling: no enhanced fan-out consumer
    assert all("streaming:" in r and "Streamskinesisfleet" in r for r in grants["kinesis"])
    table = synth.settings[env]["consumer"].get("processor_table")
    assert {r.split("FnGetAtt")[1].split("Table")[0] for r in grants["dynamodb"]} == {
        "StateLease",
        "StateCheckpoint",
        *(["StateProcessor"] if table else []),
    }
    if table:  # the processor's table: exactly the actions cdk.json lists, on that table only
        on_table = {
            a
            for s in statements_of(template, role)
            for a in as_list(s["Action"])
            if any("StateProcessorTable" in render(r) for r in as_list(s["Resource"]))
        }
        assert on_table == {f"dynamodb:{a}" for a in table["actions"]}
    assert len(grants["sqs"]) == 1 and "StateDeadLetterQueue" in next(iter(grants["sqs"]))
    # Objects under the prefix (the sink's PutObject) and the bucket itself (the start-up HeadBucket, which S3
    # authorizes as s3:ListBucket): nothing else of the bucket.
    objects, bucket = sorted(grants["s3"], key=len, reverse=True)
    assert "DataLakeRaw" in objects and objects.endswith("/raw/*") and objects == f"{bucket}/raw/*"
    on_bucket = {
        a
        for s in statements_of(template, role)
        for a in as_list(s["Action"])
        if render(s["Resource"]) == bucket
    }
    assert on_bucket == {"s3:ListBucket"}
    assert {r.split("FnGetAtt")[1].split("Key")[0] for r in grants["kms"]} == {"Streams", "State", "DataLake"}


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_vpc_spans_max_azs(synth: Synth, env: str) -> None:
    """Environment-agnostic stacks get two zones from CDK by default, whatever max_azs says."""
    max_azs = synth.settings[env]["capacity"]["max_azs"]
    subnets = synth.resources(env, "consumer", "AWS::EC2::Subnet").values()
    zones = {json.dumps(s["Properties"]["AvailabilityZone"], sort_keys=True) for s in subnets}
    assert zones == {
        json.dumps({"Fn::Select": [i, {"Fn::GetAZs": ""}]}, sort_keys=True) for i in range(max_azs)
    }
    workers = [s for s in subnets if "workers" in json.dumps(s["Properties"].get("Tags", []))]
    assert len(workers) == max_azs


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
