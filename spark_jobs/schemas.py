"""Column names, schemas and quarantine reasons shared by the transforms and the jobs."""

from __future__ import annotations

from pyspark.sql import types as T

__all__ = [
    "CURATED_SCHEMA",
    "HOUR_METRICS_SCHEMA",
    "MINUTE_METRICS_SCHEMA",
    "QUARANTINE_SCHEMA",
    "RAW_LINE_SCHEMA",
    "RAW_RECORD_SCHEMA",
    "REASONS",
    "REASON_DETAILS",
    "Reason",
]

#: What the jobs read from a raw object: one row per line, and the object's URI.
RAW_LINE_SCHEMA = T.StructType(
    [
        T.StructField("value", T.StringType(), True),
        T.StructField("source_object", T.StringType(), False),
    ]
)

#: The JSON object on one raw line. ``payload`` is a VARIANT so that any JSON value (including a JSON
#: string, ``null`` or a number) survives exactly; ``_corrupt`` receives the line when it does not parse.
RAW_RECORD_SCHEMA = T.StructType(
    [
        T.StructField("stream", T.StringType(), True),
        T.StructField("shard_id", T.StringType(), True),
        T.StructField("sequence_number", T.StringType(), True),
        T.StructField("sub_sequence_number", T.LongType(), True),
        T.StructField("partition_key", T.StringType(), True),
        T.StructField("arrival_time", T.StringType(), True),
        T.StructField("epoch", T.LongType(), True),
        T.StructField("payload", T.VariantType(), True),
        T.StructField("payload_base64", T.StringType(), True),
        T.StructField("_corrupt", T.StringType(), True),
    ]
)

#: The curated table: one row per distinct record, partitioned by ``date`` and ``hour`` (strings, as in the path).
CURATED_SCHEMA = T.StructType(
    [
        T.StructField("stream", T.StringType(), False),
        T.StructField("shard_id", T.StringType(), False),
        T.StructField("sequence_number", T.StringType(), False),
        T.StructField("sub_sequence_number", T.LongType(), False),
        T.StructField("partition_key", T.StringType(), False),
        T.StructField("arrival_time", T.TimestampType(), False),
        T.StructField("epoch", T.LongType(), False),
        T.StructField("payload", T.StringType(), True),
        T.StructField("payload_base64", T.StringType(), True),
        T.StructField("event_id", T.StringType(), True),
        T.StructField("date", T.StringType(), False),
        T.StructField("hour", T.StringType(), False),
    ]
)

#: Lines that could not be curated, with why; partitioned like the curated table.
QUARANTINE_SCHEMA = T.StructType(
    [
        T.StructField("source_object", T.StringType(), False),
        T.StructField("line", T.StringType(), True),
        T.StructField("reason", T.StringType(), False),
        T.StructField("date", T.StringType(), False),
        T.StructField("hour", T.StringType(), False),
    ]
)

_METRIC_FIELDS = [
    T.StructField("records", T.LongType(), False),
    T.StructField("shards", T.LongType(), False),
    T.StructField("partition_keys", T.LongType(), False),
    T.StructField("binary_records", T.LongType(), False),
    T.StructField("first_arrival", T.TimestampType(), True),
    T.StructField("last_arrival", T.TimestampType(), True),
]

#: Per-minute metrics, one row per (stream, minute).
MINUTE_METRICS_SCHEMA = T.StructType(
    [
        T.StructField("stream", T.StringType(), False),
        T.StructField("minute", T.TimestampType(), True),
        *_METRIC_FIELDS,
        T.StructField("date", T.StringType(), False),
        T.StructField("hour", T.StringType(), False),
    ]
)

#: Per-hour metrics, one row per (stream, hour).
HOUR_METRICS_SCHEMA = T.StructType(
    [
        T.StructField("stream", T.StringType(), False),
        T.StructField("hour_start", T.TimestampType(), True),
        *_METRIC_FIELDS,
        T.StructField("date", T.StringType(), False),
        T.StructField("hour", T.StringType(), False),
    ]
)


class Reason:
    """Why a raw line went to quarantine (the first rule a line breaks, in this order)."""

    UNPARSEABLE = "unparseable"  # not a JSON object, or a field of the wrong JSON type
    MISSING_FIELD = "missing_field"  # a required field is absent or null
    BAD_SEQUENCE_NUMBER = "bad_sequence_number"  # not 1 to 56 decimal digits
    BAD_SUB_SEQUENCE_NUMBER = "bad_sub_sequence_number"  # negative
    BAD_EPOCH = "bad_epoch"  # negative
    BAD_ARRIVAL_TIME = "bad_arrival_time"  # not an ISO-8601 UTC timestamp
    BAD_PAYLOAD = "bad_payload"  # not exactly one of payload / payload_base64, or invalid base64
    WRONG_PARTITION = "wrong_partition"  # stream or arrival hour differs from the object's path


#: Every reason, in the order the rules are checked.
REASONS: tuple[str, ...] = (
    Reason.UNPARSEABLE,
    Reason.MISSING_FIELD,
    Reason.BAD_SEQUENCE_NUMBER,
    Reason.BAD_SUB_SEQUENCE_NUMBER,
    Reason.BAD_EPOCH,
    Reason.BAD_ARRIVAL_TIME,
    Reason.BAD_PAYLOAD,
    Reason.WRONG_PARTITION,
)

#: A sentence per reason, written beside it in the quarantine.
REASON_DETAILS: dict[str, str] = {
    Reason.UNPARSEABLE: "not a JSON object with the documented field types",
    Reason.MISSING_FIELD: "a required field is absent or null",
    Reason.BAD_SEQUENCE_NUMBER: "sequence_number is not 1 to 56 decimal digits",
    Reason.BAD_SUB_SEQUENCE_NUMBER: "sub_sequence_number is negative",
    Reason.BAD_EPOCH: "epoch is negative",
    Reason.BAD_ARRIVAL_TIME: "arrival_time is not an ISO-8601 timestamp with a zone",
    Reason.BAD_PAYLOAD: "not exactly one of payload and payload_base64, or payload_base64 is not base64",
    Reason.WRONG_PARTITION: "stream or arrival hour differs from the object's stream=/date=/hour= path",
}
