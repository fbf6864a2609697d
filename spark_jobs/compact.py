"""Compaction job: raw JSON lines of a date/hour range -> deduplicated curated Parquet (+ quarantine).

    spark-submit --py-files spark_jobs.zip compact.py \\
        --input s3://bucket/raw --output s3://bucket/curated --quarantine s3://bucket/quarantine \\
        --start 2026-11-21T00 --end 2026-11-21T23 [--event-id-field event_id]

Each hour partition of the output is a function of that hour's raw objects only, and is replaced as a whole
(dynamic partition overwrite): re-running an hour picks up late objects and gives the same row set, and
partitions outside the range are never touched. Hours with no valid line are left as they are.
Malformed lines never fail the job: they are counted (logged and returned) and written with their reason to
the quarantine path, partitioned the same way.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from spark_jobs import storage
from spark_jobs.hours import hour_range, partition_dirs
from spark_jobs.schemas import REASONS
from spark_jobs.transforms import (
    deduplicate,
    event_id_path,
    parse_raw_lines,
    quarantined,
    valid_records,
    with_event_id,
)

__all__ = ["CompactOptions", "main", "parse_args", "raw_patterns", "read_raw", "run"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CompactOptions:
    """The job's arguments: URIs (``file://``, plain paths or ``s3://``) and an inclusive UTC hour range."""

    input: str
    output: str
    quarantine: str
    start: str
    end: str
    event_id_field: str | None = None


def parse_args(argv: Sequence[str] | None = None) -> CompactOptions:
    """Parse and validate command-line arguments (the range and the event-id field fail fast)."""
    parser = argparse.ArgumentParser(prog="compact", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--input", required=True, help="raw root (holds stream=*/date=*/hour=*/)")
    parser.add_argument("--output", required=True, help="curated table root")
    parser.add_argument("--quarantine", required=True, help="where malformed lines go, with their reason")
    parser.add_argument("--start", required=True, help="first hour, YYYY-MM-DDTHH (UTC)")
    parser.add_argument("--end", required=True, help="last hour, inclusive, YYYY-MM-DDTHH (UTC)")
    parser.add_argument("--event-id-field", default=None, help="payload field that also identifies a record")
    ns = parser.parse_args(argv)
    options = CompactOptions(ns.input, ns.output, ns.quarantine, ns.start, ns.end, ns.event_id_field)
    try:
        hour_range(options.start, options.end)
        if options.event_id_field is not None:
            event_id_path(options.event_id_field)
    except ValueError as err:
        parser.error(str(err))
    return options


def raw_patterns(root: str, start: str, end: str) -> list[str]:
    """One glob per hour of the range: ``<root>/stream=*/date=D/hour=H/*.jsonl.gz``."""
    return [
        storage.join(root, "stream=*", f"date={date}", f"hour={hour}", "*.jsonl.gz")
        for date, hour in partition_dirs(hour_range(start, end))
    ]


def read_raw(spark: SparkSession, patterns: list[str]) -> DataFrame:
    """Raw lines with the URI of their object (``value``, ``source_object``); gzip is decoded by extension."""
    return spark.read.text(patterns).select("value", F.col("_metadata.file_path").alias("source_object"))


def run(spark: SparkSession, options: CompactOptions) -> dict[str, int]:
    """Compact the range; returns counts: lines, valid, curated, duplicates and one entry per quarantine reason."""
    storage.configure(spark)
    patterns = storage.existing(spark, raw_patterns(options.input, options.start, options.end))
    counts = {
        "lines": 0,
        "valid": 0,
        "curated": 0,
        "duplicates": 0,
        "malformed": 0,
        **dict.fromkeys(REASONS, 0),
    }
    if not patterns:
        log.warning(
            "no raw objects in %s for %s..%s; nothing to do", options.input, options.start, options.end
        )
        return counts
    parsed = read_raw(spark, patterns).transform(parse_raw_lines)
    seen = Observation("raw_lines")
    kept = Observation("curated_rows")
    observed = parsed.observe(
        seen,
        F.count(F.lit(1)).alias("lines"),
        F.count_if(F.col("reason").isNull()).alias("valid"),
        *[F.count_if(F.col("reason") == reason).alias(reason) for reason in REASONS],
        F.collect_set(F.when(F.col("reason").isNotNull(), F.col("source_object"))).alias("bad_objects"),
    )
    curated = (
        observed.transform(with_event_id(options.event_id_field))
        .transform(valid_records)
        .transform(deduplicate)
        .observe(kept, F.count(F.lit(1)).alias("curated"))
    )
    storage.write_partitioned(curated, options.output, "parquet")
    metrics = seen.get
    bad_objects = sorted(metrics.pop("bad_objects"))
    counts.update({k: int(v) for k, v in metrics.items()})
    counts["curated"] = int(kept.get["curated"])
    counts["duplicates"] = counts["valid"] - counts["curated"]
    counts["malformed"] = counts["lines"] - counts["valid"]
    if counts["malformed"] > 0:
        # A second, small pass: only the objects that hold a malformed line are read again.
        bad = read_raw(spark, bad_objects).transform(parse_raw_lines).transform(quarantined)
        storage.write_partitioned(bad.coalesce(1), options.quarantine, "json", compression="gzip")
        log.warning(
            "quarantined %d malformed lines to %s: %s", counts["malformed"], options.quarantine, counts
        )
    log.info("compacted %s..%s: %s", options.start, options.end, json.dumps(counts, sort_keys=True))
    return counts


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point for spark-submit and ``python -m spark_jobs.compact``; prints the counts as JSON."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    options = parse_args(argv)
    spark = storage.get_session("compact")
    counts = run(spark, options)
    print(json.dumps({"job": "compact", **counts}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
