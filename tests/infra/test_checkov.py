"""checkov (pinned in requirements/tools/checkov.txt, own venv .venv/checkov) on every synthesized template.

Every finding is either fixed or skipped on its resource with a reason (``Metadata.checkov.skip``, written by
``stacks.nag.skip_checkov``), as cdk-nag findings are suppressed. checkov runs offline: no policy download, no
platform mapping. A canary template with an insecure bucket runs in the same scan, so a scan that silently
checked nothing cannot pass.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from .conftest import REPO_ROOT, Synth

pytestmark = pytest.mark.infra

CHECKOV = REPO_ROOT / ".venv" / "checkov" / "bin" / "checkov"
CANARY = {
    "Resources": {"PlainBucket": {"Type": "AWS::S3::Bucket", "Properties": {}}},
}


@pytest.fixture(scope="module")
def scan(synth: Synth, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    assert CHECKOV.is_file(), (
        f"{CHECKOV} is missing: run `make setup` (it installs requirements/tools/checkov.txt)"
    )
    templates = tmp_path_factory.mktemp("checkov")
    for (env, unit), path in synth.template_paths.items():
        (templates / f"{env}-{unit}.template.json").write_text(path.read_text())
    (templates / "canary.template.json").write_text(json.dumps(CANARY))
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(templates.parent),
        "BC_SKIP_MAPPING": "TRUE",  # no call to the platform for check metadata
        "LOG_LEVEL": "WARNING",
    }
    proc = subprocess.run(
        [str(CHECKOV), "--directory", str(templates), "--framework", "cloudformation", "--output", "json",
         "--skip-download", "--compact"],
        capture_output=True, text=True, env=env, timeout=180, check=False,
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr[-3000:]  # 1: failed checks, which the tests below name
    report = json.loads(proc.stdout)
    results: list[dict[str, Any]] = report if isinstance(report, list) else [report]
    return results


def _checks(scan: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [check for report in scan for check in report["results"][kind]]


def _where(check: dict[str, Any]) -> str:
    return f"{Path(check['file_path']).name} {check['resource']} {check['check_id']} ({check['check_name']})"


def test_every_template_was_scanned(synth: Synth, scan: list[dict[str, Any]]) -> None:
    scanned = {Path(c["file_path"]).name for c in _checks(scan, "passed_checks")}
    assert scanned >= {f"{env}-{unit}.template.json" for env, unit in synth.template_paths}
    assert len(_checks(scan, "passed_checks")) > 400


def test_checkov_finds_nothing_unexplained(scan: list[dict[str, Any]]) -> None:
    failed = [_where(c) for c in _checks(scan, "failed_checks") if "canary" not in c["file_path"]]
    assert failed == []


def test_every_skip_says_why(scan: list[dict[str, Any]]) -> None:
    skipped = _checks(scan, "skipped_checks")
    assert skipped, "the templates carry checkov skips; none were seen"
    unexplained = [
        _where(c) for c in skipped if len(c["check_result"].get("suppress_comment", "").strip()) < 20
    ]
    assert unexplained == []


def test_the_scan_catches_an_insecure_bucket(scan: list[dict[str, Any]]) -> None:
    canary = {c["check_id"] for c in _checks(scan, "failed_checks") if "canary" in c["file_path"]}
    assert {"CKV_AWS_18", "CKV_AWS_21"} <= canary  # no access logging, no versioning
