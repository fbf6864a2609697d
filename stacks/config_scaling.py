"""The consumer fleet's size and where it runs: step scaling bounds, EC2 or Fargate capacity.

Read from ``cdk.json`` by :mod:`stacks.config`; every error names the setting it rejects.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal, cast

from stacks.config_reader import ConfigError, Section

__all__ = [
    "DEPLOYMENT_MAX_PERCENT",
    "INSTANCE_TYPES",
    "CapacitySettings",
    "InstanceType",
    "ScalingSettings",
    "check_capacity",
    "read_capacity",
    "read_scaling",
]

# ECS deployments start up to this share of the desired count before old tasks stop (maximumPercent).
DEPLOYMENT_MAX_PERCENT = 200


@dataclass(frozen=True)
class InstanceType:
    """What bounds how many consumer tasks fit on one instance: vCPUs, memory and network interfaces."""

    vcpus: int
    memory_mib: int
    max_enis: int

    def tasks_per_instance(self, cpu: int, memory_mib: int) -> int:
        """awsvpc tasks of this size one instance holds: every task takes its own ENI (the instance keeps one),
        and the ECS agent and OS keep about a tenth of the memory."""
        by_eni = self.max_enis - 1
        by_cpu = self.vcpus * 1024 // cpu
        by_memory = int(self.memory_mib * 0.9) // memory_mib
        return min(by_eni, by_cpu, by_memory)


# The EC2 instance types the capacity settings accept (EC2 quotas per type; ENI trunking is not assumed, as
# it is an account setting outside the stacks). Add a type here with its numbers to use it.
INSTANCE_TYPES: dict[str, InstanceType] = {
    "t3.medium": InstanceType(2, 4096, 3),
    "t3.large": InstanceType(2, 8192, 3),
    "c6i.large": InstanceType(2, 4096, 3),
    "c6i.xlarge": InstanceType(4, 8192, 4),
    "m6i.large": InstanceType(2, 8192, 3),
    "m6i.xlarge": InstanceType(4, 16384, 4),
    "m6i.2xlarge": InstanceType(8, 32768, 4),
    "m6i.4xlarge": InstanceType(16, 65536, 8),
    "m7i.large": InstanceType(2, 8192, 3),
    "m7i.xlarge": InstanceType(4, 16384, 4),
}

_FARGATE_CPU = (256, 512, 1024, 2048, 4096)
# The memory (MiB) Fargate accepts with each CPU size (AWS's task-size table: 0.25 vCPU takes 0.5, 1 or 2 GB;
# the others whole GBs from twice the vCPUs to eight times them, up to 30 GB at 4 vCPUs).
_FARGATE_MEMORY = {
    256: (512, 1024, 2048),
    512: tuple(range(1024, 4097, 1024)),
    1024: tuple(range(2048, 8193, 1024)),
    2048: tuple(range(4096, 16385, 1024)),
    4096: tuple(range(8192, 30721, 1024)),
}


@dataclass(frozen=True)
class ScalingSettings:
    """Bounds and lag target of the ECS service's step scaling."""

    min_tasks: int
    max_tasks: int
    standby_tasks: int
    lag_target_ms: int
    scale_out_cooldown_seconds: int
    scale_in_cooldown_seconds: int


@dataclass(frozen=True)
class CapacitySettings:
    """Where tasks run: an EC2 Auto Scaling group capacity provider, or Fargate.

    ``target_capacity_percent`` is ECS managed scaling's target: below 100 it keeps spare instances, so a
    deployment or an instance drain finds room for the new tasks without waiting for an instance to launch.
    """

    launch_type: Literal["EC2", "FARGATE"]
    instance_type: str
    min_instances: int
    max_instances: int
    target_capacity_percent: int
    nat_gateways: int
    max_azs: int


def read_scaling(s: Section) -> ScalingSettings:
    settings = ScalingSettings(
        min_tasks=s.integer("min_tasks", 1),
        max_tasks=s.integer("max_tasks", 1),
        standby_tasks=s.integer("standby_tasks", 0),
        lag_target_ms=s.integer("lag_target_ms", 1000),
        scale_out_cooldown_seconds=s.integer("scale_out_cooldown_seconds", 0),
        scale_in_cooldown_seconds=s.integer("scale_in_cooldown_seconds", 0),
    )
    s.done()
    return settings


