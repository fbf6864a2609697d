"""The consumer reads ``AWS_REGION`` as well as ``AWS_DEFAULT_REGION`` (botocore itself reads only the latter;
ECS on EC2 sets only what the task definition says)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from .support import REPO, make_names

pytestmark = pytest.mark.integration


def test_status_runs_with_only_aws_region_set(emulators, dynamodb_client, unique_name) -> None:
    names = make_names(unique_name, dynamodb_client)
    env = {k: v for k, v in {**os.environ, **emulators.env()}.items() if k != "AWS_DEFAULT_REGION"}
    env["AWS_REGION"] = emulators.region
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "consumer",
            "status",
            "--lease-table",
            names.lease_table,
            "--checkpoint-table",
            names.checkpoint_table,
            "--json",
        ],
        check=False,
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
