"""Per-environment settings: the real cdk.json loads, and every bad value is rejected by name."""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import pytest

from stacks.config import ConfigError, load_environments, select_environments

from .conftest import REPO_ROOT

pytestmark = pytest.mark.infra


def _raw() -> dict[str, Any]:
    environments: dict[str, Any] = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]["environments"]
    return environments


def test_cdk_json_defines_dev_staging_and_prod() -> None:
    environments = load_environments(_raw())
    assert list(environments) == ["dev", "staging", "prod"]
    prod = environments["prod"]
    assert prod.deletion_protection and not environments["dev"].deletion_protection
    assert prod.max_useful_tasks == prod.total_shards + prod.scaling.standby_tasks
    assert prod.scaling.max_tasks <= prod.max_useful_tasks


def test_settings_are_frozen() -> None:
    dev = load_environments(_raw())["dev"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        dev.scaling.max_tasks = 99  # type: ignore[misc]


def _set(raw: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    node: Any = raw
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if value is _DELETE:
        del node[last]
    else:
        node[last] = value


_DELETE = object()

CASES = [
    # (change in environments.dev, value, setting the error must name, words the message must contain)
    ("scaling.min_tasks", 4, "environments.dev.scaling.min_tasks", "exceeds scaling.max_tasks"),
    ("scaling.max_tasks", 4, "environments.dev.scaling.max_tasks", "2 shards plus scaling.standby_tasks (1)"),
    ("scaling.min_tasks", 0, "environments.dev.scaling.min_tasks", ">= 1"),
    ("consumer.lease_duration_seconds", -5, "environments.dev.consumer.lease_duration_seconds", ">= 1.0"),
    ("consumer.shutdown_deadline_seconds", -1.5, "environments.dev.consumer.shutdown_deadline_seconds", ">="),
    ("consumer.stop_timeout_seconds", 20, "environments.dev.consumer.stop_timeout_seconds", "must exceed"),
    # SIGTERM to SIGKILL must leave room for a hung processor call past the deadline (20 + 2 x 5 + 2 s).
    ("consumer.stop_timeout_seconds", 31, "environments.dev.consumer.stop_timeout_seconds", "at least 32"),
    ("consumer.stop_timeout_seconds", 300, "environments.dev.consumer.stop_timeout_seconds", "<= 120"),
    ("capacity.target_capacity_percent", 0, "environments.dev.capacity.target_capacity_percent", ">= 1"),
    ("capacity.target_capacity_percent", 120, "environments.dev.capacity.target_capacity_percent", "<= 100"),
    ("consumer.retrieval", "push", "environments.dev.consumer.retrieval", "one of polling, fanout"),
    (
        "capacity.min_instances",
        5,
        "environments.dev.capacity.min_instances",
        "exceeds capacity.max_instances",
    ),
    ("consumer.cpu", 300, "environments.dev.consumer.cpu", "Fargate accepts"),
    ("consumer.memory_mib", 100000, "environments.dev.consumer.memory_mib", "Fargate accepts 1024-4096 MiB"),
    ("consumer.memory_mib", 512, "environments.dev.consumer.memory_mib", "with consumer.cpu 512; got 512"),
    ("consumer.on_failure", "retry", "environments.dev.consumer.on_failure", "one of dlq, halt"),
    ("consumer.processor", "not a path", "environments.dev.consumer.processor", "does not match"),
    ("streams.0.capacity_mode", "SERVERLESS", "environments.dev.streams[0].capacity_mode", "ON_DEMAND"),
    ("streams.0.shard_count", 0, "environments.dev.streams[0].shard_count", ">= 1"),
    ("streams.0.retention_hours", 2, "environments.dev.streams[0].retention_hours", ">= 24"),
    ("scaling.max_task", 3, "environments.dev.scaling.max_task", "not a known setting"),
    ("scaling.lag_target_ms", _DELETE, "environments.dev.scaling.lag_target_ms", "is required"),
    ("scaling.max_tasks", "3", "environments.dev.scaling.max_tasks", "must be an integer"),
    ("scaling.max_tasks", True, "environments.dev.scaling.max_tasks", "must be an integer"),
    ("deletion_protection", "no", "environments.dev.deletion_protection", "true or false"),
    ("alarms.emails", ["ops"], "environments.dev.alarms.emails", "e-mail"),
    (
        "analytics.compaction_schedule",
        "hourly",
        "environments.dev.analytics.compaction_schedule",
        "is not a schedule EventBridge Scheduler accepts",
    ),
]


@pytest.mark.parametrize(("path", "value", "setting", "words"), CASES, ids=[c[0] for c in CASES])
def test_bad_value_names_the_setting(path: str, value: Any, setting: str, words: str) -> None:
    raw = copy.deepcopy(_raw())
    _set(raw["dev"], path, value)
    with pytest.raises(ConfigError) as caught:
        load_environments(raw)
    assert caught.value.setting == setting
    assert str(caught.value).startswith(f"{setting}: ")
    assert words in str(caught.value)


EC2_CASES = [
    # (change in environments.staging (EC2), value, setting the error must name, words the message must contain)
    (
        "capacity.max_instances",
        4,
        "environments.staging.capacity.max_instances",
        "hold 2 tasks each; a deployment at scaling.max_tasks (5) runs 10 tasks at once, which needs at least 5",
    ),
    ("capacity.instance_type", "x9.huge", "environments.staging.capacity.instance_type", "INSTANCE_TYPES"),
    ("consumer.memory_mib", 16384, "environments.staging.consumer.memory_mib", "does not fit on m6i.large"),
    ("consumer.cpu", 4096, "environments.staging.consumer.cpu", "does not fit on m6i.large (2048 CPU units"),
]


@pytest.mark.parametrize(("path", "value", "setting", "words"), EC2_CASES, ids=[c[0] for c in EC2_CASES])
def test_bad_ec2_capacity_names_the_setting(path: str, value: Any, setting: str, words: str) -> None:
    raw = copy.deepcopy(_raw())
    _set(raw["staging"], path, value)
    with pytest.raises(ConfigError) as caught:
        load_environments(raw)
    assert caught.value.setting == setting
    assert words in str(caught.value)


def test_fargate_ignores_the_instance_settings() -> None:
    raw = copy.deepcopy(_raw())
    raw["dev"]["capacity"]["instance_type"] = "x9.huge"
    raw["dev"]["capacity"]["max_instances"] = 1
    assert load_environments(raw)["dev"].capacity.launch_type == "FARGATE"


def test_a_stream_listed_twice_is_rejected() -> None:
    raw = copy.deepcopy(_raw())
    raw["dev"]["streams"].append(dict(raw["dev"]["streams"][0]))
    with pytest.raises(ConfigError, match="listed twice") as caught:
        load_environments(raw)
    assert caught.value.setting == "environments.dev.streams[1].name"


def test_more_shards_allow_more_tasks() -> None:
    raw = copy.deepcopy(_raw())
    raw["dev"]["scaling"]["max_tasks"] = 4
    raw["dev"]["streams"][0]["shard_count"] = 3
    assert load_environments(raw)["dev"].scaling.max_tasks == 4


def test_unknown_environment_is_named_with_the_known_ones() -> None:
    environments = load_environments(_raw())
    with pytest.raises(ConfigError) as caught:
        select_environments(environments, "qa")
    assert caught.value.setting == "env"
    assert "unknown environment 'qa'; known: dev, prod, staging" in str(caught.value)
    assert [e.name for e in select_environments(environments, "staging")] == ["staging"]
    assert [e.name for e in select_environments(environments, None)] == ["dev", "staging", "prod"]


def test_environments_must_be_an_object() -> None:
    for bad in (None, [], {}):
        with pytest.raises(ConfigError) as caught:
            load_environments(bad)
        assert caught.value.setting == "environments"
