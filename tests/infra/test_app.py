"""app.py: every environment by default, one with ``-c env=<name>``, and bad settings stop the synth."""

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
from aws_cdk import App, Stage

import app as entry
from stacks.config import ConfigError

from .conftest import REPO_ROOT, Synth

pytestmark = pytest.mark.infra


def _placeholder_spark_jobs(tmp_path: Path) -> Path:
    package = tmp_path / "spark_jobs"
    package.mkdir()
    for name in ("__init__.py", "compact.py", "aggregate.py"):
        (package / name).write_text("")
    return package


def test_env_context_selects_one_environment(tmp_path: Path) -> None:
    context = {**entry.cdk_json_context(REPO_ROOT), "env": "dev"}
    cdk_app = App(context=context, outdir=str(tmp_path / "out"))
    stages = entry.build(cdk_app, REPO_ROOT, spark_jobs=_placeholder_spark_jobs(tmp_path))
    assert [s.stage_name for s in stages] == ["dev"]
    assert [c.node.id for c in cdk_app.node.children if isinstance(c, Stage)] == ["dev"]
    assert [s.stack_name for s in stages[0].stacks] == [
        "kinesis-fleet-dev-streaming",
        "kinesis-fleet-dev-state",
        "kinesis-fleet-dev-analytics",
        "kinesis-fleet-dev-consumer",
        "kinesis-fleet-dev-monitoring",
    ]


def test_unknown_env_context_fails_before_any_stack(tmp_path: Path) -> None:
    cdk_app = App(context={**entry.cdk_json_context(REPO_ROOT), "env": "qa"}, outdir=str(tmp_path))
    with pytest.raises(ConfigError, match="unknown environment 'qa'"):
        entry.build(cdk_app, REPO_ROOT)
    assert not [c for c in cdk_app.node.children if isinstance(c, Stage)]


def test_too_many_tasks_fails_the_synth(tmp_path: Path) -> None:
    context = copy.deepcopy(entry.cdk_json_context(REPO_ROOT))
    context["environments"]["prod"]["scaling"]["max_tasks"] = 50
    with pytest.raises(ConfigError) as caught:
        entry.build(App(context=context, outdir=str(tmp_path)), REPO_ROOT)
    assert caught.value.setting == "environments.prod.scaling.max_tasks"


def test_missing_spark_entry_file_fails_the_synth(tmp_path: Path) -> None:
    package = _placeholder_spark_jobs(tmp_path)
    (package / "aggregate.py").unlink()
    cdk_app = App(context={**entry.cdk_json_context(REPO_ROOT), "env": "dev"}, outdir=str(tmp_path / "out"))
    with pytest.raises(Exception, match=r"missing Spark entry file\(s\) aggregate.py"):
        entry.build(cdk_app, REPO_ROOT, spark_jobs=package)


# ------------------------------------------------------------------------ a bad cdk.json value, as users see it


