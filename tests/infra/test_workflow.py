"""The GitHub Actions pipeline: checks on every change, OIDC deploys in order, approval via environments."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from .conftest import REPO_ROOT

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
    assert 'cdk deploy --app cdk.out "${{ inputs.environment }}/*"' in runs
