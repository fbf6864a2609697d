"""The GitHub Actions pipeline: checks on every change, OIDC deploys in order, approval via environments."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import REPO_ROOT, Synth

pytestmark = pytest.mark.infra

WORKFLOWS = REPO_ROOT / ".github" / "workflows"


def _load(name: str) -> dict[str, Any]:
    workflow: dict[str, Any] = yaml.safe_load((WORKFLOWS / name).read_text())
    return workflow


def test_every_change_runs_tests_synth_nag_and_lint() -> None:
    workflow = _load("infrastructure.yml")
    triggers = workflow[True]  # YAML 1.1 reads the key `on` as true
    assert "pull_request" in triggers and triggers["push"]["branches"] == ["main"]
    steps = {
        job: " ".join(s.get("run", "") for s in body["steps"])
        for job, body in workflow["jobs"].items()
        if "steps" in body
    }
    assert "make test" in steps["test"]
    assert "make synth" in steps["synth"] and "cfn-lint" in steps["synth"]


def test_deploys_go_dev_then_staging_then_prod_with_oidc() -> None:
    jobs = _load("infrastructure.yml")["jobs"]
    assert set(jobs["deploy-dev"]["needs"]) == {"test", "synth"}
    assert "refs/heads/main" in jobs["deploy-dev"]["if"]
    assert jobs["deploy-staging"]["needs"] == "deploy-dev"
    assert jobs["deploy-prod"]["needs"] == "deploy-staging"
    for env in ("dev", "staging", "prod"):
        job = jobs[f"deploy-{env}"]
        assert job["uses"] == "./.github/workflows/deploy.yml"
        assert job["with"] == {"environment": env}
        assert job["permissions"]["id-token"] == "write"
    deploy = _load("deploy.yml")["jobs"]["deploy"]
    assert deploy["environment"] == "${{ inputs.environment }}"  # required reviewers gate staging and prod
    uses = [s.get("uses", "") for s in deploy["steps"]]
    assert any(u.startswith("aws-actions/configure-aws-credentials@") for u in uses)
    text = (WORKFLOWS / "deploy.yml").read_text() + (WORKFLOWS / "infrastructure.yml").read_text()
    assert "role-to-assume" in text
    assert "AWS_ACCESS_KEY_ID" not in text and "AWS_SECRET_ACCESS_KEY" not in text
    runs = " ".join(s.get("run", "") for s in deploy["steps"])
    assert 'cdk deploy --app cdk.out "$TARGET/*"' in runs
    assert deploy["env"]["TARGET"] == "${{ inputs.environment }}"


def test_the_diff_is_a_job_of_its_own_before_the_approval_gate() -> None:
    """The diff runs in `<env>-diff` (no reviewers, a read-only role); the deploy, gated by `<env>`'s required
    reviewers, needs it: a reviewer sees prod's diff before approving."""
    jobs = _load("deploy.yml")["jobs"]
    diff, deploy = jobs["diff"], jobs["deploy"]
    assert diff["environment"] == "${{ inputs.environment }}-diff"
    assert deploy["needs"] == "diff" and deploy["environment"] == "${{ inputs.environment }}"
    runs = [s.get("run", "") for s in diff["steps"]]
    assert any('cdk diff --app cdk.out --no-change-set "$TARGET/*"' in r for r in runs)
    assert not any("cdk deploy" in r or "docker" in r for r in runs)


def test_inputs_reach_scripts_through_env_only() -> None:
    """No `${{ ... }}` expression is expanded inside a `run:` script (script injection); values go via env."""
    for name, job, step in _steps():
        assert "${{" not in step.get("run", ""), f"{name}:{job}: {step.get('name', step['run'][:40])}"


def test_a_run_waiting_for_approval_holds_back_no_other_run() -> None:
    """Workflow-level concurrency groups only a pull request's runs (a newer push cancels the older); a main
    run waiting for the prod approval must not queue the next run's tests and dev deploy behind it."""
    workflow = _load("infrastructure.yml")
    concurrency = workflow["concurrency"]
    assert concurrency["group"] == (
        "infrastructure-${{ github.event_name == 'pull_request' && github.ref || github.run_id }}"
    )
    assert concurrency["cancel-in-progress"] == "${{ github.event_name == 'pull_request' }}"
    for job in workflow["jobs"].values():
        assert "concurrency" not in job  # the deploys queue in deploy.yml, per environment
    deploy = _load("deploy.yml")["jobs"]["deploy"]
    assert deploy["concurrency"] == {"group": "deploy-${{ inputs.environment }}", "cancel-in-progress": False}


# The first major of each action whose action.yml runs on Node 24 (the runners dropped Node 20).
NODE24_MAJORS = {
    "actions/checkout": 5,
    "actions/setup-python": 6,
    "actions/setup-node": 5,
    "actions/setup-java": 5,
    "actions/upload-artifact": 6,
    "actions/download-artifact": 7,
    "aws-actions/configure-aws-credentials": 6,
}