def _bad(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    environments = copy.deepcopy(entry.cdk_json_context(REPO_ROOT)["environments"])
    change(environments)
    return environments


def _no_pyproject(tmp: Path) -> str:
    project = tmp / "bare"
    (project / "pkg").mkdir(parents=True)
    (project / "pkg" / "mod.py").write_text("class P: ...\n")
    return os.path.relpath(project, REPO_ROOT)  # relative to cdk.json


REFUSALS = {
    "missing-project": (
        lambda e, tmp: e["dev"]["consumer"].update(processor_project="examples/no-such-project"),
        "environments.dev.consumer.processor_project: 'examples/no-such-project' does not exist",
    ),
    "no-pyproject": (
        lambda e, tmp: e["dev"]["consumer"].update(
            processor_project=_no_pyproject(tmp), processor="pkg.mod:P"
        ),
        "has no pyproject.toml or requirements.txt: add one",
    ),
    "undefined-entry-point": (
        lambda e, tmp: e["dev"]["consumer"].update(processor="latest_per_key.processor:Nope"),
        "environments.dev.consumer.processor: 'latest_per_key.processor:Nope' is not defined by "
        "examples/latest-per-key",
    ),
    "prod-without-account": (
        lambda e, tmp: e["prod"].pop("account"),
        "environments.prod.account: a production environment must name its AWS account",
    ),
    "prod-without-region": (
        lambda e, tmp: e["prod"].update(region=None),
        "environments.prod.region: a production environment must name its AWS region",
    ),
    "prod-without-alarm-target": (
        lambda e, tmp: e["prod"]["alarms"].update(emails=[], topic_arn=None),
        "environments.prod.alarms.emails: a production environment's alarms must reach somebody",
    ),
    # Each below once passed the synth (exit 0: the mistake showed at deploy, or as every task's worker refusing
    # to start) or ended it with a jsii traceback.
    "lease-of-one-second": (  # the worker refuses it: its scan and leader check run every second
        lambda e, tmp: e["dev"]["consumer"].update(lease_duration_seconds=1),
        "environments.dev.consumer.lease_duration_seconds: must be > 1",
    ),
    "environment-name": (  # part of the stack names, which allow no '_' (a jsii traceback)
        lambda e, tmp: e.update(qa_1=copy.deepcopy(e["dev"])),
        "environments.qa_1: an environment's name is part of its stack names",
    ),
    "application-too-long": (  # "<application>-analytics" names the EMR application (a validation traceback)
        lambda e, tmp: e["dev"]["consumer"].update(application="a" * 55),
        "environments.dev.consumer.application: must be 1 to 54",
    ),
    "cron-without-six-fields": (  # EventBridge Scheduler refuses it at deploy
        lambda e, tmp: e["dev"]["analytics"].update(compaction_schedule="cron(15 * * * ?)"),
        "environments.dev.analytics.compaction_schedule: 'cron(15 * * * ?)' is not a schedule",
    ),
    "rate-with-plural-of-one": (
        lambda e, tmp: e["dev"]["analytics"].update(compaction_schedule="rate(1 hours)"),
        "environments.dev.analytics.compaction_schedule: 'rate(1 hours)' is not a schedule",
    ),
    "lookback-of-zero": (  # a scheduled run would cover no hour
        lambda e, tmp: e["dev"]["analytics"].update(compaction_lookback_hours=0),
        "environments.dev.analytics.compaction_lookback_hours: must be >= 1, got 0",
    ),
    "lookback-past-twelve": (  # past 12 a run may look for raw objects past raw_expiration_days
        lambda e, tmp: e["prod"]["analytics"].update(compaction_lookback_hours=13),
        "environments.prod.analytics.compaction_lookback_hours: must be <= 12, got 13",
    ),
    "lookback-not-an-integer": (
        lambda e, tmp: e["staging"]["analytics"].update(compaction_lookback_hours="3"),
        "environments.staging.analytics.compaction_lookback_hours: must be an integer, got '3'",
    ),
    "lookback-missing": (
        lambda e, tmp: e["staging"]["analytics"].pop("compaction_lookback_hours"),
        "environments.staging.analytics.compaction_lookback_hours: is required",
    ),
    "more-nat-gateways-than-zones": (  # silently built one NAT gateway per zone
        lambda e, tmp: e["dev"]["capacity"].update(nat_gateways=3),
        "environments.dev.capacity.nat_gateways: 3 exceeds capacity.max_azs (2)",
    ),
}


def test_each_bad_value_fails_synth_with_one_line(tmp_path: Path) -> None:
    """``python app.py`` (what ``cdk synth`` runs) with each bad value as CLI context: one line on stderr naming
    the key and the fix, exit 2, no traceback. The runs go side by side."""
    runs = {}
    for name, (change, _) in REFUSALS.items():
        environments = _bad(lambda e, change=change: change(e, tmp_path))
        process_env = {
            **os.environ,
            "CDK_CONTEXT_JSON": json.dumps({"environments": environments}),
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
        _, err = process.communicate(timeout=120)
        assert process.returncode == 2, f"{name}: {err}"
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and "Traceback" not in err, f"{name}: {err}"
        assert lines[0].startswith("error: cdk.json context environments."), lines[0]
        assert REFUSALS[name][1] in lines[0], lines[0]
        assert not (tmp_path / f"out-{name}" / "manifest.json").exists()


def test_a_refusal_comes_before_the_cdks_node_process_starts(tmp_path: Path) -> None:
    """The settings are checked before aws_cdk is imported: with no ``node`` on PATH (the CDK could not start)
    a bad value still gets its one line and exit 2. The bad value comes in the CDK CLI's overflow file, the
    environment's choice in ``CDK_CONTEXT_JSON``: both are read, as ``App`` reads them."""
    environments = _bad(lambda e: e["dev"]["capacity"].update(nat_gateways=3))
    overflow = tmp_path / "context.json"
    overflow.write_text(json.dumps({"environments": environments}))
    (tmp_path / "no-node").mkdir()
    process_env = {
        **os.environ,
        "PATH": str(tmp_path / "no-node"),
        "CDK_CONTEXT_JSON": json.dumps({"env": "dev"}),
        "CONTEXT_OVERFLOW_LOCATION_ENV": str(overflow),
        "CDK_OUTDIR": str(tmp_path / "out"),
    }
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "app.py")],
        env=process_env,
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: cdk.json context environments.dev.capacity.nat_gateways: 3 exceeds capacity.max_azs (2): the VPC"
        " gets one NAT gateway per zone at most"
    ]
    assert not (tmp_path / "out").exists()


