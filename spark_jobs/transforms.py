"""Pure ``DataFrame -> DataFrame`` transforms of the raw-to-curated pipeline (no I/O, no Python UDFs).

The chain used by the compaction job::

    lines.transform(parse_raw_lines)            # one row per raw line, with ``reason`` (null when valid)
         .transform(with_event_id(field))       # optional producer event id from the payload
         .transform(valid_records)              # curated columns, valid lines only
         .transform(deduplicate)                # one deterministic copy per record (and per event id)

and ``parsed.transform(quarantined)`` for the lines that could not be curated. ``with_payload_columns``
derives typed columns from the curated payload text on request. ``minute_metrics`` and ``hour_metrics`` feed
the aggregation job. Every transform assumes the jobs' SQL settings (:data:`spark_jobs.storage.JOB_SQL_CONF`):
a UTC session (date and hour partitions are UTC) and no duplicate keys in ``parse_json``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from functools import reduce

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_jobs.jsontext import canonical_base64, one_json_text, within_bounds, wrapped
from spark_jobs.schemas import RAW_FORMAT, RAW_RECORD_SCHEMA, REASON_DETAILS, Reason

__all__ = [
    "CURATED_COLUMNS",
    "MissingColumnsError",
    "deduplicate",
    "event_id_path",
    "hour_metrics",
    "minute_metrics",
    "parse_raw_lines",
    "quarantined",
    "quarantined_objects",
    "sequence_order",
    "valid_records",
    "with_event_id",
    "with_payload_columns",
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
#: Fields and their JSON types (format 1's ``payload`` may be any JSON value).
_STRINGS = (
    "stream",
    "shard_id",
    "sequence_number",
    "partition_key",
    "arrival_time",
    "data",
    "data_base64",
    "payload_base64",
)
_INTEGERS = ("v", "sub_sequence_number", "epoch")
#: The typed fields in the order of the format's table: ``detail`` lists wrong ones in this order.
_TYPED = (
    "v",
    "stream",
    "shard_id",
    "sequence_number",
    "sub_sequence_number",
    "partition_key",
    "arrival_time",
    "epoch",
    "data",
    "data_base64",
    "payload_base64",
)
_SEQUENCE = r"^[0-9]{1,56}$"
_ISO_UTC = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?(Z|[+-][0-9]{2}:[0-9]{2})$"
_FIELD = re.compile(r"^[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]+)*$")
#: Strict parsing (RFC 8259): Spark's JSON reader accepts NaN/Infinity and single quotes unless told not to.
_JSON_OPTIONS = {
    "columnNameOfCorruptRecord": "_corrupt",
    "allowNonNumericNumbers": "false",
    "allowSingleQuotes": "false",
    "allowComments": "false",
    "allowUnquotedFieldNames": "false",
    "allowNumericLeadingZeros": "false",
    "allowUnquotedControlChars": "false",
    "allowBackslashEscapingAnyCharacter": "false",
}
#: The same, without a corrupt-record column (for reading fields out of a payload).
_STRICT_OPTIONS = {k: v for k, v in _JSON_OPTIONS.items() if k != "columnNameOfCorruptRecord"}


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


def _first(conditions: Iterable[tuple[Column, str]]) -> Column:
    """The value of the first condition that holds (null when none does)."""
    out: Column = F.lit(None).cast("string")
    for condition, value in reversed(list(conditions)):
        out = F.when(condition, F.lit(value)).otherwise(out)
    return out


def parse_raw_lines(lines: DataFrame) -> DataFrame:
    """Parse raw lines (``value``, ``source_object``) into typed fields plus a quarantine ``reason``.

    Output columns: ``source_object``, ``line``, ``path_stream``, ``date``, ``hour`` (the object's
    ``stream=/date=/hour=`` directories: taken from the input when it has these columns, as
    :func:`spark_jobs.compact.read_raw` gives them, else from ``source_object``), ``v`` (the format: 1 or
    2; null for a ``v`` member of any other value, ``1`` and ``null`` included), the record fields
    (``arrival_time`` as a timestamp), ``data``/``data_base64`` (format 2) or ``payload``/``payload_base64``
    (format 1),
    ``data_json`` (``[data]`` as a VARIANT, for :func:`with_event_id`), ``reason`` (a
    :class:`~spark_jobs.schemas.Reason`, null when the line is valid) and ``field`` (the field a
    ``missing_field`` or ``wrong_type`` reason is about).

    A line exactly as the sink writes it (its fields re-serialized give the line back) is checked by that
    comparison; any other line is parsed once more, strictly, to check its syntax and each field's JSON type.
    """
    _require(lines, "parse_raw_lines", ["value", "source_object"])
    path = F.col("source_object")
    parts = [(4, "stream", "path_stream"), (3, "date", "date"), (2, "hour", "hour")]
    given = {"path_stream", "date", "hour"} <= set(lines.columns)
    parsed = lines.select(
        path.alias("source_object"),
        F.col("value").alias("line"),
        *[F.col(column) if given else _path_part(path, up, name).alias(column) for up, name, column in parts],
        F.from_json(F.col("value"), RAW_RECORD_SCHEMA, _JSON_OPTIONS).alias("j"),
    )
    # The schema lists the format-2 fields in the sink's order, and to_json leaves out null fields.
    canonical = (F.col("j.v") == RAW_FORMAT) & (F.col("line") == F.to_json("j"))
    parsed = parsed.withColumn("_canonical", F.coalesce(canonical, F.lit(False)))
    an_object = F.col("line").rlike(r"^[ \t\r\n]*\{")
    parsed = parsed.withColumn("_strict", F.when(~F.col("_canonical"), wrapped(F.col("line")))).withColumn(
        "_syntax_ok",
        F.col("_canonical")
        | F.when(~F.col("_canonical"), one_json_text(F.col("line"), F.col("_strict")) & an_object),
    )

    # The JSON type of each field, for lines not in the sink's layout only. A lambda over the object's fields
    # (evaluated, not generated code) keeps the generated code small enough for the JVM to compile.
    def wrong(field: Column) -> Column:
        value = field.getField("value")
        not_string = F.try_variant_get(value, "$", "binary").isNull()  # only a JSON string casts to binary
        not_integer = ~F.schema_of_variant(value).isin("TINYINT", "SMALLINT", "INT", "BIGINT")
        name = field.getField("key")
        return ~F.is_variant_null(value) & (
            (name.isin(*_STRINGS) & not_string) | (name.isin(*_INTEGERS) & not_integer)
        )

    fields = F.map_entries(F.try_variant_get(F.col("_strict"), "$[0]", "map<string,variant>"))
    wrong_keys = F.transform(F.filter(fields, wrong), lambda f: f.getField("key"))
    # Every wrong field, in the order of the format's table (rare lines: the rest never get here).
    wrong_type = F.when(
        F.size(wrong_keys) > 0,
        F.array_join(F.array_intersect(F.array(*[F.lit(name) for name in _TYPED]), wrong_keys), ", "),
    )
    not_canonical = ~F.col("_canonical")

    def member(name: str) -> Column:
        """The line's member ``name`` as a VARIANT: SQL null when absent, a VARIANT null when ``null``."""
        return F.try_variant_get(F.col("_strict"), f"$[0].{name}", "variant")

    # The format: 2, or 1 for a line without a "v" member at all; null for any other "v" (1 and null included).
    version = (
        F.when(F.col("j.v") == RAW_FORMAT, F.lit(RAW_FORMAT))
        .when(F.col("_canonical") | member("v").isNotNull(), F.lit(None))
        .otherwise(F.lit(1))
    )
    # A payload member that is there but null (the sink never writes one): "data": null beside data_base64.
    null_payload = F.when(
        not_canonical,
        F.when(
            F.col("j.v").isNull(),
            F.is_variant_null(member("payload_base64")),
        ).otherwise(F.is_variant_null(member("data")) | F.is_variant_null(member("data_base64"))),
    )
    text = F.col("j.arrival_time")
    parsed = parsed.select(
        "source_object",
        "line",
        "path_stream",
        "date",
        "hour",
        # RFC 8259 text is UTF-8; the text reader does not check it (and a JSON parser would read a stray
        # byte as U+FFFD, changing the record's bytes), so a line that is not valid UTF-8 is unparseable.
        # A line in the sink's layout equals to_json's output, which is valid UTF-8: only others are checked.
        (
            F.col("j").isNull() | ~F.col("_syntax_ok") | (~F.col("_canonical") & ~F.is_valid_utf8("line"))
        ).alias("_unparseable"),
        F.when(F.col("_syntax_ok") & ~F.col("_canonical"), wrong_type).alias("_wrong_type"),
        F.col("j._corrupt").isNotNull().alias("_corrupt"),
        version.cast("long").alias("v"),
        F.coalesce(null_payload, F.lit(False)).alias("_null_payload"),
        *[F.col(f"j.{name}").alias(name) for name in _REQUIRED if name != "arrival_time"],
        text.alias("_arrival_text"),
        F.when(text.rlike(_ISO_UTC), F.try_to_timestamp(text)).alias("arrival_time"),
        F.col("j.data").alias("data"),
        F.col("j.data_base64").alias("data_base64"),
        F.col("j.payload").alias("payload"),
        F.col("j.payload_base64").alias("payload_base64"),
    )
    parsed = parsed.withColumn("data_json", F.when(F.col("data").isNotNull(), wrapped(F.col("data"))))
    data_ok = one_json_text(F.col("data"), F.col("data_json")) & within_bounds(F.col("data"))
    text_of = {name: "_arrival_text" if name == "arrival_time" else name for name in _REQUIRED}
    # every missing field, in the order of the format's table
    missing = F.concat_ws(", ", *[F.when(F.col(text_of[name]).isNull(), F.lit(name)) for name in _REQUIRED])
    any_missing = reduce(Column.__or__, [F.col(text_of[name]).isNull() for name in _REQUIRED])
    v2 = F.col("v") == RAW_FORMAT
    text_payload = F.when(v2, F.col("data")).otherwise(F.col("payload"))
    base64 = F.when(v2, F.col("data_base64")).otherwise(F.col("payload_base64"))
    bad_base64 = base64.isNotNull() & ~canonical_base64(base64)
    bad_data = (
        v2
        & F.col("data").isNotNull()
        & ~F.coalesce(F.when(F.col("data_json").isNotNull(), data_ok), F.lit(False))
    )
    arrival_text = F.col("_arrival_text")
    # "2026-11-21T05..." written in UTC ("...Z") is checked as text; other offsets are converted first.
    arrival_hour = F.when(
        arrival_text.endswith("Z"), F.substring(arrival_text, 1, 13) == F.concat_ws("T", "date", "hour")
    ).otherwise(F.date_format("arrival_time", "yyyy-MM-dd HH") == F.concat_ws(" ", "date", "hour"))
    reason = _first(
        [
            (F.col("_unparseable"), Reason.UNPARSEABLE),
            (F.col("_wrong_type").isNotNull() | F.col("_corrupt"), Reason.WRONG_TYPE),
            (F.col("v").isNull(), Reason.UNSUPPORTED_VERSION),
            (any_missing, Reason.MISSING_FIELD),
            (~F.col("sequence_number").rlike(_SEQUENCE), Reason.BAD_SEQUENCE_NUMBER),
            (F.col("sub_sequence_number") < 0, Reason.BAD_SUB_SEQUENCE_NUMBER),
            (F.col("epoch") < 0, Reason.BAD_EPOCH),
            (F.col("arrival_time").isNull(), Reason.BAD_ARRIVAL_TIME),
            ((text_payload.isNotNull() == base64.isNotNull()) | F.col("_null_payload"), Reason.BAD_PAYLOAD),
            (bad_base64 | bad_data, Reason.BAD_PAYLOAD),
            ((F.col("stream") != F.col("path_stream")) | ~arrival_hour, Reason.WRONG_PARTITION),
        ]
    )
    # the reason column, not its expression again: the rules are evaluated (and generated) once
    reason_column = F.col("reason")
    field = F.when(reason_column == Reason.MISSING_FIELD, missing).when(
        reason_column == Reason.WRONG_TYPE, F.col("_wrong_type")
    )
    return (
        parsed.withColumn("reason", reason)
        .withColumn("field", field)
        .drop("_unparseable", "_wrong_type", "_corrupt", "_arrival_text", "_null_payload")
    )


