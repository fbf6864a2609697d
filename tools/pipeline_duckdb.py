"""The DuckDB reference: the same compaction and metrics computed independently from the raw objects.

It implements the rules of docs/data-format.md for format-2 lines in SQL (not by calling spark_jobs), so
agreement between the two is evidence that both are right. DuckDB is also the local speed reference for the
Spark jobs. Where DuckDB's JSON functions are laxer than RFC 8259 (they accept ``NaN`` and trailing commas),
the reference is laxer too; the sink never writes either, so the benchmark's data does not depend on it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

__all__ = ["compare", "duckdb_pipeline"]

_FIELDS = (
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
)
_STRINGS = ("stream", "shard_id", "sequence_number", "partition_key", "arrival_time")
_INTEGERS = ("v", "sub_sequence_number", "epoch")

# One row per line that is a JSON object: its keys, and per field its JSON type and its value as text (NULL
# when absent). MATERIALIZED: each line is parsed once (inlined, every condition would parse it again).
_LINES = """
    WITH parsed AS MATERIALIZED (
        SELECT filename, json_keys(j) AS keys, json_type(j, [{paths}]) AS t,
               json_extract_string(j, [{paths}]) AS s
        FROM read_json('{glob}', format = 'newline_delimited', records = false, ignore_errors = true,
                       columns = {{j: 'JSON'}}, filename = true, hive_partitioning = false)
        WHERE json_type(j) = 'OBJECT')
    SELECT filename, keys, {fields},
           try_cast(s[7] AS TIMESTAMPTZ) AS arrival,
           CASE WHEN ends_with(s[7], 'Z') THEN left(s[7], 13)  -- already UTC: YYYY-MM-DDTHH
                ELSE strftime(try_cast(s[7] AS TIMESTAMPTZ) AT TIME ZONE 'UTC', '%Y-%m-%dT%H') END AS utc_hour,
           regexp_extract(filename, '/stream=([^/]*)/date=([^/]*)/hour=([^/]*)/[^/]*$', ['s', 'd', 'h']) AS part
    FROM parsed
"""

# The rules, in SQL of its own: JSON types, unique keys, version, values, payload, partition.
_VALID = """
    len(keys) = len(list_distinct(keys))
    AND {strings} AND {integers}
    AND v = '2'
    AND regexp_full_match(sequence_number, '[0-9]{{1,56}}')
    AND sub_sequence_number::BIGINT >= 0 AND epoch::BIGINT >= 0
    AND regexp_full_match(arrival_time,
        '[0-9]{{4}}-[0-9]{{2}}-[0-9]{{2}}T[0-9]{{2}}:[0-9]{{2}}:[0-9]{{2}}(\\.[0-9]{{1,9}})?(Z|[+-][0-9]{{2}}:[0-9]{{2}})')
    AND arrival IS NOT NULL
    AND (coalesce(data_type, 'NULL') = 'VARCHAR') <> (coalesce(data_base64_type, 'NULL') = 'VARCHAR')
    AND coalesce(data_type, 'NULL') IN ('NULL', 'VARCHAR') AND coalesce(data_base64_type, 'NULL') IN ('NULL', 'VARCHAR')
    AND (data_type IS DISTINCT FROM 'VARCHAR' OR json_valid(data))
    AND (data_base64_type IS DISTINCT FROM 'VARCHAR'
         OR (length(data_base64) % 4 = 0 AND regexp_full_match(data_base64, '[A-Za-z0-9+/]*={{0,2}}')))
    AND stream = part.s AND utc_hour = part.d || 'T' || part.h
"""


def _lines_query(glob: str) -> str:
    fields = ", ".join(f"t[{i + 1}] AS {name}_type, s[{i + 1}] AS {name}" for i, name in enumerate(_FIELDS))
    paths = ", ".join(f"'$.{name}'" for name in _FIELDS)
    return _LINES.format(fields=fields, paths=paths, glob=glob)


def _valid_condition() -> str:
    strings = " AND ".join(f"{name}_type = 'VARCHAR'" for name in _STRINGS)
    integers = " AND ".join(f"{name}_type IN ('BIGINT', 'UBIGINT')" for name in _INTEGERS)
    return _VALID.format(strings=strings, integers=integers)


_METRICS = """
    SELECT stream, {bucket} AS {name}, count(*) AS records, count(DISTINCT shard_id) AS shards,
           count(DISTINCT partition_key) AS partition_keys, count(payload_base64) AS binary_records,
           min(arrival_time) AS first_arrival, max(arrival_time) AS last_arrival, date, hour
    FROM read_parquet('{curated}/*/*/*.parquet', hive_partitioning = true, hive_types_autocast = false)
    GROUP BY ALL
