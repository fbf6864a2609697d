"""Compaction job: raw JSON lines of a date/hour range -> deduplicated curated Parquet (+ quarantine).

    spark-submit --py-files spark_jobs.zip compact.py \\
        --input s3://bucket/raw --output s3://bucket/curated --quarantine s3://bucket/quarantine \\
        --start 2026-11-21T00 --end 2026-11-21T23 [--event-id-field event_id] \\
        [--payload-columns "amount DECIMAL(38,18), sku STRING"] [--only-stale]

Each hour partition of the output is a function of that hour's raw objects only, and is replaced as a whole:
re-running an hour picks up late objects and gives the same row set, and partitions outside the range are
never touched. Hours with no valid line are left as they are. Malformed lines never fail the job: they are
counted (logged and returned) and written with their reason to the quarantine path, partitioned the same way;
an object that cannot be read (a truncated or corrupt gzip) is quarantined whole and named in the summary,
and the rest of the range is compacted. Both outputs are staged and committed together at the end, so a run
that fails changes nothing. With ``--only-stale`` an hour whose output is newer than all of its raw objects is
skipped (:mod:`spark_jobs.freshness`): the schedule re-runs the last few hours that way to pick up late objects.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, DataFrameReader, Observation, SparkSession
from pyspark.sql import functions as F

from spark_jobs import freshness, storage
from spark_jobs.args import OneLineParser, check_roots
from spark_jobs.hours import hour_range, partition_dirs
from spark_jobs.schemas import REASONS
from spark_jobs.transforms import (
    CURATED_COLUMNS,
    deduplicate,
    event_id_path,
    parse_raw_lines,
    payload_struct,
    quarantined,
    quarantined_objects,
    valid_records,
    with_event_id,
    with_payload_columns,
)

__all__ = ["CompactOptions", "main", "parse_args", "raw_patterns", "read_raw", "run"]

log = logging.getLogger(__name__)

# Curated columns whose values are (nearly) all distinct: a Parquet dictionary for them is built and dropped.
_NO_DICTIONARY = {
    f"parquet.enable.dictionary#{column}": "false"
    for column in ("sequence_number", "arrival_time", "payload", "payload_base64", "event_id")
}


@dataclass(frozen=True)
class CompactOptions:
    """The job's arguments: URIs (``file://``, plain paths or ``s3://``) and an inclusive UTC hour range."""

    input: str
    output: str
    quarantine: str
    start: str
    end: str
    event_id_field: str | None = None
    payload_columns: str | None = None
    #: Skip each hour whose curated (or quarantine) partition is newer than all of its raw objects.
    only_stale: bool = False


