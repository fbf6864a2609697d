"""Security checks that cannot be skipped: cdk-nag AwsSolutions and cfn-lint on every synthesized template."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Aspects, Stack, Stage
from aws_cdk import aws_s3 as s3
from cdk_nag import AwsSolutionsChecks

from .conftest import Synth

pytestmark = pytest.mark.infra

# cfn-lint findings accepted on CDK-generated resources, with why. Errors are never accepted.
ACCEPTED_LINT = {
    "W3005": "CDK adds DependsOn next to a GetAtt/Ref on roles and policies it generates",
}


def _nag_findings(messages: list[dict[str, Any]]) -> list[str]:
    return [
        f"{m['path']}: {str(m['data']).splitlines()[0]}"
        for m in messages
        if m["type"] in ("aws:cdk:error", "aws:cdk:warning") and "AwsSolutions-" in str(m["data"])
    ]


def test_cdk_nag_has_no_unsuppressed_finding(synth: Synth) -> None:
    findings = [f for messages in synth.messages.values() for f in _nag_findings(messages)]
    assert findings == []


def test_cdk_nag_ran_on_every_stack(synth: Synth) -> None:
    reports = sorted(p.name for p in synth.outdir.glob("AwsSolutions-*-NagReport.csv"))
    assert len(reports) == len(synth.templates)
    # The reports list suppressed rules too: the checks ran, they did not just find nothing.
    consumer = next(
        synth.outdir.glob("AwsSolutions-prod-kinesis-fleet-prod-consumer-NagReport.csv")
    ).read_text()
    assert "AwsSolutions-ECS2" in consumer and "Suppressed" in consumer


def test_the_nag_check_catches_a_new_finding(tmp_path: Path) -> None:
    """The same wiring (aspect on a stage, findings read from the assembly) reports an insecure bucket."""
    app = App(outdir=str(tmp_path), context={"@aws-cdk/core:failSynthOnValidationErrors": False})
    stage = Stage(app, "canary")
    stack = Stack(stage, "Canary")
    s3.Bucket(stack, "Plain")
    Aspects.of(stage).add(AwsSolutionsChecks())
    assembly = app.synth().get_nested_assembly("assembly-canary")
    (artifact,) = assembly.stacks
    findings = _nag_findings(
        [{"path": m.id, "type": m.entry.type, "data": m.entry.data} for m in artifact.messages]
    )
    assert any("AwsSolutions-S1" in f for f in findings)  # no access logs
    assert any("AwsSolutions-S10" in f for f in findings)  # no SSL enforcement


def test_every_suppression_is_on_a_resource_and_says_why(synth: Synth) -> None:
    suppressions = 0
    for (env, unit), template in synth.templates.items():
        assert "cdk_nag" not in template.get("Metadata", {}), f"{env}/{unit}: stack-wide suppression"
        for logical_id, resource in template["Resources"].items():
            for rule in resource.get("Metadata", {}).get("cdk_nag", {}).get("rules_to_suppress", []):
                suppressions += 1
                assert len(rule["reason"]) >= 40, f"{env}/{unit}/{logical_id}: {rule}"
                assert rule.get("applies_to") != ["*"], f"{env}/{unit}/{logical_id}: {rule}"
    assert suppressions > 0


def test_cfn_lint_finds_no_errors(synth: Synth) -> None:
    # One cfn-lint process for every template: its rule and schema loading dominates the run time.
    paths = [str(p) for _, p in sorted(synth.template_paths.items())]
    run = subprocess.run(
        [str(Path(sys.executable).with_name("cfn-lint")), "--format", "json", *paths],
        capture_output=True,
        text=True,
        check=False,
        timeout=240,
    )
    assert run.stdout.strip(), run.stderr
    matches = json.loads(run.stdout)
    problems = [
        f"{Path(m['Filename']).name}: {m['Rule']['Id']} {m['Message']} ({'/'.join(map(str, m['Location']['Path']))})"
        for m in matches
        if (m["Level"] != "Informational" and m["Rule"]["Id"] not in ACCEPTED_LINT) or m["Level"] == "Error"
    ]
    assert problems == []
    # Exit code bits: 2 errors, 4 warnings, 8 informational; 1 is a crash. Only warnings/info may remain.
    assert run.returncode in (0, 4, 8, 12), run.stderr
