"""The pipeline benchmark: Spark local[2] compaction + aggregation vs an independent DuckDB computation.

    python -m bench.pipeline                      # N = 1M, 4M, 16M; 3 runs each; ~25-40 min on 2 cores
    python -m bench.pipeline --sizes 100000 400000 --repeats 1   # a quick look

For each N it generates N distinct raw records in the raw sink's format (plus ``--duplicate-rate``
redelivered copies, payloads a re-serializing sink would change, CR-LF lines and malformed lines), runs
``spark_jobs.compact`` and ``spark_jobs.aggregate`` on one local[2] SparkSession (after warm-up runs, so JIT
compilation is not timed), runs the same pipeline in DuckDB, checks that both produce the same curated rows
(payload text byte for byte) and metrics (0 differences, 0 duplicate keys) and reports medians. Spark and
DuckDB runs alternate, so load from other processes on a shared machine falls on both alike; besides wall
time each run's CPU time is recorded (the Spark JVM's, the DuckDB process's), which such load disturbs less.
Figures: records/s, time(max N)/time(min N) (linear is the size ratio) and the Spark/DuckDB ratio at every
size. Results go to stdout and reports/bench/pipeline.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tools.pipeline_data import RawSpec, generate_raw
from tools.pipeline_duckdb import compare, duckdb_pipeline

__all__ = ["main", "run_benchmark"]

SPARK_SETTINGS = {
    "spark.master": "local[2]",
    "spark.app.name": "bench-pipeline",
    "spark.driver.memory": "4g",
    "spark.sql.shuffle.partitions": "16",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.session.timeZone": "UTC",
}
_RANGE = ("2026-11-21T00", "2026-11-21T03")  # the generator spreads records over 4 hours from 2026-11-21T00


def _spark(local_dir: Path) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    for key, value in {**SPARK_SETTINGS, "spark.local.dir": str(local_dir)}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _process_cpu(pid: int) -> float:
    """CPU seconds (user + system) used so far by process ``pid``, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _spark_pipeline(spark: Any, raw: Path, out: Path) -> dict[str, Any]:
    from spark_jobs import aggregate, compact

    shutil.rmtree(out, ignore_errors=True)
    start, end = _RANGE
    jvm = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    c0, t0 = _process_cpu(jvm), time.perf_counter()
    counts = compact.run(
        spark,
        compact.CompactOptions(
            f"file://{raw}", f"file://{out}/curated", f"file://{out}/quarantine", start, end
        ),
    )
    t1 = time.perf_counter()
    aggregate.run(spark, aggregate.AggregateOptions(f"file://{out}/curated", f"file://{out}", start, end))
    c2, t2 = _process_cpu(jvm), time.perf_counter()
    return {
        "compact_s": t1 - t0,
        "aggregate_s": t2 - t1,
        "total_s": t2 - t0,
        "cpu_s": c2 - c0,
        "counts": counts,
    }


def _duckdb_run(con: Any, raw: Path, out: Path) -> dict[str, float]:
    shutil.rmtree(out, ignore_errors=True)
    c0 = time.process_time()
    timings = duckdb_pipeline(con, raw, out)
    return {**timings, "cpu_s": time.process_time() - c0}


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return round(float(statistics.median(float(r[key]) for r in runs)), 2)


