"""One local[2] SparkSession for the whole test session, with the settings that make tiny jobs fast."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# Workers must run this interpreter (the venv), not /usr/bin/python3; the Makefile exports it too.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from spark_jobs.local import local_session

    session = local_session("tests-spark", str(tmp_path_factory.mktemp("spark-local")))
    yield session
    session.stop()


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    """A fresh folder standing in for the bucket: raw/, curated/, quarantine/ and metrics/ go under it."""
    return tmp_path