_COMPARE_CONTEXTS = """
import json, sys
from aws_cdk import App
import app
context = app.app_context()
real = App(context=app.cdk_json_context())
keys = sorted({*context, *app.cdk_json_context()})
print(json.dumps({"ours": {k: context.get(k) for k in keys}, "app": {k: real.node.try_get_context(k) for k in keys}}))
"""


def test_the_context_checked_first_is_the_one_the_app_builds_from(tmp_path: Path) -> None:
    """``app_context`` merges cdk.json's context with the CLI's as the real ``App`` does (each top-level key
    replaced; the overflow file last), so the early check judges what the synth would build. In a process of
    its own: the CDK's Node.js process reads the CLI's variables once, when it starts."""
    overflow = tmp_path / "context.json"
    overflow.write_text(json.dumps({"env": "staging", "@aws-cdk/custom": {"from": "file"}}))
    given = {
        "env": "dev",
        "environments": _bad(lambda e: e.pop("prod")),
        "extra": [1, None, {"a": None, "b": 2}],
    }
    process_env = {
        **os.environ,
        "CDK_CONTEXT_JSON": json.dumps(given),
        "CONTEXT_OVERFLOW_LOCATION_ENV": str(overflow),
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
    }
    done = subprocess.run(
        [sys.executable, "-c", _COMPARE_CONTEXTS],
        check=False,
        cwd=REPO_ROOT,
        env=process_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["ours"] == seen["app"]
    context = seen["ours"]
    assert (
        context["env"] == "staging"
        and "prod" not in context["environments"]
        and context["extra"] == [1, None, {"b": 2}]
    )
    assert [s.name for s in entry.checked_environments(context, REPO_ROOT)] == ["staging"]


def test_prod_stacks_carry_account_region_protection_and_alarm_subscription(synth: Synth) -> None:
    settings = synth.settings["prod"]
    manifest = json.loads((synth.outdir / "assembly-prod" / "manifest.json").read_text())
    stacks = [a for a in manifest["artifacts"].values() if a["type"] == "aws:cloudformation:stack"]
    assert len(stacks) == 5
    for stack in stacks:
        assert stack["environment"] == f"aws://{settings['account']}/{settings['region']}"
        assert stack["properties"]["terminationProtection"] is True
    subscriptions = synth.resources("prod", "monitoring", "AWS::SNS::Subscription").values()
    assert {s["Properties"]["Endpoint"] for s in subscriptions} == set(settings["alarms"]["emails"])
    assert {s["Properties"]["Protocol"] for s in subscriptions} == {"email"}
    dev = json.loads((synth.outdir / "assembly-dev" / "manifest.json").read_text())
    for stack in (a for a in dev["artifacts"].values() if a["type"] == "aws:cloudformation:stack"):
        assert stack["environment"] == "aws://unknown-account/unknown-region"
        assert not stack["properties"].get("terminationProtection")
