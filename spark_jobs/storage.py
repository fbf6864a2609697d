"""Spark I/O shared by the job entry files: the session, listing hour partitions, partitioned writes.

Paths are Hadoop URIs, so the same code reads ``file://`` (or plain local paths) on a laptop and
``s3://`` on EMR.
"""

from __future__ import annotations

import logging
from typing import Any

from pyspark.sql import DataFrame, SparkSession

__all__ = ["JOB_SQL_CONF", "configure", "existing", "get_session", "join", "write_partitioned"]

log = logging.getLogger(__name__)

#: SQL settings every job relies on (set at run time, so they apply to a shared or an EMR session too).
JOB_SQL_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.sources.partitionOverwriteMode": "dynamic",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
}


def configure(spark: SparkSession) -> SparkSession:
    """Apply :data:`JOB_SQL_CONF` to ``spark`` (every job's ``run`` does, whoever built the session)."""
    for key, value in JOB_SQL_CONF.items():
        spark.conf.set(key, value)
    return spark


def get_session(app_name: str) -> SparkSession:
    """The active session (spark-submit, EMR, tests) or a new one, with :data:`JOB_SQL_CONF` applied."""
    return configure(SparkSession.builder.appName(app_name).getOrCreate())


def join(root: str, *parts: str) -> str:
    """``root`` and ``parts`` joined with single slashes (URIs, not OS paths)."""
    return "/".join([root.rstrip("/"), *parts])


def existing(spark: SparkSession, patterns: list[str]) -> list[str]:
    """The glob patterns that match at least one path, asking the Hadoop file system of each pattern."""
    jvm: Any = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    found = []
    for pattern in patterns:
        path = jvm.org.apache.hadoop.fs.Path(pattern)
        statuses = path.getFileSystem(conf).globStatus(path)
        if statuses is not None and len(statuses) > 0:
            found.append(pattern)
    return found


def write_partitioned(df: DataFrame, path: str, fmt: str, **options: str) -> None:
    """Overwrite only the ``date``/``hour`` partitions present in ``df`` under ``path``."""
    (
        df.write.format(fmt)
        .mode("overwrite")
        .option("partitionOverwriteMode", "dynamic")
        .options(**options)
        .partitionBy("date", "hour")
        .save(path)
    )
