"""Raw lines -> typed fields and a quarantine reason: the checks of docs/data-format.md, sections 1-2.

:func:`parse_raw_lines` is the first transform of the compaction (see :mod:`spark_jobs.transforms`); the JSON
text rules it relies on are column expressions of :mod:`spark_jobs.jsontext`. No I/O, no Python UDFs.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark_jobs.jsontext import STRICT_OPTIONS, canonical_base64, one_json_text, within_bounds, wrapped
from spark_jobs.schemas import RAW_FORMAT, RAW_RECORD_SCHEMA, Reason, require_columns

__all__ = ["parse_raw_lines", "partition_value"]

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
#: Strict parsing (RFC 8259, :data:`~spark_jobs.jsontext.STRICT_OPTIONS`); a line that does not parse, or an
#: integer field holding something else, goes to ``_corrupt``.
_JSON_OPTIONS = {"columnNameOfCorruptRecord": "_corrupt", **STRICT_OPTIONS}


def partition_value(path: Column, from_end: int, name: str) -> Column:
    """The value of the ``name=`` directory ``from_end`` levels above the object in URI ``path`` (empty if it
    is not there): ``partition_value(path, 2, "hour")`` is ``05`` for ``.../hour=05/object.jsonl.gz``."""
    segment = F.substring_index(F.substring_index(path, "/", -from_end), "/", 1)
    return F.when(segment.startswith(f"{name}="), F.substring(segment, len(name) + 2, 1 << 20)).otherwise("")


def _first(conditions: Iterable[tuple[Column, str]]) -> Column:
    """The value of the first condition that holds (null when none does)."""
    out: Column = F.lit(None).cast("string")
    for condition, value in reversed(list(conditions)):
        out = F.when(condition, F.lit(value)).otherwise(out)
    return out


def _stage_break(df: DataFrame) -> DataFrame:
    """``df`` unchanged, through an operator that whole-stage code generation does not fuse across.

    Spark fuses a chain of projections into one generated Java method per row loop, and the HotSpot JIT does
    not compile a method over 8,000 bytes of bytecode: the line checks fused with the reason are ~12,300
    bytes, past ``spark.sql.codegen.hugeMethodLimit`` (8,000), so Spark would run each projection on its own.
    An observation (a row count, which nothing reads) is not generated code: each side of it is a stage of its
    own (~6,600 bytes each), both compiled. It costs one row copy and a counter per line; ``observe`` needs a
    unique name per plan, hence the UUID.
    """
    return df.observe(f"_stage_break_{uuid.uuid4().hex}", F.count(F.lit(1)).alias("rows"))


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
    require_columns(lines, "parse_raw_lines", ["value", "source_object"])
    path = F.col("source_object")
    parts = [(4, "stream", "path_stream"), (3, "date", "date"), (2, "hour", "hour")]
    given = {"path_stream", "date", "hour"} <= set(lines.columns)
    parsed = lines.select(
        path.alias("source_object"),
        F.col("value").alias("line"),
        *[
            F.col(column) if given else partition_value(path, up, name).alias(column)
            for up, name, column in parts
        ],
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

    # The JSON type of each field, for lines not in the sink's layout only: a lambda over the object's fields.
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
        # Each format's own payload members only: the other format's names are unknown fields there, ignored
        # like any other (a format-1 line's "data" never becomes its payload or its event id).
        F.when(version == RAW_FORMAT, F.col("j.data")).alias("data"),
        F.when(version == RAW_FORMAT, F.col("j.data_base64")).alias("data_base64"),
        F.when(version == 1, F.col("j.payload")).alias("payload"),
        F.when(version == 1, F.col("j.payload_base64")).alias("payload_base64"),
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
    # Split here into two generated stages (see _stage_break): the checks above make one method too big to JIT.
    return (
        _stage_break(parsed)
        .withColumn("reason", reason)
        .withColumn("field", field)
        .drop("_unparseable", "_wrong_type", "_corrupt", "_arrival_text", "_null_payload")
    )
