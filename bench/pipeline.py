"""The pipeline benchmark: Spark local[2] compaction + aggregation vs an independent DuckDB computation.

    python -m bench.pipeline                      # N = 1M, 4M, 16M; 3 runs each; ~25-40 min on 2 cores
    python -m bench.pipeline --sizes 100000 400000 --repeats 1   # a quick look

Spark (after two untimed runs that warm up the JIT) and the DuckDB reference alternate, so that outside load
falls on both; wall and CPU time, a row-for-row check. Medians; JSON in reports/bench/pipeline.json."""

from __future__ import annotations

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

from bench import REPORTS, write_report
from tools.cli import COUNT, Parser
from tools.pipeline_data import RawSpec, generate_raw
from tools.pipeline_duckdb import compare, duckdb_pipeline

__all__ = ["main", "process_cpu", "run_benchmark"]

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
_RANGE = ("2026-11-21T00", "2026-11-21T03")  # the 4 hours the records are spread over
_DUPLICATE_RATE = 0.02
_OUTPUT = REPORTS / "pipeline.json"
RATIOS = {"": "total_s", "_compact": "compact_s", "_cpu": "cpu_s"}  # Spark over DuckDB, by key suffix


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system, every thread) used so far by process ``pid``, not by its children."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _spark_run(spark: Any, raw: Path, out: Path) -> dict[str, Any]:
    from spark_jobs import aggregate, compact

    shutil.rmtree(out, ignore_errors=True)
    (start, end), uri = _RANGE, f"file://{out}"
    options = compact.CompactOptions(f"file://{raw}", f"{uri}/curated", f"{uri}/quarantine", start, end)
    jvm = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    c0, t0 = process_cpu(jvm), time.perf_counter()
    counts = compact.run(spark, options)
    t1 = time.perf_counter()
    aggregate.run(spark, aggregate.AggregateOptions(f"{uri}/curated", uri, start, end))
    c2, t2 = process_cpu(jvm), time.perf_counter()
    return {
        "compact_s": t1 - t0,
        "aggregate_s": t2 - t1,
        "total_s": t2 - t0,
        "cpu_s": c2 - c0,
        "counts": counts,
    }


def _duckdb_run(con: Any, raw: Path, out: Path) -> dict[str, Any]:
    shutil.rmtree(out, ignore_errors=True)
    c0 = time.process_time()
    return {**duckdb_pipeline(con, raw, out), "cpu_s": time.process_time() - c0}


def _medians(runs: list[dict[str, Any]], n: int) -> dict[str, Any]:
    """One side's medians (seconds), its records/s and every run's total."""
    m = {
        k: round(statistics.median(r[k] for r in runs), 2)
        for k in ("compact_s", "aggregate_s", "total_s", "cpu_s")
    }
    return {
        **m,
        "compact_records_per_s": round(n / m["compact_s"]),
        "total_records_per_s": round(n / m["total_s"]),
        "runs_total_s": [round(r["total_s"], 2) for r in runs],
    }


def _one_size(spark: Any, con: Any, workdir: Path, n: int, repeats: int) -> dict[str, Any]:
    raw = workdir / f"raw-{n}"
    t = time.perf_counter()
    generated = generate_raw(raw, RawSpec(records=n, hours=4, malformed=8, duplicate_rate=_DUPLICATE_RATE))
    generate_s = time.perf_counter() - t
    spark_runs, duck_runs = [], []
    for _ in range(repeats):  # alternate, so that outside load falls on both alike
        spark_runs.append(_spark_run(spark, raw, workdir / f"spark-{n}"))
        duck_runs.append(_duckdb_run(con, raw, workdir / f"duck-{n}"))
    shutil.rmtree(raw)
    check = compare(con, workdir / f"spark-{n}", workdir / f"duck-{n}")
    counts = spark_runs[-1]["counts"]
    want = {**dict.fromkeys(check, 0), "curated_rows_spark": n, "curated_rows_duckdb": n}  # no differences
    passed = check == want and counts["malformed"] == generated.malformed and not counts["corrupt_objects"]
    spark, duck = _medians(spark_runs, n), _medians(duck_runs, n)
    return {
        "records": n,
        "lines": generated.lines,
        "objects": generated.objects,
        "duplicates": counts["duplicates"],
        "malformed": counts["malformed"],
        "generate_s": round(generate_s, 2),
        "spark": spark,
        "duckdb": duck,
        **{f"spark_over_duckdb{s}": round(spark[k] / duck[k], 2) for s, k in RATIOS.items()},
        "check": {**check, "passed": passed},
    }


def run_benchmark(sizes: Sequence[int], repeats: int, workdir: Path) -> dict[str, Any]:
    """Run every size, returning the report."""
    import duckdb

    logging.getLogger("spark_jobs").setLevel(logging.ERROR)  # the counts are in the report
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.config(
        map={**SPARK_SETTINGS, "spark.local.dir": str(workdir / "spark-local")}
    ).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'; SET enable_progress_bar = false; SET threads = 2")
    load_before = os.getloadavg()
    warm = workdir / "warmup-raw"
    generate_raw(warm, RawSpec(records=300_000, hours=4, malformed=4, duplicate_rate=_DUPLICATE_RATE))
    for _ in range(2):
        _spark_run(spark, warm, workdir / "warmup-out")
    shutil.rmtree(warm)
    results = []
    for n in sorted(set(sizes)):
        results.append(_one_size(spark, con, workdir, n, repeats))
        print(json.dumps(results[-1]), flush=True)
    spark.stop()
    low, high = results[0], results[-1]
    summary: dict[str, Any] = {"size_ratio": round(high["records"] / low["records"], 2)}
    for k in ("compact", "total"):
        ratio = high["spark"][f"{k}_s"] / low["spark"][f"{k}_s"]
        summary[f"{k}_time_ratio_{high['records']}_over_{low['records']}"] = round(ratio, 2)
    for k in ("spark_over_duckdb", "spark_over_duckdb_cpu"):
        summary[k] = {str(r["records"]): r[k] for r in results}
    summary["spark_compact_records_per_s"] = {
        str(r["records"]): r["spark"]["compact_records_per_s"] for r in results
    }
    summary["all_checks_passed"] = all(r["check"]["passed"] for r in results)
    machine = {"cpus": os.cpu_count(), "python": platform.python_version(), "load_avg_before": load_before}
    machine["load_avg_after"] = os.getloadavg()
    settings = {"spark": SPARK_SETTINGS, "duckdb_threads": 2, "repeats": repeats}
    settings.update(duplicate_rate=_DUPLICATE_RATE, statistic="median")
    report = {"benchmark": "pipeline", "machine": machine, "settings": settings}
    return report | {"results": results, "summary": summary}


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bench.pipeline [--sizes N ...] [--repeats K]``."""
    parser = Parser(prog="python -m bench.pipeline", description="Spark vs DuckDB pipeline benchmark")
    parser.add_argument("--sizes", type=COUNT, nargs="+", default=[1_000_000, 4_000_000, 16_000_000])
    parser.add_argument("--repeats", type=COUNT, default=3, help="runs per size; medians are reported")
    ns = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-pipeline-") as workdir:
        report = run_benchmark(ns.sizes, ns.repeats, Path(workdir))
    write_report(_OUTPUT, report)
    print(json.dumps(report["summary"], indent=2))
    print(f"written to {_OUTPUT}")
    return 0 if report["summary"]["all_checks_passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
