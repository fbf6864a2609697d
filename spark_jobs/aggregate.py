"""Aggregation job: curated records of a date/hour range -> per-minute and per-hour metrics tables.

    spark-submit --py-files spark_jobs.zip aggregate.py \\
        --input s3://bucket/curated --output s3://bucket/metrics --start 2026-11-21T00 --end 2026-11-21T23

Writes ``<output>/per_minute`` and ``<output>/per_hour`` as Parquet partitioned by date and hour; both are
staged and committed together, each hour replacing the old one whole, so re-running a range after a
re-compaction replaces exactly those hours and a run that fails changes nothing.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession

from spark_jobs import storage
from spark_jobs.args import OneLineParser, check_roots
from spark_jobs.hours import hour_range, partition_dirs
from spark_jobs.schemas import CURATED_SCHEMA
from spark_jobs.transforms import hour_metrics, minute_metrics

__all__ = ["AggregateOptions", "curated_patterns", "main", "parse_args", "read_curated", "run"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AggregateOptions:
    """The job's arguments: the curated root, the metrics root and an inclusive UTC hour range."""

    input: str
    output: str
    start: str
    end: str


def parse_args(argv: Sequence[str] | None = None) -> AggregateOptions:
    """Parse and validate command-line arguments."""
    parser = OneLineParser(prog="aggregate", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--input", required=True, help="curated table root (written by compact)")
    parser.add_argument("--output", required=True, help="metrics root: per_minute/ and per_hour/ go under it")
    parser.add_argument("--start", required=True, help="first hour, YYYY-MM-DDTHH (UTC)")
    parser.add_argument("--end", required=True, help="last hour, inclusive, YYYY-MM-DDTHH (UTC)")
    ns = parser.parse_args(argv)
    options = AggregateOptions(ns.input, ns.output, ns.start, ns.end)
    try:
        check_roots({"--input": options.input, "--output": options.output})
        hour_range(options.start, options.end)
    except ValueError as err:
        parser.error(str(err))
    return options


def curated_patterns(root: str, start: str, end: str) -> list[str]:
    """One directory per hour of the range: ``<root>/date=D/hour=H``."""
    return [storage.join(root, f"date={d}", f"hour={h}") for d, h in partition_dirs(hour_range(start, end))]


def read_curated(spark: SparkSession, root: str, paths: list[str]) -> DataFrame:
    """Curated rows of the given hour directories, with ``date``/``hour`` kept as strings."""
    return spark.read.schema(CURATED_SCHEMA).option("basePath", root).parquet(*paths)


def run(spark: SparkSession, options: AggregateOptions) -> dict[str, int]:
    """Build both metrics tables for the range; returns the number of hours read."""
    storage.configure(spark)
    paths = storage.existing(spark, curated_patterns(options.input, options.start, options.end))
    if not paths:
        log.warning("no curated partitions in %s for %s..%s", options.input, options.start, options.end)
        return {"hours": 0}
    curated = read_curated(spark, options.input, paths)
    tables = {"per_minute": minute_metrics(curated), "per_hour": hour_metrics(curated)}
    roots = {name: storage.join(options.output, name) for name in tables}
    staging = storage.Staging(spark, roots.values())
    try:
        for name, table in tables.items():
            storage.write_partitioned(table.coalesce(1), staging.path(roots[name]), "parquet")
    except Exception:
        staging.abort()
        raise
    try:
        staging.commit()  # both tables, or neither
    except Exception:
        staging.abort()
        raise
    return {"hours": len(paths)}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point for spark-submit and ``python -m spark_jobs.aggregate``; prints a JSON summary."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    options = parse_args(argv)
    spark = storage.get_session("aggregate")
    try:  # what needs Spark to check, before anything is read: one line and exit 2, as for the other arguments
        storage.check_root(spark, "--input", options.input)
        storage.check_root(spark, "--output", options.output)
    except ValueError as err:
        print(f"aggregate: error: {err}", file=sys.stderr)
        return 2
    summary = run(spark, options)
    print(json.dumps({"job": "aggregate", **summary}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
