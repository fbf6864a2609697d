"""Pure ``DataFrame -> DataFrame`` transforms of the raw-to-curated pipeline (no I/O, no Python UDFs).

The chain used by the compaction job::

    lines.transform(parse_raw_lines)            # one row per raw line, with ``reason`` (null when valid)
         .transform(with_event_id(field))       # optional producer event id from the payload
         .transform(valid_records)              # curated columns, valid lines only
         .transform(deduplicate)                # one deterministic copy per record (and per event id)

and ``parsed.transform(quarantined)`` for the lines that could not be curated. ``minute_metrics`` and
``hour_metrics`` feed the aggregation job. Every transform assumes ``spark.sql.session.timeZone=UTC``
(the jobs set it): date and hour partitions are UTC.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from spark_jobs.schemas import RAW_RECORD_SCHEMA, REASON_DETAILS, Reason

__all__ = [
    "CURATED_COLUMNS",
    "MissingColumnsError",
    "deduplicate",
    "event_id_path",
    "hour_metrics",
    "minute_metrics",
    "parse_raw_lines",
    "quarantined",
    "sequence_order",
    "valid_records",
    "with_event_id",
]

#: Columns of the curated table, in order (``date`` and ``hour`` are its partition columns).
CURATED_COLUMNS: tuple[str, ...] = (
    "stream",
    "shard_id",
    "sequence_number",
    "sub_sequence_number",
    "partition_key",
    "arrival_time",
    "epoch",
    "payload",
    "payload_base64",
    "event_id",
    "date",
    "hour",
)

_REQUIRED = (
    "stream",
    "shard_id",
    "sequence_number",
    "sub_sequence_number",
    "partition_key",
    "arrival_time",
    "epoch",
)
_SEQUENCE = r"^[0-9]{1,56}$"
_ISO_UTC = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?(Z|[+-][0-9]{2}:[0-9]{2})$"
_FIELD = re.compile(r"^[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]+)*$")


class MissingColumnsError(ValueError):
    """A transform was given a DataFrame without the columns it needs."""

    def __init__(self, transform: str, missing: Iterable[str], present: Iterable[str]) -> None:
        self.missing = sorted(missing)
        self.present = list(present)
        super().__init__(
            f"{transform} needs columns {self.missing}, which are missing; present: {self.present}"
        )


def _require(df: DataFrame, transform: str, columns: Iterable[str]) -> None:
    missing = set(columns) - set(df.columns)
    if missing:
        raise MissingColumnsError(transform, missing, df.columns)


def sequence_order(sequence_number: str | Column = "sequence_number") -> list[Column]:
    """Sort keys that order decimal sequence-number strings numerically: (length, value)."""
    col = F.col(sequence_number) if isinstance(sequence_number, str) else sequence_number
    return [F.length(col), col]


def _path_part(path: Column, from_end: int, name: str) -> Column:
    """The value of the ``name=`` directory ``from_end`` levels above the object (empty if it is not there)."""
    segment = F.substring_index(F.substring_index(path, "/", -from_end), "/", 1)
    return F.when(segment.startswith(f"{name}="), F.substring(segment, len(name) + 2, 1 << 20)).otherwise("")


def parse_raw_lines(lines: DataFrame) -> DataFrame:
    """Parse raw lines (``value``, ``source_object``) into typed fields plus a quarantine ``reason``.

    Output columns: ``source_object``, ``line``, ``path_stream``, ``date``, ``hour`` (from the object's
    ``stream=/date=/hour=`` path), the record fields (``arrival_time`` as a timestamp, ``payload`` as a
    VARIANT), ``reason`` (a :class:`~spark_jobs.schemas.Reason`, null when the line is valid) and
    ``missing`` (the first required field that is absent or null).
    """
    _require(lines, "parse_raw_lines", ["value", "source_object"])
    j = F.from_json(F.col("value"), RAW_RECORD_SCHEMA, {"columnNameOfCorruptRecord": "_corrupt"})
    path = F.col("source_object")
    parsed = lines.select(
        path.alias("source_object"),
        F.col("value").alias("line"),
        _path_part(path, 4, "stream").alias("path_stream"),
        _path_part(path, 3, "date").alias("date"),
        _path_part(path, 2, "hour").alias("hour"),
        j.alias("j"),
    )
    text = F.col("j.arrival_time")
    parsed = parsed.select(
        "source_object",
        "line",
        "path_stream",
        "date",
        "hour",
        (F.col("j").isNull() | F.col("j._corrupt").isNotNull()).alias("_unparseable"),
        *[F.col(f"j.{name}").alias(name) for name in _REQUIRED if name != "arrival_time"],
        text.alias("_arrival_text"),
        F.when(text.rlike(_ISO_UTC), F.try_to_timestamp(text)).alias("arrival_time"),
        F.col("j.payload").alias("payload"),
        F.col("j.payload_base64").alias("payload_base64"),
    )
    text_of = {name: "_arrival_text" if name == "arrival_time" else name for name in _REQUIRED}
    parsed = parsed.withColumn(
        "missing",
        F.when(
            ~F.col("_unparseable"),
            F.coalesce(*[F.when(F.col(text_of[name]).isNull(), F.lit(name)) for name in _REQUIRED]),
        ),
    )
    has_payload = F.col("payload").isNotNull()
    has_base64 = F.col("payload_base64").isNotNull()
    arrival_text = F.col("_arrival_text")
    # "2026-11-21T05..." written in UTC ("...Z") is checked as text; other offsets are converted first.
    arrival_hour = F.when(
        arrival_text.endswith("Z"), F.substring(arrival_text, 1, 13) == F.concat_ws("T", "date", "hour")
    ).otherwise(F.date_format("arrival_time", "yyyy-MM-dd HH") == F.concat_ws(" ", "date", "hour"))
    rules: list[tuple[Column, str]] = [
        (F.col("_unparseable"), Reason.UNPARSEABLE),
        (F.col("missing").isNotNull(), Reason.MISSING_FIELD),
        (~F.col("sequence_number").rlike(_SEQUENCE), Reason.BAD_SEQUENCE_NUMBER),
        (F.col("sub_sequence_number") < 0, Reason.BAD_SUB_SEQUENCE_NUMBER),
        (F.col("epoch") < 0, Reason.BAD_EPOCH),
        (F.col("arrival_time").isNull(), Reason.BAD_ARRIVAL_TIME),
        (has_payload == has_base64, Reason.BAD_PAYLOAD),
        (has_base64 & F.try_to_binary(F.col("payload_base64"), F.lit("base64")).isNull(), Reason.BAD_PAYLOAD),
        ((F.col("stream") != F.col("path_stream")) | ~arrival_hour, Reason.WRONG_PARTITION),
    ]
    reason: Column = F.lit(None).cast("string")
    for condition, code in reversed(rules):
        reason = F.when(condition, F.lit(code)).otherwise(reason)
    return parsed.withColumn("reason", reason).drop("_unparseable", "_arrival_text")


def event_id_path(field: str) -> str:
    """The VARIANT path of a payload field; dots separate nested names (``meta.id`` -> ``$['meta']['id']``)."""
    if not _FIELD.match(field):
        raise ValueError(f"event id field {field!r} must be names of [A-Za-z0-9_-] separated by dots")
    return "$" + "".join(f"['{part}']" for part in field.split("."))


def with_event_id(field: str | None) -> Callable[[DataFrame], DataFrame]:
    """Add ``event_id``: the payload's ``field`` as a string (null without a field, or for binary payloads)."""

    def transform(parsed: DataFrame) -> DataFrame:
        _require(parsed, "with_event_id", ["payload"])
        if field is None:
            return parsed.withColumn("event_id", F.lit(None).cast("string"))
        return parsed.withColumn(
            "event_id", F.try_variant_get(F.col("payload"), event_id_path(field), "string")
        )

    return transform