def event_id_path(field: str) -> str:
    """The VARIANT path of a payload field; dots separate nested names (``meta.id`` -> ``$['meta']['id']``)."""
    if not _FIELD.match(field):
        raise ValueError(f"event id field {field!r} must be names of [A-Za-z0-9_-] separated by dots")
    return "$" + "".join(f"['{part}']" for part in field.split("."))


def _strings_at(names: list[str]) -> T.StructType:
    """A JSON schema that reads the member at ``names`` (nested objects) as text."""
    schema = T.StructType([T.StructField(names[-1], T.StringType())])
    for name in reversed(names[:-1]):
        schema = T.StructType([T.StructField(name, schema)])
    return schema


def _member(struct: Column, names: list[str]) -> Column:
    return reduce(lambda column, name: column.getField(name), names, struct)


def with_event_id(field: str | None) -> Callable[[DataFrame], DataFrame]:
    """Add ``event_id``: the payload's ``field`` as text, compared exactly, never through a double.

    A JSON string gives its value; a JSON integer its exact digits, however many (``-0`` is ``0``). Anything
    else gives null, so that the row is deduplicated by its record key alone: no field, a binary payload, a
    number with a fraction or an exponent (Spark cannot give its exact text), an object, an array, a boolean,
    ``null``.
    """

    def transform(parsed: DataFrame) -> DataFrame:
        _require(parsed, "with_event_id", ["data_json", "payload", "line", "v"])
        if field is None:
            return parsed.withColumn("event_id", F.lit(None).cast("string"))
        path = event_id_path(field)
        names = field.split(".")
        value = F.coalesce(
            F.try_variant_get(F.col("data_json"), "$[0]" + path[1:], "variant"),
            F.try_variant_get(F.col("payload"), path, "variant"),
        )
        string = F.try_variant_get(value, "$", "binary").isNotNull()  # only a JSON string casts to binary
        kind = F.schema_of_variant(value)
        number = kind.isin("TINYINT", "SMALLINT", "INT", "BIGINT", "FLOAT", "DOUBLE") | kind.startswith(
            "DECIMAL"
        )
        # A VARIANT keeps 38 digits at most (then a double); Spark's JSON reader reads a number into a string
        # column as its digits when it is an integer (a BigInteger), as a double's text otherwise.
        digits = F.when(
            F.col("v") == RAW_FORMAT,
            _member(F.from_json(F.col("data"), _strings_at(names), _STRICT_OPTIONS), names),
        ).otherwise(
            _member(
                F.from_json(F.col("line"), _strings_at(["payload", *names]), _STRICT_OPTIONS),
                ["payload", *names],
            )
        )
        event_id = F.when(string, F.try_variant_get(value, "$", "string")).when(
            number, F.when(digits.rlike(r"^-?[0-9]+$"), digits)
        )
        return parsed.withColumn("event_id", event_id)

    return transform