def read_capacity(c: Section) -> CapacitySettings:
    settings = CapacitySettings(
        launch_type=cast(Any, c.choice("launch_type", ("EC2", "FARGATE"))),
        instance_type=c.text("instance_type", re.compile(r"^[a-z][a-z0-9-]*\.[a-z0-9]+$")),
        min_instances=c.integer("min_instances", 0),
        max_instances=c.integer("max_instances", 1),
        target_capacity_percent=c.integer("target_capacity_percent", 1, 100),
        nat_gateways=c.integer("nat_gateways", 1, 3),
        max_azs=c.integer("max_azs", 2, 3),
    )
    c.done()
    return settings


def check_capacity(
    path: str, scaling: ScalingSettings, cpu: int, memory_mib: int, capacity: CapacitySettings
) -> None:
    """Rules of the capacity settings, with the task's size (``consumer.cpu``, ``consumer.memory_mib``) and the
    scaling bounds; ``path`` is the environment's. The message names the setting an operator should change."""
    if capacity.nat_gateways > capacity.max_azs:
        raise ConfigError(
            f"{path}.capacity.nat_gateways",
            f"{capacity.nat_gateways} exceeds capacity.max_azs ({capacity.max_azs}): the VPC gets one NAT gateway "
            "per zone at most",
        )
    if capacity.min_instances > capacity.max_instances:
        raise ConfigError(
            f"{path}.capacity.min_instances",
            f"{capacity.min_instances} exceeds capacity.max_instances ({capacity.max_instances})",
        )
    if capacity.launch_type == "FARGATE" and cpu not in _FARGATE_CPU:
        raise ConfigError(
            f"{path}.consumer.cpu", f"Fargate accepts {', '.join(map(str, _FARGATE_CPU))}; got {cpu}"
        )
    if capacity.launch_type == "FARGATE" and memory_mib not in (fits := _FARGATE_MEMORY[cpu]):
        raise ConfigError(
            f"{path}.consumer.memory_mib",
            f"Fargate accepts {fits[0]}-{fits[-1]} MiB ({', '.join(map(str, fits[:3]))} ...) with "
            f"consumer.cpu {cpu}; got {memory_mib}",
        )
    if capacity.launch_type == "EC2":
        _check_ec2_capacity(path, scaling, cpu, memory_mib, capacity)


def _check_ec2_capacity(
    path: str, scaling: ScalingSettings, cpu: int, memory_mib: int, capacity: CapacitySettings
) -> None:
    """The Auto Scaling group at its maximum holds a whole deployment at ``scaling.max_tasks``."""
    instance = INSTANCE_TYPES.get(capacity.instance_type)
    if instance is None:
        raise ConfigError(
            f"{path}.capacity.instance_type",
            f"{capacity.instance_type!r} is not in stacks.config.INSTANCE_TYPES (its vCPUs, memory and ENI "
            f"limit size the group); known: {', '.join(sorted(INSTANCE_TYPES))}",
        )
    per_instance = instance.tasks_per_instance(cpu, memory_mib)
    if per_instance < 1:
        # Name the setting that does not fit: the memory, the CPU, else the instance type (its ENIs).
        too_big = "memory_mib" if instance.tasks_per_instance(1, memory_mib) < 1 else "cpu"
        setting = (
            f"consumer.{too_big}" if instance.tasks_per_instance(1, 1) >= 1 else "capacity.instance_type"
        )
        raise ConfigError(
            f"{path}.{setting}",
            f"a task of {cpu} CPU units and {memory_mib} MiB does not fit on "
            f"{capacity.instance_type} ({instance.vcpus * 1024} CPU units, {instance.memory_mib} MiB, "
            f"{instance.max_enis} network interfaces)",
        )
    during_deploy = -(-scaling.max_tasks * DEPLOYMENT_MAX_PERCENT // 100)
    if capacity.max_instances * per_instance < during_deploy:
        needed = -(-during_deploy // per_instance)
        raise ConfigError(
            f"{path}.capacity.max_instances",
            f"{capacity.max_instances} instances of {capacity.instance_type} hold {per_instance} tasks each; a "
            f"deployment at scaling.max_tasks ({scaling.max_tasks}) runs {during_deploy} tasks at once, which "
            f"needs at least {needed}",
        )
