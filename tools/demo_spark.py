"""The demo's Spark step, a child process (``python -m tools.demo_spark WORK``, then a line on stdin).

It starts a local[2] session at once (the slow part), so the demo starts it before the fleet; on a line on
stdin it compacts and aggregates ``WORK/lake/raw`` and checks the result against ``WORK/produced.jsonl``.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any, Final

__all__ = ["SparkStep", "main"]

REPO: Final = Path(__file__).resolve().parents[1]

_KEY: Final = ["stream", "shard_id", "sequence_number", "sub_sequence_number"]


def _verify(spark: Any, curated_root: str, metrics_root: str, produced_path: str) -> dict[str, Any]:
    """Curated rows against what the producer wrote: every produced record exactly once, nothing else."""
    from pyspark.sql import functions as F

    curated = spark.read.parquet(curated_root).select(*_KEY)
    produced = (
        spark.read.schema("stream string, shard_id string, sequence_number string")
        .json(produced_path)
        .withColumn("sub_sequence_number", F.lit(0).cast("long"))  # the demo producer does not aggregate
        .distinct()
    )
    rows, distinct, produced_distinct = curated.count(), curated.distinct().count(), produced.count()
    missing = produced.join(curated, _KEY, "left_anti").count()
    unexpected = curated.join(produced, _KEY, "left_anti").count()
    aggregated = spark.read.parquet(f"{metrics_root}/per_hour").agg(F.sum("records")).first()[0] or 0
    exactly_once = rows == distinct == produced_distinct and missing == unexpected == 0
    return {
        "rows": rows,
        "duplicate_rows": rows - distinct,
        "distinct_produced": produced_distinct,
        "missing": missing,
        "unexpected": unexpected,
        "exactly_once": exactly_once,
        "metrics_records": int(aggregated),  # the aggregation saw every curated row when it is ``rows``
    }


def _run(spark: Any, work: Path) -> dict[str, Any]:
    """Compaction and aggregation of every hour in ``work/lake/raw``, then :func:`_verify`."""
    from spark_jobs import aggregate, compact

    lake = work / "lake"
    raw, curated, quarantine, metrics = (str(lake / d) for d in ("raw", "curated", "quarantine", "metrics"))
    found = sorted({f"{p.parent.name[5:]}T{p.name[5:]}" for p in lake.glob("raw/stream=*/date=*/hour=*")})
    print(f"  spark: hours {found[0]} .. {found[-1]} (UTC)")
    began = time.monotonic()
    counts = compact.run(spark, compact.CompactOptions(raw, curated, quarantine, found[0], found[-1]))
    compact_s = time.monotonic() - began
    print(
        f"  spark: compaction: {counts['lines']} raw lines -> {counts['curated']} curated rows "
        f"({counts['duplicates']} duplicates dropped, {counts['malformed']} malformed) in {compact_s:.1f}s"
    )
    began = time.monotonic()
    aggregated = aggregate.run(spark, aggregate.AggregateOptions(curated, metrics, found[0], found[-1]))
    aggregate_s = time.monotonic() - began
    print(
        f"  spark: aggregation: {aggregated['hours']} hour(s) -> per_minute/, per_hour/ ({aggregate_s:.1f}s)"
    )
    return {
        "compact": counts,
        "aggregate": aggregated,
        "curated": _verify(spark, curated, metrics, str(work / "produced.jsonl")),
        "seconds": {"compact": round(compact_s, 1), "aggregate": round(aggregate_s, 1)},
    }


class SparkStep:
    """The demo's side: this module as a child in its own process group, sent one request, then stopped."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self._log: IO[bytes] = (work / "spark.log").open("ab")
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tools.demo_spark", str(work)],
            cwd=REPO,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONUNBUFFERED": "1"},  # lines at once
            stdin=subprocess.PIPE,
            stderr=self._log,
            start_new_session=True,  # its own process group: the JVM goes with it on stop()
        )

    def run(self) -> dict[str, Any]:
        """Start the jobs on ``work/lake`` and ``work/produced.jsonl``, wait for them, return the counts."""
        assert self._proc.stdin is not None
        self._proc.stdin.write(b"run\n")
        self._proc.stdin.close()
        if code := self._proc.wait(timeout=240):
            raise RuntimeError(f"the Spark step failed (exit {code}); see {self.work / 'spark.log'}")
        return dict(json.loads((self.work / "spark-result.json").read_text(encoding="utf-8")))

    def stop(self) -> None:
        """Stop the child's whole group, its JVM included (SIGTERM, SIGKILL after 5 s). Idempotent."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            deadline = time.monotonic() + 5
            with contextlib.suppress(ProcessLookupError):  # raised once the group is empty
                os.killpg(self._proc.pid, sig)
                while time.monotonic() < deadline:
                    self._proc.poll()  # reaps the child: a zombie would keep the group alive
                    os.killpg(self._proc.pid, 0)
                    time.sleep(0.05)
        self._log.close()


def main(argv: list[str] | None = None) -> int:
    """Start the session, then run the jobs once a line comes on stdin (none if stdin closes first)."""
    parser = argparse.ArgumentParser(prog="python -m tools.demo_spark", description=__doc__)
    parser.add_argument("work", type=Path, help="gets spark-result.json (the counts) and spark-tmp/")
    work = parser.parse_args(argv).work
    # PR_SET_PDEATHSIG: SIGTERM when the demo dies; the JVM exits when its pipe from this process closes.
    ctypes.CDLL("libc.so.6").prctl(1, signal.SIGTERM)
    began = time.monotonic()
    from spark_jobs.local import local_session

    spark = local_session("demo", str(work / "spark-tmp"))
    started_s = time.monotonic() - began
    if not sys.stdin.readline().strip():
        return 0  # the demo went away before asking for anything
    print(f"  spark: local[2] session ready (started in {started_s:.1f}s)")
    result = _run(spark, work)
    result["seconds"]["session_start"] = round(started_s, 1)
    (work / "spark-result.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
