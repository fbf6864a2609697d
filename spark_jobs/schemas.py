"""Column names, schemas and quarantine reasons shared by the transforms and the jobs, and the check that a
DataFrame has the columns a transform needs."""

from __future__ import annotations

from collections.abc import Iterable

from pyspark.sql import DataFrame
from pyspark.sql import types as T

__all__ = [
    "CURATED_SCHEMA",
    "HOUR_METRICS_SCHEMA",
    "MINUTE_METRICS_SCHEMA",
    "QUARANTINE_SCHEMA",
    "RAW_FORMAT",
    "RAW_LINE_SCHEMA",
    "RAW_RECORD_SCHEMA",
    "REASONS",
    "REASON_DETAILS",
    "MissingColumnsError",
    "Reason",
    "require_columns",
]

#: What the jobs read from a raw object: one row per line, and the object's URI.
RAW_LINE_SCHEMA = T.StructType(
    [
        T.StructField("value", T.StringType(), True),
        T.StructField("source_object", T.StringType(), False),
    ]
)

#: The JSON object on one raw line, format 2 (``v``, ``data``/``data_base64``) and format 1 (no ``v``,
#: ``payload``/``payload_base64``). Format 1's ``payload`` is a VARIANT so that any JSON value survives;
#: ``_corrupt`` receives the line when it does not parse or an integer field holds something else. The format-2
#: fields come first, in the order the sink writes them: a line the sink wrote is ``to_json`` of its parse.
RAW_RECORD_SCHEMA = T.StructType(
    [
        T.StructField("v", T.LongType(), True),
        T.StructField("stream", T.StringType(), True),
        T.StructField("shard_id", T.StringType(), True),
        T.StructField("sequence_number", T.StringType(), True),
        T.StructField("sub_sequence_number", T.LongType(), True),
        T.StructField("partition_key", T.StringType(), True),
        T.StructField("arrival_time", T.StringType(), True),
        T.StructField("epoch", T.LongType(), True),
        T.StructField("data", T.StringType(), True),
        T.StructField("data_base64", T.StringType(), True),
        T.StructField("payload", T.VariantType(), True),
        T.StructField("payload_base64", T.StringType(), True),
        T.StructField("_corrupt", T.StringType(), True),
    ]
)

#: The raw line format the sink writes (``"v": 2``); lines without ``v`` are format 1 and still read.
RAW_FORMAT = 2

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

#: Lines (or whole objects, ``line`` null) that could not be curated, with why; partitioned like the curated table.
QUARANTINE_SCHEMA = T.StructType(
    [
        T.StructField("source_object", T.StringType(), False),
        T.StructField("line", T.StringType(), True),
        T.StructField("line_base64", T.StringType(), True),
        T.StructField("reason", T.StringType(), False),
        T.StructField("detail", T.StringType(), True),
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
    """Why a raw line went to quarantine (the first rule a line breaks, in this order), or its whole object."""

    UNPARSEABLE = "unparseable"  # not one strict JSON object (UTF-8, RFC 8259, unique keys, nothing after it)
    WRONG_TYPE = "wrong_type"  # a field of the wrong JSON type (e.g. a partition_key that is an object)
    UNSUPPORTED_VERSION = "unsupported_version"  # a format version ("v") this job does not know
    MISSING_FIELD = "missing_field"  # a required field is absent or null
    BAD_SEQUENCE_NUMBER = "bad_sequence_number"  # not 1 to 56 decimal digits
    BAD_SUB_SEQUENCE_NUMBER = "bad_sub_sequence_number"  # negative
    BAD_EPOCH = "bad_epoch"  # negative
    BAD_ARRIVAL_TIME = "bad_arrival_time"  # not an ISO-8601 timestamp with a zone
    BAD_PAYLOAD = "bad_payload"  # not exactly one of data / data_base64, invalid base64, data not JSON text
    WRONG_PARTITION = "wrong_partition"  # stream or arrival hour differs from the object's path
    CORRUPT_OBJECT = "corrupt_object"  # the object cannot be read (truncated or corrupt gzip): all of it


#: Every line reason, in the order the rules are checked.
REASONS: tuple[str, ...] = (
    Reason.UNPARSEABLE,
    Reason.WRONG_TYPE,
    Reason.UNSUPPORTED_VERSION,
    Reason.MISSING_FIELD,
    Reason.BAD_SEQUENCE_NUMBER,
    Reason.BAD_SUB_SEQUENCE_NUMBER,
    Reason.BAD_EPOCH,
    Reason.BAD_ARRIVAL_TIME,
    Reason.BAD_PAYLOAD,
    Reason.WRONG_PARTITION,
)

#: A sentence per reason, written beside it in the quarantine (``missing_field`` and ``wrong_type`` name the
#: field instead, ``corrupt_object`` the read error).
REASON_DETAILS: dict[str, str] = {
    Reason.UNPARSEABLE: "not one strict JSON object (UTF-8, RFC 8259, unique keys, nothing after it)",
    Reason.WRONG_TYPE: "a field has the wrong JSON type",
    Reason.UNSUPPORTED_VERSION: "v is not a raw format version this job reads (1 or 2)",
    Reason.MISSING_FIELD: "a required field is absent or null",
    Reason.BAD_SEQUENCE_NUMBER: "sequence_number is not 1 to 56 decimal digits",
    Reason.BAD_SUB_SEQUENCE_NUMBER: "sub_sequence_number is negative",
    Reason.BAD_EPOCH: "epoch is negative",
    Reason.BAD_ARRIVAL_TIME: "arrival_time is not an ISO-8601 timestamp with a zone",
    Reason.BAD_PAYLOAD: (
        "not exactly one of data and data_base64 (payload and payload_base64 in format 1), "
        "base64 that is not strict base64, or data that is not one JSON text"
    ),
    Reason.WRONG_PARTITION: "stream or arrival hour differs from the object's stream=/date=/hour= path",
    Reason.CORRUPT_OBJECT: "the object could not be read",
}


class MissingColumnsError(ValueError):
    """A transform was given a DataFrame without the columns it needs."""

    def __init__(self, transform: str, missing: Iterable[str], present: Iterable[str]) -> None:
        self.missing = sorted(missing)
        self.present = list(present)
        super().__init__(
            f"{transform} needs columns {self.missing}, which are missing; present: {self.present}"
        )


def require_columns(df: DataFrame, transform: str, columns: Iterable[str]) -> None:
    """Raise :class:`MissingColumnsError` unless ``df`` has every one of ``columns``."""
    missing = set(columns) - set(df.columns)
    if missing:
        raise MissingColumnsError(transform, missing, df.columns)
