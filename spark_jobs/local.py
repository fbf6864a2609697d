"""A local-mode SparkSession with the settings that make small jobs fast on a 2-core machine.

Used by the tests and the demo; on EMR the platform configures the session and the jobs create their own.
"""

from __future__ import annotations

from typing import Final

from pyspark.sql import SparkSession

from spark_jobs import storage

__all__ = ["LOCAL_SETTINGS", "local_session"]

LOCAL_SETTINGS: Final[dict[str, str]] = {
    "spark.master": "local[2]",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.codegen.wholeStage": "false",  # tiny inputs: code generation costs more than it saves
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
}


def local_session(app_name: str, local_dir: str) -> SparkSession:
    """A ``local[2]`` session (scratch space in ``local_dir``: Spark ignores TMPDIR) with the jobs' SQL conf."""
    builder = SparkSession.builder.appName(app_name).config("spark.local.dir", local_dir)
    for key, value in LOCAL_SETTINGS.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return storage.configure(session)