def valid_records(parsed: DataFrame) -> DataFrame:
    """Valid lines only, as curated columns.

    ``payload`` is the record's exact text for format-2 lines (the ``data`` field as it is) and the payload
    as canonical JSON text for format-1 lines (whose sink had already re-serialized it); ``payload_base64``
    is ``data_base64`` or ``payload_base64``.
    """
    _require(parsed, "valid_records", ["reason", "data", "data_base64", *CURATED_COLUMNS])
    columns = {
        "payload": F.coalesce(F.col("data"), F.to_json("payload")).alias("payload"),
        "payload_base64": F.coalesce(F.col("data_base64"), F.col("payload_base64")).alias("payload_base64"),
    }
    return parsed.where(F.col("reason").isNull()).select(*[columns.get(c, F.col(c)) for c in CURATED_COLUMNS])


def with_payload_columns(schema: str | T.StructType | None) -> Callable[[DataFrame], DataFrame]:
    """Add typed columns parsed from each row's ``payload`` text (``"amount DECIMAL(38,18), sku STRING"``).

    They are derived from the exact text, never from a double: a DECIMAL column holds the written digits
    (null when they do not fit its precision and scale), an integer column null when the value is not an
    integer that fits. A number column (integer, DECIMAL, DOUBLE, ...) takes only JSON numbers: a JSON string
    (``"0.5"``, ``"NaN"``) gives null, as do binary payloads, absent fields and values of another JSON type.
    """

    def transform(curated: DataFrame) -> DataFrame:
        if schema is None:
            return curated
        _require(curated, "with_payload_columns", ["payload"])
        struct = T._parse_datatype_string(schema) if isinstance(schema, str) else schema
        if not isinstance(struct, T.StructType):
            raise ValueError(f"payload columns must be a list of 'name TYPE', got {schema!r}")
        clash = set(struct.fieldNames()) & set(curated.columns)
        if clash:
            raise ValueError(f"payload columns {sorted(clash)} clash with columns of the table")
        typed = F.from_json(F.col("payload"), struct, _STRICT_OPTIONS)
        columns = {name: typed.getField(name) for name in struct.fieldNames()}
        numeric = [f.name for f in struct.fields if isinstance(f.dataType, T.NumericType)]
        if not numeric:
            return curated.select("*", *[column.alias(name) for name, column in columns.items()])
        # Spark's JSON reader reads a DECIMAL from a JSON string ("0.5") and a DOUBLE from "NaN": a number
        # column takes JSON numbers only, so a string member (only strings cast to binary) gives null.
        members = F.col("_payload_members")
        for name in numeric:
            member = F.try_element_at(members, F.lit(name))
            string = F.try_variant_get(member, "$", "binary").isNotNull()
            columns[name] = F.when(~F.coalesce(string, F.lit(False)), columns[name])
        return curated.withColumn(
            "_payload_members",
            F.try_variant_get(F.try_parse_json(F.col("payload")), "$", "map<string,variant>"),
        ).select(*curated.columns, *[column.alias(name) for name, column in columns.items()])

    return transform


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
    """Lines that could not be curated: ``source_object``, ``line``, ``line_base64``, ``reason``, ``detail``,
    ``date``, ``hour``. ``line_base64`` holds the line's exact bytes when they are not valid UTF-8 (which
    ``line``, a JSON string in the quarantine, cannot hold); it is null otherwise."""
    _require(parsed, "quarantined", ["reason", "field", "source_object", "line", "date", "hour"])
    texts = F.create_map(*[F.lit(x) for pair in REASON_DETAILS.items() for x in pair])
    detail = (
        F.when(F.col("reason") == Reason.MISSING_FIELD, F.concat(F.lit("missing or null: "), F.col("field")))
        .when(
            F.col("reason") == Reason.WRONG_TYPE,
            F.concat(F.lit("wrong JSON type: "), F.coalesce(F.col("field"), F.lit("an integer field"))),
        )
        .otherwise(F.element_at(texts, F.col("reason")))
    )
    # Strict base64: Spark's base64() breaks its output into MIME lines of 76 characters (CR-LF between).
    line_base64 = F.when(
        ~F.is_valid_utf8("line"), F.translate(F.base64(F.col("line").cast("binary")), "\r\n", "")
    )
    return parsed.where(F.col("reason").isNotNull()).select(
        "source_object",
        "line",
        line_base64.alias("line_base64"),
        "reason",
        detail.alias("detail"),
        "date",
        "hour",
    )


def quarantined_objects(objects: DataFrame) -> DataFrame:
    """Objects that could not be read (``source_object``, ``detail``: the error), as quarantine rows."""
    _require(objects, "quarantined_objects", ["source_object", "detail"])
    path = F.col("source_object")
    return objects.select(
        path.alias("source_object"),
        F.lit(None).cast("string").alias("line"),
        F.lit(None).cast("string").alias("line_base64"),
        F.lit(Reason.CORRUPT_OBJECT).alias("reason"),
        F.concat(F.lit(REASON_DETAILS[Reason.CORRUPT_OBJECT] + ": "), F.col("detail")).alias("detail"),
        _path_part(path, 3, "date").alias("date"),
        _path_part(path, 2, "hour").alias("hour"),
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
