"""One local[2] SparkSession for the whole test session, with the settings that make tiny jobs fast."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# Workers must run this interpreter (the venv), not /usr/bin/python3; the Makefile exports it too.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

FAST_SETTINGS = {
    "spark.master": "local[2]",
    "spark.app.name": "tests-spark",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
}


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from pyspark.sql import SparkSession

    from spark_jobs.storage import configure

    builder = SparkSession.builder
    for key, value in {
        **FAST_SETTINGS,
        "spark.local.dir": str(tmp_path_factory.mktemp("spark-local")),
    }.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield configure(session)
    session.stop()


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    """A fresh folder standing in for the bucket: raw/, curated/, quarantine/ and metrics/ go under it."""
    return tmp_path