def valid_records(parsed: DataFrame) -> DataFrame:
    """Valid lines only, as curated columns (``payload`` as canonical JSON text: keys sorted, compact)."""
    _require(parsed, "valid_records", ["reason", *CURATED_COLUMNS])
    columns = [F.to_json("payload").alias("payload") if c == "payload" else F.col(c) for c in CURATED_COLUMNS]
    return parsed.where(F.col("reason").isNull()).select(*columns)


def deduplicate(records: DataFrame) -> DataFrame:
    """Keep one copy per record, and per ``event_id`` when it is set, within each (date, hour, stream).

    A record is (stream, shard_id, sequence_number, sub_sequence_number); when ``event_id`` is not null the
    key is (stream, event_id) instead, so producer retries collapse too. The kept copy is the first by
    (arrival_time, shard_id, sequence order, sub_sequence_number, epoch, partition_key, payload,
    payload_base64): the earliest event, then its lowest-epoch copy. Two copies that tie on all of these are
    identical rows, so the output does not depend on how the input was split into objects or tasks.

    The output comes sorted within each task by (date, hour, stream, shard_id, sequence order,
    sub_sequence_number) for record keys, which is also the order a partitioned write needs.
    """
    _require(records, "deduplicate", CURATED_COLUMNS)
    by_event = F.col("event_id").isNotNull()
    seq = F.col("sequence_number")
    key = Window.partitionBy(
        "date",
        "hour",
        "stream",
        by_event,
        F.coalesce(F.col("event_id"), F.col("shard_id")),
        # the length is implied by the sequence number; keying on it makes the sort (length, value)
        F.when(~by_event, F.length(seq)),
        F.when(~by_event, seq),
        F.when(~by_event, F.col("sub_sequence_number")),
    ).orderBy(
        "arrival_time",
        "shard_id",
        *sequence_order(),
        "sub_sequence_number",
        "epoch",
        "partition_key",
        "payload",
        "payload_base64",
    )
    return (
        records.withColumn("_copy", F.row_number().over(key))
        .where(F.col("_copy") == 1)
        .select(*CURATED_COLUMNS)
    )