def run_benchmark(sizes: Sequence[int], repeats: int, duplicate_rate: float, workdir: Path) -> dict[str, Any]:
    """Run every size (and the ratio size), returning the report."""
    import duckdb

    logging.getLogger("spark_jobs").setLevel(logging.ERROR)  # the counts are in the report
    spark = _spark(workdir / "spark-local")
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'; SET enable_progress_bar = false; SET threads = 2")
    load_before = os.getloadavg()

    # Two untimed runs first: the JVM's JIT warms up over the first few million rows.
    warm = workdir / "warmup-raw"
    generate_raw(warm, RawSpec(records=300_000, hours=4, malformed=4, duplicate_rate=duplicate_rate))
    for _ in range(2):
        _spark_pipeline(spark, warm, workdir / "warmup-out")
    shutil.rmtree(warm)

    results: list[dict[str, Any]] = []
    for n in sorted(set(sizes)):
        raw = workdir / f"raw-{n}"
        t = time.perf_counter()
        generated = generate_raw(raw, RawSpec(records=n, hours=4, malformed=8, duplicate_rate=duplicate_rate))
        generate_s = time.perf_counter() - t
        spark_runs, duck_runs = [], []
        for _ in range(repeats):  # alternate, so that outside load falls on both alike
            spark_runs.append(_spark_pipeline(spark, raw, workdir / f"spark-{n}"))
            duck_runs.append(_duckdb_run(con, raw, workdir / f"duck-{n}"))
        check = compare(con, workdir / f"spark-{n}", workdir / f"duck-{n}")
        counts = spark_runs[-1]["counts"]
        passed = (
            check["curated_rows_spark"] == check["curated_rows_duckdb"] == generated.distinct_records
            and check["curated_differences"] == check["duplicate_keys_spark"] == 0
            and check["per_minute_differences"] == check["per_hour_differences"] == 0
            and counts["malformed"] == generated.malformed
            and not counts["corrupt_objects"]
        )
        spark_total = _median(spark_runs, "total_s")
        duck_total = _median(duck_runs, "total_s")
        result = {
            "records": n,
            "lines": generated.lines,
            "objects": generated.objects,
            "duplicates": counts["duplicates"],
            "malformed": counts["malformed"],
            "generate_s": round(generate_s, 2),
            "spark": {
                "compact_s": _median(spark_runs, "compact_s"),
                "aggregate_s": _median(spark_runs, "aggregate_s"),
                "total_s": spark_total,
                "compact_records_per_s": round(n / _median(spark_runs, "compact_s")),
                "total_records_per_s": round(n / spark_total),
                "runs_total_s": [round(r["total_s"], 2) for r in spark_runs],
                "cpu_s": _median(spark_runs, "cpu_s"),
            },
            "duckdb": {
                "compact_s": _median(duck_runs, "compact_s"),
                "aggregate_s": _median(duck_runs, "aggregate_s"),
                "total_s": duck_total,
                "total_records_per_s": round(n / duck_total),
                "runs_total_s": [round(r["total_s"], 2) for r in duck_runs],
                "cpu_s": _median(duck_runs, "cpu_s"),
            },
            "spark_over_duckdb": round(spark_total / duck_total, 2),
            "spark_over_duckdb_compact": round(
                _median(spark_runs, "compact_s") / _median(duck_runs, "compact_s"), 2
            ),
            "spark_over_duckdb_cpu": round(_median(spark_runs, "cpu_s") / _median(duck_runs, "cpu_s"), 2),
            "check": {**check, "passed": passed},
        }
        print(json.dumps(result), flush=True)
        results.append(result)
        shutil.rmtree(raw)
    spark.stop()
    by_n = {r["records"]: r for r in results}
    low, high = min(sizes), max(sizes)
    return {
        "benchmark": "pipeline",
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_avg_before": load_before,
            "load_avg_after": os.getloadavg(),
        },
        "settings": {
            "spark": SPARK_SETTINGS,
            "duckdb_threads": 2,
            "repeats": repeats,
            "duplicate_rate": duplicate_rate,
            "statistic": "median",
        },
        "results": results,
        "summary": {
            f"compact_time_ratio_{high}_over_{low}": round(
                by_n[high]["spark"]["compact_s"] / by_n[low]["spark"]["compact_s"], 2
            ),
            f"total_time_ratio_{high}_over_{low}": round(
                by_n[high]["spark"]["total_s"] / by_n[low]["spark"]["total_s"], 2
            ),
            "size_ratio": round(high / low, 2),
            "spark_over_duckdb": {str(r["records"]): r["spark_over_duckdb"] for r in results},
            "spark_over_duckdb_cpu": {str(r["records"]): r["spark_over_duckdb_cpu"] for r in results},
            "spark_compact_records_per_s": {
                str(r["records"]): r["spark"]["compact_records_per_s"] for r in results
            },
            "all_checks_passed": all(r["check"]["passed"] for r in results),
        },
    }


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bench.pipeline [--sizes N ...] [--repeats K] [--output PATH]``."""
    parser = argparse.ArgumentParser(
        prog="bench.pipeline", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=[1_000_000, 4_000_000, 16_000_000],
        help="distinct records per run",
    )
    parser.add_argument("--repeats", type=int, default=3, help="runs per size; medians are reported")
    parser.add_argument("--duplicate-rate", type=float, default=0.02, help="redelivered copies per record")
    parser.add_argument("--output", type=Path, default=Path("reports/bench/pipeline.json"))
    parser.add_argument(
        "--workdir", type=Path, default=None, help="scratch space (default: a temp dir, removed)"
    )
    ns = parser.parse_args(argv)
    workdir = ns.workdir or Path(tempfile.mkdtemp(prefix="bench-pipeline-"))
    try:
        report = run_benchmark(ns.sizes, ns.repeats, ns.duplicate_rate, workdir)
    finally:
        if ns.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    ns.output.parent.mkdir(parents=True, exist_ok=True)
    ns.output.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report["summary"], indent=2))
    print(f"written to {ns.output}")
    return 0 if report["summary"]["all_checks_passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