def parse_args(argv: Sequence[str] | None = None) -> CompactOptions:
    """Parse and validate command-line arguments (the range and the event-id field fail fast)."""
    parser = OneLineParser(prog="compact", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--input", required=True, help="raw root (holds stream=*/date=*/hour=*/)")
    parser.add_argument("--output", required=True, help="curated table root")
    parser.add_argument("--quarantine", required=True, help="where malformed lines go, with their reason")
    parser.add_argument("--start", required=True, help="first hour, YYYY-MM-DDTHH (UTC)")
    parser.add_argument("--end", required=True, help="last hour, inclusive, YYYY-MM-DDTHH (UTC)")
    parser.add_argument("--event-id-field", default=None, help="payload field that also identifies a record")
    parser.add_argument(
        "--payload-columns",
        default=None,
        help="typed columns parsed from the payload text, e.g. 'amount DECIMAL(38,18), sku STRING'",
    )
    parser.add_argument(
        "--only-stale",
        action="store_true",
        help="rewrite only the hours whose output is older than one of their raw objects, or absent",
    )
    ns = parser.parse_args(argv)
    options = CompactOptions(
        ns.input,
        ns.output,
        ns.quarantine,
        ns.start,
        ns.end,
        ns.event_id_field,
        ns.payload_columns,
        ns.only_stale,
    )
    try:
        check_roots(
            {"--input": options.input, "--output": options.output, "--quarantine": options.quarantine}
        )
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


def read_raw(
    spark: SparkSession, root: str, patterns: list[str], only: Sequence[str] = (), skip: Sequence[str] = ()
) -> DataFrame:
    """Raw lines with their object (``value``, ``source_object``, ``path_stream``, ``date``, ``hour``).

    gzip is decoded by extension; lines end at ``\\n`` only (a CR is part of its line). ``path_stream``,
    ``date`` and ``hour`` are the object's ``stream=``/``date=``/``hour=`` directories (read as partition
    values under ``root``: once per object, not per line). ``only``/``skip`` select objects by
    ``source_object``, the URI in ``_metadata.file_path`` (URL-encoded); Spark prunes the other objects before
    reading them.
    """
    # Read the hour directories with a file-name filter rather than the file globs themselves: Spark lists
    # the files of a few directories on the driver, but runs a listing job with a task per path (per object,
    # for file globs) once there are more than 32 paths, which costs more than the read at a few thousand.
    folders = sorted({pattern.rsplit("/", 1)[0] for pattern in patterns})
    names = {pattern.rsplit("/", 1)[1] for pattern in patterns}
    if len(names) != 1:
        raise ValueError(f"raw patterns must share one file-name glob, got {sorted(names)}")
    name = names.pop()
    if len(folders) == 1:
        # Given one path, Spark looks for a streaming sink's log (_spark_metadata) in it, and when that path is
        # a glob it logs a WARN with a Java stack trace, "FileNotFoundException: File .../stream=*/... does not
        # exist", on every one-hour run: give it the hour's stream folders themselves.
        folders = storage.glob(spark, folders[0]) or folders

    def reader() -> DataFrameReader:
        schema = "value string, stream string, date string, hour string"
        return spark.read.schema(schema).option("basePath", root).option("lineSep", "\n")

    try:
        lines = reader().option("pathGlobFilter", name).text(folders)
    except Exception as exc:  # AnalysisException: a sub-folder named like a partition (hour=01/k=v/)
        if "CONFLICTING_PARTITION_COLUMN_NAMES" not in str(exc):
            raise
        # Such a folder holds no raw object, but its name confuses the folders' listing: list the objects.
        lines = reader().text(patterns)
    path = F.col("_metadata.file_path")
    # A folder is listed with its sub-folders; objects are the files right in an hour folder (as the globs
    # say). Spark prunes files with this condition and also checks it per line: string functions, no regex.
    lines = lines.where(F.substring_index(path, "/", -2).startswith("hour="))
    if only:
        lines = lines.where(path.isin(list(only)))
    if skip:
        lines = lines.where(~path.isin(list(skip)))
    return lines.select(
        "value", path.alias("source_object"), F.col("stream").alias("path_stream"), "date", "hour"
    )


def _hours(patterns: list[str]) -> list[tuple[str, str]]:
    """(date, hour) of each hour pattern (its last ``/date=`` and ``/hour=``: the root may hold such names)."""
    return [(p.rsplit("/date=", 1)[1][:10], p.rsplit("/hour=", 1)[1][:2]) for p in patterns]


def _stale(
    spark: SparkSession, options: CompactOptions, files: storage.HourFiles, counts: dict[str, Any]
) -> list[str]:
    """The patterns of ``files`` whose hour is stale; records ``rewritten`` and ``skipped_fresh`` in ``counts``."""
    stale, rewritten, skipped = [], [], []
    for pattern, (date, hour) in zip(files.patterns, _hours(files.patterns), strict=True):
        outputs = [
            freshness.partition(spark, root, date, hour) for root in (options.output, options.quarantine)
        ]
        if freshness.compaction_is_fresh(files.newest[pattern], outputs):
            skipped.append(freshness.hour_label(date, hour))
        else:
            stale.append(pattern)
            rewritten.append(freshness.hour_label(date, hour))
    counts["rewritten"], counts["skipped_fresh"] = rewritten, skipped
    if skipped:
        log.info("skipping %d hours whose output is newer than their raw objects: %s", len(skipped), skipped)
    return stale


def _is_read_failure(exc: BaseException) -> bool:
    return "FAILED_READ_FILE" in str(exc)


def run(spark: SparkSession, options: CompactOptions) -> dict[str, Any]:
    """Compact the range; returns counts (lines, valid, curated, duplicates, malformed, one per quarantine
    reason), ``corrupt_objects``: the URIs of the objects that could not be read, and ``ignored_files``: the
    files in the range's hour folders that are not raw objects (``*.jsonl.gz``), which are not read. With
    ``only_stale`` also ``rewritten`` and ``skipped_fresh``: the hours (``YYYY-MM-DDTHH``) with raw objects that
    were compacted, and the ones skipped because their output is newer than all of their raw objects."""
    storage.configure(spark)
    listed_at = freshness.clock(spark, options.output)  # before the listing: the markers' time
    files = storage.hour_files(spark, raw_patterns(options.input, options.start, options.end))
    patterns = files.patterns
    counts: dict[str, Any] = {
        "lines": 0,
        "valid": 0,
        "curated": 0,
        "duplicates": 0,
        "malformed": 0,
        **dict.fromkeys(REASONS, 0),
        "corrupt_objects": [],
        "ignored_files": files.ignored,
    }
    if options.only_stale:
        patterns = _stale(spark, options, files, counts)
    if counts["ignored_files"]:
        log.warning(
            "%d files in the hour folders are not raw objects (*.jsonl.gz) and are not read: %s",
            len(counts["ignored_files"]),
            " ".join(counts["ignored_files"][:10]) + (" ..." if len(counts["ignored_files"]) > 10 else ""),
        )
    if not patterns:
        if not counts.get("skipped_fresh"):
            log.warning(
                "no raw objects in %s for %s..%s; nothing to do", options.input, options.start, options.end
            )
        return counts
    stale_hours = set(_hours(patterns))
    # read as empty by Hadoop, yet no gzip data
    empty = {uri: why for uri, why in files.empty.items() if _hours([uri])[0] in stale_hours}
    unreadable, checked = dict(empty), False
    while True:
        staging = storage.Staging(spark, [options.output, options.quarantine])
        try:
            _compact(spark, options, patterns, unreadable, staging, counts)
            break
        except Exception as exc:
            staging.abort()
            if checked or not _is_read_failure(exc):
                raise
            # Some object could not be read: find every such object, then compact the rest without them.
            unreadable, checked = {**empty, **storage.unreadable_objects(spark, patterns)}, True
            if len(unreadable) == len(empty):
                raise
            log.warning("%d raw objects cannot be read; compacting without them", len(unreadable))
    try:
        committed = staging.commit({options.quarantine: _hours(patterns)})  # both roots, or neither
    except Exception:
        staging.abort()
        raise
    for root, partitions in committed.items():
        freshness.mark(spark, root, partitions, listed_at)
    counts["corrupt_objects"] = sorted(unreadable)
    if counts["malformed"] or unreadable:
        log.warning(
            "quarantined %d lines and %d objects to %s",
            counts["malformed"],
            len(unreadable),
            options.quarantine,
        )
    log.info("compacted %s..%s: %s", options.start, options.end, json.dumps(counts, sort_keys=True))
    return counts


def _compact(
    spark: SparkSession,
    options: CompactOptions,
    patterns: list[str],
    unreadable: dict[str, str],
    staging: storage.Staging,
    counts: dict[str, Any],
) -> None:
    """Write the curated rows and the quarantine of the range to ``staging`` and fill in ``counts``."""
    parsed = read_raw(spark, options.input, patterns, skip=sorted(unreadable)).transform(parse_raw_lines)
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
        .transform(with_payload_columns(options.payload_columns))
        .observe(kept, F.count(F.lit(1)).alias("curated"))
    )
    storage.write_partitioned(curated, staging.path(options.output), "parquet", **_NO_DICTIONARY)
    metrics = seen.get
    bad_objects = sorted(metrics.pop("bad_objects"))
    counts.update({k: int(v) for k, v in metrics.items()})
    counts["curated"] = int(kept.get["curated"])
    counts["duplicates"] = counts["valid"] - counts["curated"]
    counts["malformed"] = counts["lines"] - counts["valid"]
    quarantine = []
    if bad_objects:
        # A second, small pass: only the objects that hold a malformed line are read again.
        quarantine.append(
            read_raw(spark, options.input, patterns, only=bad_objects)
            .transform(parse_raw_lines)
            .transform(quarantined)
        )
    if unreadable:
        objects = spark.createDataFrame(sorted(unreadable.items()), "source_object string, detail string")
        quarantine.append(objects.transform(quarantined_objects))
    if quarantine:
        rows = quarantine[0] if len(quarantine) == 1 else quarantine[0].unionByName(quarantine[1])
        storage.write_partitioned(
            rows.coalesce(1), staging.path(options.quarantine), "json", compression="gzip"
        )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point for spark-submit and ``python -m spark_jobs.compact``; prints the counts as JSON."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    options = parse_args(argv)
    spark = storage.get_session("compact")
    try:  # what needs Spark to check, before anything is read: one line and exit 2, as for the other arguments
        storage.check_root(spark, "--input", options.input)
        storage.check_root(spark, "--output", options.output)
        storage.check_root(spark, "--quarantine", options.quarantine)
        if options.payload_columns is not None:
            payload_struct(options.payload_columns, CURATED_COLUMNS)
    except ValueError as err:
        print(f"compact: error: {err}", file=sys.stderr)
        return 2
    counts = run(spark, options)
    print(json.dumps({"job": "compact", **counts}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