def quarantined(parsed: DataFrame) -> DataFrame:
    """Lines that could not be curated: ``source_object``, ``line``, ``reason``, ``detail``, ``date``, ``hour``."""
    _require(parsed, "quarantined", ["reason", "missing", "source_object", "line", "date", "hour"])
    texts = F.create_map(*[F.lit(x) for pair in REASON_DETAILS.items() for x in pair])
    detail = F.when(
        F.col("reason") == Reason.MISSING_FIELD, F.concat(F.lit("missing or null: "), F.col("missing"))
    ).otherwise(F.element_at(texts, F.col("reason")))
    return parsed.where(F.col("reason").isNotNull()).select(
        "source_object", "line", "reason", detail.alias("detail"), "date", "hour"
    )


def _metrics(curated: DataFrame, bucket: Column, bucket_name: str) -> DataFrame:
    return (
        curated.groupBy("stream", "date", "hour", bucket.alias(bucket_name))
        .agg(
            F.count(F.lit(1)).alias("records"),
            F.count_distinct("shard_id").alias("shards"),
            F.count_distinct("partition_key").alias("partition_keys"),
            F.count_if(F.col("payload_base64").isNotNull()).alias("binary_records"),
            F.min("arrival_time").alias("first_arrival"),
            F.max("arrival_time").alias("last_arrival"),
        )
        .select(
            "stream",
            bucket_name,
            "records",
            "shards",
            "partition_keys",
            "binary_records",
            "first_arrival",
            "last_arrival",
            "date",
            "hour",
        )
    )


def minute_metrics(curated: DataFrame) -> DataFrame:
    """Per (stream, minute of arrival): records, distinct shards and partition keys, binary payloads, span."""
    _require(
        curated, "minute_metrics", ["stream", "shard_id", "partition_key", "arrival_time", "payload_base64"]
    )
    return _metrics(curated, F.date_trunc("minute", F.col("arrival_time")), "minute")


def hour_metrics(curated: DataFrame) -> DataFrame:
    """Per (stream, hour of arrival): the same metrics as :func:`minute_metrics`."""
    _require(
        curated, "hour_metrics", ["stream", "shard_id", "partition_key", "arrival_time", "payload_base64"]
    )
    return _metrics(curated, F.date_trunc("hour", F.col("arrival_time")), "hour_start")
