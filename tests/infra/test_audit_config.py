"""cdk.json values the synth accepts are values the deployed worker accepts; wrong ones stop the synth in one line.

Each wrong value below once passed ``python app.py`` (exit 0: the mistake showed up only at deploy, or as a
worker refusing to start on every task) or ended it with a jsii traceback. Through the real command, each must
now give exit 2 and one line naming the setting.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import app as entry
from stacks.config import ConfigError, load_environments

from .conftest import REPO_ROOT

pytestmark = pytest.mark.infra

Change = Callable[[dict[str, Any]], None]

# name -> (what to change in the environments object, the setting the one line must name)
WRONG: dict[str, tuple[Change, str]] = {
    # The worker refuses it (its scan and leader check run every second): every task would exit 2 at start.
    "lease-of-one-second": (
        lambda e: e["dev"]["consumer"].update(lease_duration_seconds=1),
        "environments.dev.consumer.lease_duration_seconds: must be > 1",
    ),
    # Was a jsii traceback: the name is part of the stack names, which allow no '_'.
    "environment-name": (
        lambda e: e.update(qa_1=copy.deepcopy(e["dev"])),
        "environments.qa_1: an environment's name is part of its stack names",
    ),
    # Was a traceback from the synth's template validation: "<application>-analytics" names the EMR application.
    "application-too-long": (
        lambda e: e["dev"]["consumer"].update(application="a" * 55),
        "environments.dev.consumer.application: must be 1 to 54",
    ),
    # Passed the synth; EventBridge Scheduler refuses it at deploy.
    "cron-without-six-fields": (
        lambda e: e["dev"]["analytics"].update(compaction_schedule="cron(15 * * * ?)"),
        "environments.dev.analytics.compaction_schedule: 'cron(15 * * * ?)' is not a schedule",
    ),
    "rate-with-plural-of-one": (
        lambda e: e["dev"]["analytics"].update(compaction_schedule="rate(1 hours)"),
        "environments.dev.analytics.compaction_schedule: 'rate(1 hours)' is not a schedule",
    ),
    # Passed the synth and silently built one NAT gateway per zone only.
    "more-nat-gateways-than-zones": (
        lambda e: e["dev"]["capacity"].update(nat_gateways=3),
        "environments.dev.capacity.nat_gateways: 3 exceeds capacity.max_azs (2)",
    ),
}


def _environments(change: Change) -> dict[str, Any]:
    environments = copy.deepcopy(entry.cdk_json_context(REPO_ROOT)["environments"])
    change(environments)
    return environments


def test_each_wrong_value_stops_the_synth_with_one_line_naming_it(tmp_path: Path) -> None:
    """``python app.py`` (what ``cdk synth`` and ``make synth`` run), the runs side by side."""
    runs = {}
    for name, (change, _) in WRONG.items():
        process_env = {
            **os.environ,
            "CDK_CONTEXT_JSON": json.dumps({"environments": _environments(change)}),
            "CDK_OUTDIR": str(tmp_path / f"out-{name}"),
            "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
        }
        runs[name] = subprocess.Popen(
            [sys.executable, str(REPO_ROOT / "app.py")],
            env=process_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    for name, process in runs.items():
        _, err = process.communicate(timeout=300)
        lines = [line for line in err.splitlines() if line.strip()]
        assert process.returncode == 2, f"{name}: exit {process.returncode}: {err[-2000:]}"
        assert len(lines) == 1 and "Traceback" not in err, f"{name}: {err[-2000:]}"
        assert lines[0].startswith(f"error: cdk.json context {WRONG[name][1]}"), lines[0]
        assert not (tmp_path / f"out-{name}" / "manifest.json").exists()


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


@pytest.mark.parametrize("seconds", [1, 1.5, 5, 20, 119])
def test_a_shutdown_deadline_the_synth_accepts_is_one_the_worker_accepts(seconds: float) -> None:
    def change(e: dict[str, Any]) -> None:
        e["dev"]["consumer"].update(shutdown_deadline_seconds=seconds, stop_timeout_seconds=120)

    consumer = _environments(change)["dev"]["consumer"]
    assert _synth_accepts(change) and _worker_accepts(consumer), seconds
