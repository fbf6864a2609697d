"""app.py: every environment by default, one with ``-c env=<name>``, and bad settings stop the synth."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from aws_cdk import App, Stage

import app as entry
from stacks.config import ConfigError

from .conftest import REPO_ROOT

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
