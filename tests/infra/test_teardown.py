"""docs/infrastructure.md's dev teardown empties versioned buckets: every version and delete marker goes.

The documented command runs as written against a versioned bucket on the S3 emulator (moto), after which the
bucket deletes, as CloudFormation's delete of the bucket would.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from .conftest import REPO_ROOT

pytestmark = [pytest.mark.infra, pytest.mark.integration]

DOCS = REPO_ROOT / "docs" / "infrastructure.md"


def _documented_command() -> str:
    """The Python one-liner of the teardown block (``.venv/bin/python -c '...' "$bucket"``)."""
    text = DOCS.read_text()
    block = text[text.index("### Tearing down dev") :]
    (code,) = re.findall(r"\.venv/bin/python -c '([^']+)' \"\$bucket\"", block)
    return code


def test_the_documented_teardown_empties_a_versioned_bucket(
    emulators: Any, unique_name: Callable[..., str]
) -> None:
    s3 = emulators.client("s3")
    bucket = unique_name("teardown")
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    for n in range(3):
        s3.put_object(Bucket=bucket, Key="raw/a.jsonl.gz", Body=f"version {n}".encode())
    s3.put_object(Bucket=bucket, Key="raw/b.jsonl.gz", Body=b"b")
    s3.delete_object(Bucket=bucket, Key="raw/b.jsonl.gz")  # leaves a delete marker and a version
    listed = s3.list_object_versions(Bucket=bucket)
    assert len(listed["Versions"]) == 4 and len(listed["DeleteMarkers"]) == 1
    with pytest.raises(s3.exceptions.ClientError, match="BucketNotEmpty"):
        s3.delete_bucket(Bucket=bucket)  # what `aws s3 rm --recursive` alone would leave behind

    env = {**emulators.env(), "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, "-c", _documented_command(), bucket], env=env, check=True, timeout=60)

    listed = s3.list_object_versions(Bucket=bucket)
    assert not listed.get("Versions") and not listed.get("DeleteMarkers")
    s3.delete_bucket(Bucket=bucket)
