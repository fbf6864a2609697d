"""Pure ``DataFrame -> DataFrame`` transforms of the raw-to-curated pipeline (no I/O, no Python UDFs).

The chain used by the compaction job (:func:`parse_raw_lines` lives in :mod:`spark_jobs.rawlines` and is
re-exported here)::

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
from collections import Counter
from collections.abc import Callable, Iterable
from functools import reduce

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_jobs.jsontext import STRICT_OPTIONS
from spark_jobs.rawlines import parse_raw_lines, partition_value
from spark_jobs.schemas import RAW_FORMAT, REASON_DETAILS, MissingColumnsError, Reason, require_columns

__all__ = [
    "CURATED_COLUMNS",
    "MissingColumnsError",
    "deduplicate",
    "event_id_path",
    "hour_metrics",
    "minute_metrics",
    "parse_raw_lines",
    "payload_struct",
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

_FIELD = re.compile(r"^[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]+)*$")


def sequence_order(sequence_number: str | Column = "sequence_number") -> list[Column]:
    """Sort keys that order decimal sequence-number strings numerically: (length, value)."""
    col = F.col(sequence_number) if isinstance(sequence_number, str) else sequence_number
    return [F.length(col), col]


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
        require_columns(parsed, "with_event_id", ["data_json", "payload", "line", "v"])
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
            _member(F.from_json(F.col("data"), _strings_at(names), STRICT_OPTIONS), names),
        ).otherwise(
            _member(
                F.from_json(F.col("line"), _strings_at(["payload", *names]), STRICT_OPTIONS),
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
    require_columns(parsed, "valid_records", ["reason", "data", "data_base64", *CURATED_COLUMNS])
    columns = {
        "payload": F.coalesce(F.col("data"), F.to_json("payload")).alias("payload"),
        "payload_base64": F.coalesce(F.col("data_base64"), F.col("payload_base64")).alias("payload_base64"),
    }
    return parsed.where(F.col("reason").isNull()).select(*[columns.get(c, F.col(c)) for c in CURATED_COLUMNS])


def payload_struct(schema: str | T.StructType, columns: Iterable[str]) -> T.StructType:
    """The typed payload columns of ``schema`` (``"amount DECIMAL(38,18), sku STRING"``) beside a table of
    ``columns``; ``ValueError`` in one line for a list Spark cannot read, a name the list holds twice or the
    table has already (Spark's names are case-blind: ``qty`` and ``QTY`` are one column)."""
    try:
        struct = T._parse_datatype_string(schema) if isinstance(schema, str) else schema
    except Exception as err:  # Spark's parser (ParseException, a DECIMAL above 38 digits ...): its first line
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise ValueError(f"payload columns {schema!r}: {first}") from None
    if not isinstance(struct, T.StructType):
        raise ValueError(f"payload columns must be a list of 'name TYPE', got {schema!r}")
    names = struct.fieldNames()
    times = Counter(name.lower() for name in names)
    repeated = [name for name in names if times[name.lower()] > 1]
    if repeated:
        raise ValueError(f"payload columns {repeated} name one column more than once (names are case-blind)")
    clash = {name for name in names if name.lower() in {c.lower() for c in columns}}
    if clash:
        raise ValueError(f"payload columns {sorted(clash)} clash with columns of the table")
    return struct


#: The VARIANT types of a JSON integer (``parse_json`` reads one of more than 18 digits as a DECIMAL).
_INTEGER_KINDS = ("TINYINT", "SMALLINT", "INT", "BIGINT")


def _exact_within_scale(member: Column, scale: int) -> Column:
    """Whether the VARIANT ``member`` is a JSON number whose exact value has at most ``scale`` fraction digits.

    ``parse_json`` keeps a number exactly, as an integer or as a DECIMAL of at most 38 digits with its
    trailing fraction zeros dropped (its text is plain: ``0.00000001``, ``1.5`` for ``1.50``), unless it is
    written with an exponent or more than 38 digits: then it holds a double, whose digits are not the written
    ones, and the answer is false, as it is for another JSON type or no member (never null).
    """
    kind = F.schema_of_variant(member)
    text = F.try_variant_get(member, "$", "string")
    exact = kind.isin(*_INTEGER_KINDS) | (kind.startswith("DECIMAL") & text.rlike(r"^-?[0-9]+(\.[0-9]+)?$"))
    fraction = F.regexp_extract(text, r"\.([0-9]*[1-9])", 1)  # without trailing zeros, "" for none
    return F.coalesce(exact & (F.length(fraction) <= F.lit(scale)), F.lit(False))


def _holds_numbers(data_type: T.DataType) -> bool:
    """Whether a value of ``data_type`` holds a number that :func:`_numbers_held_to_text` checks."""
    if isinstance(data_type, T.NumericType):
        return True
    if isinstance(data_type, T.StructType):
        return any(_holds_numbers(field.dataType) for field in data_type.fields)
    if isinstance(data_type, T.ArrayType):
        return _holds_numbers(data_type.elementType)
    if isinstance(data_type, T.MapType):
        return isinstance(data_type.keyType, T.StringType) and _holds_numbers(data_type.valueType)
    return False


def _numbers_held_to_text(value: Column, member: Column, data_type: T.DataType) -> Column:
    """``value``, Spark's JSON reading of a payload member as ``data_type``, with each number in it that the
    member's exact text (``member``: the same JSON value as a VARIANT) does not bear out set to null.

    Spark's JSON reader reads a DECIMAL from a JSON string (``"0.5"``) and a DOUBLE from ``"NaN"``: a number
    takes JSON numbers only, so a string (only strings cast to binary) gives null. It also rounds a DECIMAL
    half-up to its scale: a DECIMAL keeps its value only when the exact number needs no more fraction digits
    than the scale (the reader nulls too many integer digits). Inside a STRUCT, an ARRAY or a MAP with STRING
    keys the same holds for each member, element or value on its own, however deep.
    """
    if isinstance(data_type, T.DecimalType):
        return F.when(_exact_within_scale(member, data_type.scale), value)
    if isinstance(data_type, T.NumericType):
        return F.when(F.try_variant_get(member, "$", "binary").isNull(), value)
    if not _holds_numbers(data_type):
        return value
    if isinstance(data_type, T.StructType):
        fields = F.try_variant_get(member, "$", "map<string,variant>")
        kept = [
            _numbers_held_to_text(
                value.getField(f.name), F.try_element_at(fields, F.lit(f.name)), f.dataType
            ).alias(f.name)
            for f in data_type.fields
        ]
        return F.when(value.isNotNull(), F.struct(*kept))
    # An array's elements and a map's values are paired with their VARIANTs by one zip, not looked up one by
    # one (a lookup inside the lambda converts the whole VARIANT again for every element). No VARIANT (the
    # payload is not one, e.g. a key twice): each element is checked against that null member.
    if isinstance(data_type, T.ArrayType):
        items = F.try_variant_get(member, "$", "array<variant>")
        element = data_type.elementType
        return F.when(
            items.isNull(), F.transform(value, lambda x: _numbers_held_to_text(x, member, element))
        ).otherwise(F.zip_with(value, items, lambda x, v: _numbers_held_to_text(x, v, element)))
    if isinstance(data_type, T.MapType):
        entries = F.try_variant_get(member, "$", "map<string,variant>")
        kind = data_type.valueType
        return F.when(
            entries.isNull(), F.transform_values(value, lambda _k, x: _numbers_held_to_text(x, member, kind))
        ).otherwise(F.map_zip_with(value, entries, lambda _k, x, v: _numbers_held_to_text(x, v, kind)))
    return value


def with_payload_columns(schema: str | T.StructType | None) -> Callable[[DataFrame], DataFrame]:
    """Add typed columns parsed from each row's ``payload`` text (``"amount DECIMAL(38,18), sku STRING"``).

    They are derived from the exact text, never from a double: a DECIMAL column holds the written digits,
    never rounded, and null when they do not fit its precision and scale (``0.135`` into ``DECIMAL(10,2)``,
    more integer digits than precision minus scale); trailing zeros of the fraction do not count (``1.50``
    fits ``DECIMAL(10,1)``). A number written with an exponent (``1e2``) or more than 38 digits gives null
    in a DECIMAL column, as Spark cannot read its exact digits (see :func:`_exact_within_scale`). An integer
    column gives null when the value is not an integer that fits. A number column (integer, DECIMAL, DOUBLE,
    ...) takes only JSON numbers: a JSON string (``"0.5"``, ``"NaN"``) gives null, as do binary payloads,
    absent fields and values of another JSON type. The same holds for every number inside a STRUCT, an ARRAY
    or a MAP with STRING keys (:func:`_numbers_held_to_text`): that member alone is null, the rest is kept.
    """

    def transform(curated: DataFrame) -> DataFrame:
        if schema is None:
            return curated
        require_columns(curated, "with_payload_columns", ["payload"])
        struct = payload_struct(schema, curated.columns)
        typed = F.from_json(F.col("payload"), struct, STRICT_OPTIONS)
        columns = {name: typed.getField(name) for name in struct.fieldNames()}
        numeric = [f.name for f in struct.fields if _holds_numbers(f.dataType)]
        if not numeric:
            return curated.select("*", *[column.alias(name) for name, column in columns.items()])
        members = F.col("_payload_members")
        for name in numeric:
            member = F.try_element_at(members, F.lit(name))
            columns[name] = _numbers_held_to_text(columns[name], member, struct[name].dataType)
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
    require_columns(records, "deduplicate", CURATED_COLUMNS)
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
    require_columns(parsed, "quarantined", ["reason", "field", "source_object", "line", "date", "hour"])
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
    require_columns(objects, "quarantined_objects", ["source_object", "detail"])
    path = F.col("source_object")
    return objects.select(
        path.alias("source_object"),
        F.lit(None).cast("string").alias("line"),
        F.lit(None).cast("string").alias("line_base64"),
        F.lit(Reason.CORRUPT_OBJECT).alias("reason"),
        F.concat(F.lit(REASON_DETAILS[Reason.CORRUPT_OBJECT] + ": "), F.col("detail")).alias("detail"),
        partition_value(path, 3, "date").alias("date"),
        partition_value(path, 2, "hour").alias("hour"),
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
    require_columns(
        curated, "minute_metrics", ["stream", "shard_id", "partition_key", "arrival_time", "payload_base64"]
    )
    return _metrics(curated, F.date_trunc("minute", F.col("arrival_time")), "minute")


def hour_metrics(curated: DataFrame) -> DataFrame:
    """Per (stream, hour of arrival): the same metrics as :func:`minute_metrics`."""
    require_columns(
        curated, "hour_metrics", ["stream", "shard_id", "partition_key", "arrival_time", "payload_base64"]
    )
    return _metrics(curated, F.date_trunc("hour", F.col("arrival_time")), "hour_start")
