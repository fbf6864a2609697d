"""deploy/github-oidc-role.yaml: the GitHub OIDC roles, trusted per repository and GitHub environment."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cfnlint.decode import decode

from .conftest import REPO_ROOT

pytestmark = pytest.mark.infra

TEMPLATE = REPO_ROOT / "deploy" / "github-oidc-role.yaml"


def _template() -> dict[str, Any]:
    template, problems = decode(str(TEMPLATE))
    assert not problems and template is not None
    return dict(template)


def test_template_lints_clean() -> None:
    lint = Path(sys.executable).parent / "cfn-lint"
    done = subprocess.run([str(lint), str(TEMPLATE)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def _subject(role: dict[str, Any]) -> Any:
    (statement,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert statement["Action"] == "sts:AssumeRoleWithWebIdentity"
    condition = statement["Condition"]["StringEquals"]
    assert condition["token.actions.githubusercontent.com:aud"] == "sts.amazonaws.com"
    return condition["token.actions.githubusercontent.com:sub"]


def _assumable(role: dict[str, Any]) -> list[Any]:
    (policy,) = role["Properties"]["Policies"]
    (statement,) = policy["PolicyDocument"]["Statement"]
    assert statement["Action"] == "sts:AssumeRole"
    resources = statement["Resource"]
    return resources if isinstance(resources, list) else [resources]


def test_deploy_role_is_trusted_by_the_gated_environment_and_assumes_only_bootstrap_roles() -> None:
    resources = _template()["Resources"]
    deploy, diff = resources["DeployRole"], resources["DiffRole"]
    assert _subject(deploy) == {"Fn::Sub": "repo:${Repository}:environment:${Environment}"}
    assert _subject(diff) == {"Fn::Sub": "repo:${Repository}:environment:${Environment}-diff"}
    kinds = {
        str(r["Fn::Sub"]).split(":role/cdk-${BootstrapQualifier}-")[1].split("-role")[0]
        for r in _assumable(deploy)
    }
    assert kinds == {"deploy", "file-publishing", "image-publishing", "lookup"}
    (lookup,) = _assumable(diff)  # the diff role reads only: the bootstrap's read-only lookup role
    assert "-lookup-role-" in lookup["Fn::Sub"]
