"""The demo's Spark step, run as a child process: compaction, aggregation, then an exactly-once check.

    python -m tools.demo_spark --result RESULT.json --spark-local-dir DIR   (then one JSON line on stdin)

It starts a local[2] SparkSession at once (the slow part, ~8 s) and then waits for one JSON request on
stdin, so the demo can start it before the fleet starts and use it once the fleet is done::

    {"lake": "<dir holding raw/>", "start": "YYYY-MM-DDTHH", "end": "YYYY-MM-DDTHH", "produced": "<jsonl>"}

It runs :mod:`spark_jobs.compact` (``<lake>/raw`` -> ``<lake>/curated`` + ``<lake>/quarantine``) and
:mod:`spark_jobs.aggregate` (``-> <lake>/metrics``) through their own argument parsers, then compares the
curated table with the records the producer wrote (``produced``: JSON lines with ``stream``, ``shard_id``,
``sequence_number``), and writes every count to ``RESULT.json``. If stdin closes first (the demo is gone),
it exits without doing anything; it also exits when the demo process dies. :class:`SparkStep` is the demo's
side of this.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any, Final

from tools.demo_support import stop_process_group

__all__ = ["SparkStep", "main"]

REPO: Final = Path(__file__).resolve().parents[1]

_KEY: Final = ["stream", "shard_id", "sequence_number", "sub_sequence_number"]


def _exit_with_parent() -> None:
    """Exit when the demo that started this process is gone (Spark's JVM follows its Python parent)."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


def _say(message: str) -> None:
    print(f"  spark: {message}", flush=True)


def _session(local_dir: Path) -> Any:
    from spark_jobs.local import local_session

    return local_session("demo", str(local_dir))


def _verify(spark: Any, curated_root: str, metrics_root: str, produced_path: str) -> dict[str, Any]:
    """Curated rows against what the producer wrote: every produced record exactly once, nothing else."""
    from pyspark.sql import functions as F

    curated = spark.read.parquet(curated_root).select(*_KEY)
    produced = (
        spark.read.schema("stream string, shard_id string, sequence_number string")
        .json(produced_path)
        .withColumn("sub_sequence_number", F.lit(0).cast("long"))  # the demo producer does not aggregate
    )
    rows = curated.count()
    distinct = curated.distinct().count()
    produced_distinct = produced.distinct().count()
    missing = produced.join(curated, _KEY, "left_anti").count()
    unexpected = curated.join(produced.distinct(), _KEY, "left_anti").count()
    per_hour = spark.read.parquet(f"{metrics_root}/per_hour")
    per_minute = spark.read.parquet(f"{metrics_root}/per_minute")
    aggregated = per_hour.agg(F.sum("records")).first()[0] or 0
    return {
        "curated_rows": rows,
        "curated_distinct_records": distinct,
        "curated_duplicate_rows": rows - distinct,
        "produced_distinct": produced_distinct,
        "produced_missing_from_curated": missing,
        "curated_not_produced": unexpected,
        "exactly_once": rows == distinct == produced_distinct and missing == 0 and unexpected == 0,
        "metrics_per_hour_rows": per_hour.count(),
        "metrics_per_minute_rows": per_minute.count(),
        "metrics_records": int(aggregated),
    }


def _run(spark: Any, request: dict[str, Any]) -> dict[str, Any]:
    from spark_jobs import aggregate, compact

    lake = Path(request["lake"]).resolve()
    raw, curated, quarantine, metrics = (str(lake / d) for d in ("raw", "curated", "quarantine", "metrics"))
    hours = ["--start", request["start"], "--end", request["end"]]
    began = time.monotonic()
    counts = compact.run(
        spark,
        compact.parse_args(["--input", raw, "--output", curated, "--quarantine", quarantine, *hours]),
    )
    compact_s = time.monotonic() - began
    _say(
        f"compaction: {counts['lines']} raw lines -> {counts['curated']} curated rows "
        f"({counts['duplicates']} duplicates dropped, {counts['malformed']} malformed) in {compact_s:.1f}s"
    )
    began = time.monotonic()
    aggregated = aggregate.run(spark, aggregate.parse_args(["--input", curated, "--output", metrics, *hours]))
    aggregate_s = time.monotonic() - began
    _say(f"aggregation: {aggregated['hours']} hour(s) -> per_minute/ and per_hour/ in {aggregate_s:.1f}s")
    check = _verify(spark, curated, metrics, request["produced"])
    return {
        "compact": counts,
        "aggregate": aggregated,
        "check": check,
        "seconds": {"compact": round(compact_s, 1), "aggregate": round(aggregate_s, 1)},
        "paths": {"curated": curated, "quarantine": quarantine, "metrics": metrics},
    }


class SparkStep:
    """The demo's side: start this module as a child in its own process group, send it the request, stop it.

    ``work`` receives ``spark.log`` (Spark's stderr), ``spark-result.json`` and ``spark-tmp/``.
    """

    def __init__(self, work: Path) -> None:
        self.work = work
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self) -> SparkStep:
        self._log = (self.work / "spark.log").open("ab")
        self._proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tools.demo_spark",
                "--result",
                str(self.work / "spark-result.json"),
                "--spark-local-dir",
                str(self.work / "spark-tmp"),
            ],
            cwd=REPO,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONUNBUFFERED": "1"},
            stdin=subprocess.PIPE,
            stderr=self._log,
            start_new_session=True,  # its own process group: the JVM goes with it on stop()
        )
        return self

    def run(self, request: dict[str, Any], timeout: float = 240) -> dict[str, Any]:
        """Send the request, wait for the jobs, return the counts (see the module docstring)."""
        assert self._proc is not None and self._proc.stdin is not None, "start() first"
        self._proc.stdin.write((json.dumps(request) + "\n").encode())
        self._proc.stdin.close()
        code = self._proc.wait(timeout=timeout)
        if code != 0:
            raise RuntimeError(f"the Spark step failed (exit {code}); see {self.work / 'spark.log'}")
        result: dict[str, Any] = json.loads((self.work / "spark-result.json").read_text(encoding="utf-8"))
        return result

    def stop(self) -> None:
        """Stop the child and its JVM (SIGTERM to the group, SIGKILL after 5 s). Idempotent."""
        stop_process_group(self._proc)
        if self._log is not None:
            self._log.close()
            self._log = None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.demo_spark", description=__doc__)
    parser.add_argument("--result", required=True, type=Path, help="where to write the counts (JSON)")
    parser.add_argument("--spark-local-dir", required=True, type=Path, help="Spark scratch space")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    _exit_with_parent()
    args.spark_local_dir.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    spark = _session(args.spark_local_dir)
    started_s = time.monotonic() - began
    line = sys.stdin.readline()
    if not line.strip():
        return 0  # the demo went away before asking for anything
    request = json.loads(line)
    _say(f"local[2] session ready (started in {started_s:.1f}s)")
    result = _run(spark, request)
    result["seconds"]["session_start"] = round(started_s, 1)
    args.result.write_text(json.dumps(result, indent=2), encoding="utf-8")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