def _steps() -> list[tuple[str, str, dict[str, Any]]]:
    """(workflow file, job, step) for every step of every workflow."""
    found = []
    for path in sorted(WORKFLOWS.glob("*.yml")):
        for job, body in yaml.safe_load(path.read_text())["jobs"].items():
            found.extend((path.name, job, step) for step in body.get("steps", []))
    return found


# Actions allowed to stay pinned by major tag (none: every action is pinned by commit).
PINNED_BY_TAG: set[str] = set()
_USES = re.compile(r"^\s*(?:-\s+)?uses:\s+(?P<action>[^@\s]+)@(?P<ref>\S+)(?:\s+#\s+(?P<comment>\S+))?\s*$")


def _uses() -> list[tuple[str, str, str | None]]:
    """(action, ref, version comment) for every external action of every workflow, from the raw text (YAML
    drops the comments)."""
    found = []
    for path in sorted(WORKFLOWS.glob("*.yml")):
        for line in path.read_text().splitlines():
            if (m := _USES.match(line)) and not m["action"].startswith("./"):
                found.append((m["action"], m["ref"], m["comment"]))
    return found


def test_actions_are_pinned_by_commit_with_the_version_in_a_comment() -> None:
    uses = _uses()
    assert len(uses) >= 12
    for action, ref, comment in uses:
        if action in PINNED_BY_TAG:
            assert re.fullmatch(r"v\d+", ref), f"{action}@{ref}"
            continue
        assert re.fullmatch(r"[0-9a-f]{40}", ref), f"{action}@{ref}: pin by commit SHA"
        assert comment and re.fullmatch(r"v\d+\.\d+\.\d+", comment), f"{action}@{ref}: add '# vX.Y.Z'"
    shas = {}
    for action, ref, comment in uses:  # one commit per action across the workflows
        assert shas.setdefault(action, (ref, comment)) == (ref, comment), action


def test_actions_are_on_majors_that_run_on_node_24() -> None:
    for action, ref, comment in _uses():
        version = comment if action not in PINNED_BY_TAG else ref
        assert action in NODE24_MAJORS, (
            f"{action}: unknown action; add its first Node 24 major to NODE24_MAJORS"
        )
        assert version is not None
        major = int(version.removeprefix("v").split(".")[0])
        assert major >= NODE24_MAJORS[action], (
            f"{action} {version} runs on a Node version the runners dropped"
        )


def test_pip_and_npm_downloads_are_cached() -> None:
    for name, job, step in _steps():
        if step.get("uses", "").startswith("actions/setup-python@"):
            assert step["with"]["cache"] == "pip", f"{name}:{job}"
            assert "requirements/tools/*.txt" in step["with"]["cache-dependency-path"]
        if step.get("uses", "").startswith("actions/setup-node@"):
            assert step["with"]["cache"] == "npm", f"{name}:{job}"


def test_the_image_is_built_once_and_every_deploy_uses_it() -> None:
    synth = _load("infrastructure.yml")["jobs"]["synth"]
    runs = [s.get("run", "") for s in synth["steps"]]
    (build,) = [r for r in runs if "docker build" in r]
    assert "image_asset.py cdk.out" in build and '--tag "$tag"' in build and "docker save" in build
    uploads = {
        s["with"]["name"] for s in synth["steps"] if s.get("uses", "").startswith("actions/upload-artifact")
    }
    assert uploads == {"cdk-out", "consumer-images"}
    steps = _load("deploy.yml")["jobs"]["deploy"]["steps"]
    names = [
        s.get("with", {}).get("name")
        for s in steps
        if s.get("uses", "").startswith("actions/download-artifact")
    ]
    assert names == ["cdk-out", "consumer-images"]
    order = [s.get("run", "") for s in steps]
    load = next(i for i, r in enumerate(order) if "docker load" in r)
    deploy = next(i for i, r in enumerate(order) if "cdk deploy" in r)
    assert load < deploy
    assert not [r for r in order if "docker build" in r]


def test_image_asset_script_names_each_distinct_image_once(synth: Synth) -> None:
    """The tags the synth job builds under are the ones cdk-assets looks for before building (cdkasset-<id>):
    one for dev (with its processor project), one shared by staging and prod."""
    script = REPO_ROOT / ".github" / "scripts" / "image_asset.py"
    out = subprocess.run(
        [sys.executable, str(script), str(synth.outdir)], capture_output=True, text=True, check=True
    ).stdout
    rows = [line.split("\t") for line in out.splitlines()]
    ids = {
        asset_id
        for manifest in synth.outdir.glob("assembly-*/*.assets.json")
        for asset_id in json.loads(manifest.read_text()).get("dockerImages", {})
    }
    assert len(ids) == 2
    assert {tag for tag, *_ in rows} == {f"cdkasset-{i}" for i in ids}
    for _, context, dockerfile, platform in rows:
        assert dockerfile == "consumer/Dockerfile" and platform == "linux/amd64"
        assert (Path(context) / "consumer" / "Dockerfile").is_file()
