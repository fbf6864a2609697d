"""cdk.json values the synth accepts are values the deployed worker accepts (a lease duration of 1 s once passed
the synth, and every task's worker refused it at start). Wrong values through the real command: test_app.py."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

import app as entry
from stacks.config import ConfigError, load_environments

from .conftest import REPO_ROOT

pytestmark = pytest.mark.infra

Change = Callable[[dict[str, Any]], None]


def _environments(change: Change) -> dict[str, Any]:
    environments = copy.deepcopy(entry.cdk_json_context(REPO_ROOT)["environments"])
    change(environments)
    return environments


def _worker_accepts(consumer: dict[str, Any]) -> bool:
    """The worker's own variable checks (``run``'s step 1) on what the task definition sets from ``consumer``."""
    from consumer.config import worker_config_from_env
    from consumer.errors import ConfigError as WorkerConfigError
    from consumer.loader import load_processor

    env = {
        "CONSUMER_APPLICATION": consumer["application"],
        "CONSUMER_STREAMS": "kinesis-fleet-dev-events",
        "CONSUMER_PROCESSOR": "consumer.sinks.raw_s3:RawS3Sink",
        "CONSUMER_LEASE_TABLE": "leases",
        "CONSUMER_CHECKPOINT_TABLE": "checkpoints",
        "CONSUMER_DLQ_URL": "https://sqs.eu-west-1.amazonaws.com/123456789012/dlq",
        "CONSUMER_ON_FAILURE": consumer["on_failure"],
        # as stacks/consumer_service.py writes them: str() of the validated float
        "CONSUMER_LEASE_DURATION_SECONDS": str(float(consumer["lease_duration_seconds"])),
        "CONSUMER_SHUTDOWN_DEADLINE_SECONDS": str(float(consumer["shutdown_deadline_seconds"])),
        "CONSUMER_RAW_BUCKET": "raw-bucket",
        "CONSUMER_RAW_PREFIX": consumer["raw_prefix"],
        "CONSUMER_RETRIEVAL": consumer["retrieval"],
        "CONSUMER_HEALTH_FILE": "/tmp/consumer.heartbeat",
        "CONSUMER_HEALTH_MAX_AGE_SECONDS": "30",
    }
    try:
        worker_config_from_env(env, load_processor)
    except WorkerConfigError:
        return False
    return True


def _synth_accepts(change: Change) -> bool:
    try:
        load_environments(_environments(change))
    except ConfigError:
        return False
    return True


@pytest.mark.parametrize("seconds", [1, 1.0, 1.01, 1.5, 2, 10, 3600])
def test_a_lease_duration_the_synth_accepts_is_one_the_worker_accepts(seconds: float) -> None:
    def change(e: dict[str, Any]) -> None:
        e["dev"]["consumer"]["lease_duration_seconds"] = seconds

    consumer = _environments(change)["dev"]["consumer"]
    assert _synth_accepts(change) == _worker_accepts(consumer), seconds


@pytest.mark.parametrize("seconds", [1, 1.5, 5, 20, 108])  # 108: the longest that fits stopTimeout 120
def test_a_shutdown_deadline_the_synth_accepts_is_one_the_worker_accepts(seconds: float) -> None:
    def change(e: dict[str, Any]) -> None:
        e["dev"]["consumer"].update(shutdown_deadline_seconds=seconds, stop_timeout_seconds=120)

    consumer = _environments(change)["dev"]["consumer"]
    assert _synth_accepts(change) and _worker_accepts(consumer), seconds