"""


def duckdb_pipeline(con: Any, raw_root: Path, out: Path) -> dict[str, float]:
    """Dedup ``raw_root`` into ``out/curated`` and build ``out/per_minute``/``out/per_hour``; returns timings."""
    glob = f"{raw_root}/stream=*/date=*/hour=*/*.jsonl.gz"
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    con.execute(f"""
        COPY (
            SELECT stream, shard_id, sequence_number, sub_sequence_number::BIGINT AS sub_sequence_number,
                   partition_key, arrival AS arrival_time, epoch::BIGINT AS epoch,
                   CASE WHEN data_type = 'VARCHAR' THEN data END AS payload,
                   CASE WHEN data_base64_type = 'VARCHAR' THEN data_base64 END AS payload_base64,
                   part.d AS date, part.h AS hour
            FROM ({_lines_query(glob)})
            WHERE {_valid_condition()}
            QUALIFY row_number() OVER (
                PARTITION BY stream, shard_id, sequence_number, sub_sequence_number::BIGINT
                ORDER BY epoch::BIGINT) = 1
        ) TO '{out}/curated' (FORMAT parquet, PARTITION_BY (date, hour), OVERWRITE_OR_IGNORE true)
    """)
    compacted = time.perf_counter()
    for name, bucket in (
        ("minute", "date_trunc('minute', arrival_time)"),
        ("hour_start", "date_trunc('hour', arrival_time)"),
    ):
        table = "per_minute" if name == "minute" else "per_hour"
        query = _METRICS.format(bucket=bucket, name=name, curated=f"{out}/curated")
        con.execute(
            f"COPY ({query}) TO '{out}/{table}' (FORMAT parquet, PARTITION_BY (date, hour), OVERWRITE_OR_IGNORE true)"
        )
    finished = time.perf_counter()
    return {
        "compact_s": compacted - started,
        "aggregate_s": finished - compacted,
        "total_s": finished - started,
    }


def _differences(con: Any, left: str, right: str) -> int:
    both_ways = f"SELECT count(*) FROM (({left}) EXCEPT ALL ({right})) UNION ALL SELECT count(*) FROM (({right}) EXCEPT ALL ({left}))"
    return int(sum(row[0] for row in con.execute(both_ways).fetchall()))


def compare(con: Any, spark_out: Path, duck_out: Path) -> dict[str, int]:
    """Row-level differences between Spark's and DuckDB's curated table and metrics tables (all must be 0)."""

    def parquet(path: Path) -> str:
        return f"read_parquet('{path}/*/*/*.parquet', hive_partitioning = true, hive_types_autocast = false)"

    curated_cols = (
        "stream, shard_id, sequence_number, sub_sequence_number, partition_key, epoch, payload, payload_base64,"
        " epoch_us(arrival_time) AS arrival_us, date, hour"
    )
    metric_cols = (
        "stream, epoch_us({bucket}) AS bucket, records, shards, partition_keys, binary_records,"
        " epoch_us(first_arrival) AS first_us, epoch_us(last_arrival) AS last_us, date, hour"
    )
    result = {
        "curated_rows_spark": int(
            con.execute(f"SELECT count(*) FROM {parquet(spark_out / 'curated')}").fetchone()[0]
        ),
        "curated_rows_duckdb": int(
            con.execute(f"SELECT count(*) FROM {parquet(duck_out / 'curated')}").fetchone()[0]
        ),
        "curated_differences": _differences(
            con,
            f"SELECT {curated_cols} FROM {parquet(spark_out / 'curated')}",
            f"SELECT {curated_cols} FROM {parquet(duck_out / 'curated')}",
        ),
        "duplicate_keys_spark": int(
            con.execute(
                f"SELECT count(*) FROM (SELECT 1 FROM {parquet(spark_out / 'curated')}"
                " GROUP BY stream, shard_id, sequence_number, sub_sequence_number HAVING count(*) > 1)"
            ).fetchone()[0]
        ),
    }
    for table, bucket in (("per_minute", "minute"), ("per_hour", "hour_start")):
        cols = metric_cols.format(bucket=bucket)
        result[f"{table}_differences"] = _differences(
            con,
            f"SELECT {cols} FROM {parquet(spark_out / table)}",
            f"SELECT {cols} FROM {parquet(duck_out / table)}",
        )
    return result
