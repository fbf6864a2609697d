"""Which hours a run with ``--only-stale`` rewrites: an hour whose output is newer than all of its input is fresh.

Every committed partition of a job's output gets a hidden marker file, ``_inputs_listed_at-<ms>``, written
after the commit: ``<ms>`` is the time, as the output's file system reports it, taken just before the job
listed its input (:func:`clock`). The marker is hidden from Spark's readers by its ``_`` and moves with its
partition. An hour is fresh when its output's markers say it was listed after its newest input was written:

- compaction: the newest raw object of the hour is older than the newest marker of its curated and quarantine
  partitions by more than :data:`RAW_MARGIN_MS` (the raw objects are written by the workers while a job runs;
  an object being uploaded at the listing may already carry its time, yet not be listed);
- aggregation: every file of the curated partition (its data, and its marker written after its commit) is
  older than the markers of both metrics partitions (the jobs run one after the other: no margin).

A partition without a marker (written before markers existed, or a job killed between its commit and the
marker) counts as stale, so the worst a missing marker costs is a rewrite.

Comparing each output with the listing that fed it, not with the output's own file times, matters: an object
that lands after a job listed its hour but before the job wrote that hour is not in its output, yet is older
than every output file; on S3 a committed partition's files carry the time of the commit's copy.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

from spark_jobs import storage

__all__ = [
    "MARKER_PREFIX",
    "RAW_MARGIN_MS",
    "Partition",
    "aggregation_is_fresh",
    "clock",
    "compaction_is_fresh",
    "hour_label",
    "mark",
    "partition",
]

log = logging.getLogger(__name__)

#: The name of a partition's marker, before its time in milliseconds.
MARKER_PREFIX = "_inputs_listed_at-"
#: How much older than a compaction's listing a raw object must be to count as listed by it.
RAW_MARGIN_MS = 60_000


@dataclass(frozen=True)
class Partition:
    """What one ``date=/hour=`` partition of an output holds, from one listing of it."""

    #: The newest modification time of its files (the marker included), ms since the epoch.
    newest_ms: int
    #: When the input of the run that wrote it was listed (its marker), or None: no marker.
    listed_at_ms: int | None


def hour_label(date: str, hour: str) -> str:
    """``2026-11-21``, ``05`` -> ``2026-11-21T05`` (the jobs' hour format)."""
    return f"{date}T{hour}"


def _fs(spark: SparkSession, uri: str) -> tuple[Any, Any]:
    jvm: Any = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(uri)
    return path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), path


def clock(spark: SparkSession, root: str) -> int:
    """The time now as ``root``'s file system reports it (ms): the modification time of a hidden probe file
    written there and removed at once. A root that did not exist is removed again."""
    fs, base = _fs(spark, root)
    existed = bool(fs.exists(base))
    jvm: Any = spark.sparkContext._jvm
    probe = jvm.org.apache.hadoop.fs.Path(base, f"_clock-{uuid.uuid4().hex[:12]}")
    fs.create(probe, True).close()
    try:
        return int(fs.getFileStatus(probe).getModificationTime())
    finally:
        fs.delete(probe, False)
        if not existed:
            fs.delete(base, True)


def partition(spark: SparkSession, root: str, date: str, hour: str) -> Partition | None:
    """``root``'s partition of the hour, or None if there is none (one listing of the partition's folder)."""
    fs, path = _fs(spark, storage.join(root, f"date={date}", f"hour={hour}"))
    if not fs.exists(path):
        return None
    newest, listed = 0, None
    for status in fs.listStatus(path):
        newest = max(newest, int(status.getModificationTime()))
        name = str(status.getPath().getName())
        if status.isFile() and name.startswith(MARKER_PREFIX) and name[len(MARKER_PREFIX) :].isdigit():
            listed = max(listed or 0, int(name[len(MARKER_PREFIX) :]))
    return Partition(newest, listed)


def mark(spark: SparkSession, root: str, partitions: Iterable[tuple[str, str]], listed_at_ms: int) -> None:
    """Write the marker of a run whose input was listed at ``listed_at_ms`` into ``root``'s ``partitions``
    (just committed by that run: a committed partition is a new folder, so it holds no other marker)."""
    jvm: Any = spark.sparkContext._jvm
    for date, hour in partitions:
        fs, path = _fs(spark, storage.join(root, f"date={date}", f"hour={hour}"))
        fs.create(jvm.org.apache.hadoop.fs.Path(path, f"{MARKER_PREFIX}{listed_at_ms}"), True).close()


def compaction_is_fresh(newest_raw_ms: int, outputs: Sequence[Partition | None]) -> bool:
    """Whether a compaction of an hour whose newest raw object has ``newest_raw_ms`` can be skipped, given the
    hour's curated and quarantine partitions (None: absent): the newest marker among them was written by a run
    that listed every raw object of the hour."""
    marks = [p.listed_at_ms for p in outputs if p is not None and p.listed_at_ms is not None]
    return bool(marks) and newest_raw_ms < max(marks) - RAW_MARGIN_MS


def aggregation_is_fresh(curated: Partition | None, outputs: Sequence[Partition | None]) -> bool:
    """Whether an aggregation of an hour can be skipped: every metrics partition of the hour (``outputs``)
    has a marker newer than every file of the hour's ``curated`` partition."""
    if curated is None or any(p is None or p.listed_at_ms is None for p in outputs):
        return False
    return all(
        p is not None and p.listed_at_ms is not None and curated.newest_ms < p.listed_at_ms for p in outputs
    )
