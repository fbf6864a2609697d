"""Aggregation job: curated records of a date/hour range -> per-minute and per-hour metrics tables.

    spark-submit --py-files spark_jobs.zip aggregate.py \\
        --input s3://bucket/curated --output s3://bucket/metrics --start 2026-11-21T00 --end 2026-11-21T23 \\
        [--only-stale]

Writes ``<output>/per_minute`` and ``<output>/per_hour`` as Parquet partitioned by date and hour; both are
staged and committed together, each hour replacing the old one whole, so re-running a range after a
re-compaction replaces exactly those hours and a run that fails changes nothing. With ``--only-stale`` an hour
whose metrics partitions are newer than its curated partition is skipped (:mod:`spark_jobs.freshness`).
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from spark_jobs import freshness, storage
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
    #: Skip each hour whose metrics partitions are newer than its curated partition.
    only_stale: bool = False


def parse_args(argv: Sequence[str] | None = None) -> AggregateOptions:
    """Parse and validate command-line arguments."""
    parser = OneLineParser(prog="aggregate", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--input", required=True, help="curated table root (written by compact)")
    parser.add_argument("--output", required=True, help="metrics root: per_minute/ and per_hour/ go under it")
    parser.add_argument("--start", required=True, help="first hour, YYYY-MM-DDTHH (UTC)")
    parser.add_argument("--end", required=True, help="last hour, inclusive, YYYY-MM-DDTHH (UTC)")
    parser.add_argument(
        "--only-stale",
        action="store_true",
        help="rewrite only the hours whose metrics are older than their curated partition, or absent",
    )
    ns = parser.parse_args(argv)
    options = AggregateOptions(ns.input, ns.output, ns.start, ns.end, ns.only_stale)
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


def run(spark: SparkSession, options: AggregateOptions) -> dict[str, Any]:
    """Build both metrics tables for the range; returns the number of hours read (``hours``). With
    ``only_stale`` also ``rewritten`` and ``skipped_fresh``: the hours (``YYYY-MM-DDTHH``) with a curated
    partition that were aggregated, and the ones skipped because both metrics partitions are newer than it."""
    storage.configure(spark)
    roots = {name: storage.join(options.output, name) for name in ("per_minute", "per_hour")}
    listed_at = freshness.clock(spark, options.output)  # before the listing: the markers' time
    paths = storage.existing(spark, curated_patterns(options.input, options.start, options.end))
    summary: dict[str, Any] = {"hours": 0}
    if options.only_stale:
        paths = _stale(spark, options.input, roots, paths, summary)
    if not paths:
        if not summary.get("skipped_fresh"):
            log.warning("no curated partitions in %s for %s..%s", options.input, options.start, options.end)
        return summary
    curated = read_curated(spark, options.input, paths)
    tables = {"per_minute": minute_metrics(curated), "per_hour": hour_metrics(curated)}
    staging = storage.Staging(spark, roots.values())
    try:
        for name, table in tables.items():
            storage.write_partitioned(table.coalesce(1), staging.path(roots[name]), "parquet")
    except Exception:
        staging.abort()
        raise
    try:
        committed = staging.commit()  # both tables, or neither
    except Exception:
        staging.abort()
        raise
    for root, partitions in committed.items():
        freshness.mark(spark, root, partitions, listed_at)
    return {**summary, "hours": len(paths)}


def _hour(path: str) -> tuple[str, str]:
    """(date, hour) of a curated partition path ``.../date=D/hour=H``."""
    return path.rsplit("/date=", 1)[1][:10], path.rsplit("/hour=", 1)[1][:2]


def _stale(
    spark: SparkSession, curated_root: str, roots: dict[str, str], paths: list[str], summary: dict[str, Any]
) -> list[str]:
    """The curated partitions of ``paths`` whose metrics are stale; records ``rewritten`` and
    ``skipped_fresh`` in ``summary``."""
    stale, rewritten, skipped = [], [], []
    for path in paths:
        date, hour = _hour(path)
        curated = freshness.partition(spark, curated_root, date, hour)
        outputs = [freshness.partition(spark, root, date, hour) for root in roots.values()]
        if freshness.aggregation_is_fresh(curated, outputs):
            skipped.append(freshness.hour_label(date, hour))
        else:
            stale.append(path)
            rewritten.append(freshness.hour_label(date, hour))
    summary["rewritten"], summary["skipped_fresh"] = rewritten, skipped
    if skipped:
        log.info(
            "skipping %d hours whose metrics are newer than their curated rows: %s", len(skipped), skipped
        )
    return stale


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
