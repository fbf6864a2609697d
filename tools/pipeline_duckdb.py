"""The DuckDB reference: docs/data-format.md's compaction and metrics, in SQL, from the raw objects.

Independent of spark_jobs, so the two agreeing is evidence that both are right; also Spark's local speed
reference. Where DuckDB's JSON is laxer than RFC 8259 (``NaN``, trailing commas) so is this reference; the
sink writes neither."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

__all__ = ["compare", "duckdb_pipeline"]

_STRINGS = ("stream", "shard_id", "sequence_number", "partition_key", "arrival_time")
_INTEGERS = ("v", "sub_sequence_number", "epoch")
_FIELDS = (*_STRINGS, *_INTEGERS, "data", "data_base64")

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
           try_cast({arrival} AS TIMESTAMPTZ) AS arrival,
           CASE WHEN ends_with({arrival}, 'Z') THEN left({arrival}, 13)  -- already UTC: YYYY-MM-DDTHH
                ELSE strftime(try_cast({arrival} AS TIMESTAMPTZ) AT TIME ZONE 'UTC', '%Y-%m-%dT%H') END AS utc_hour,
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
""".format(
    strings=" AND ".join(f"{name}_type = 'VARCHAR'" for name in _STRINGS),
    integers=" AND ".join(f"{name}_type IN ('BIGINT', 'UBIGINT')" for name in _INTEGERS),
)


def _lines_query(glob: str) -> str:
    fields = ", ".join(f"t[{i + 1}] AS {name}_type, s[{i + 1}] AS {name}" for i, name in enumerate(_FIELDS))
    paths = ", ".join(f"'$.{name}'" for name in _FIELDS)
    arrival = f"s[{_FIELDS.index('arrival_time') + 1}]"
    return _LINES.format(fields=fields, paths=paths, glob=glob, arrival=arrival)


_METRICS = """
    SELECT stream, {bucket} AS {name}, count(*) AS records, count(DISTINCT shard_id) AS shards,
           count(DISTINCT partition_key) AS partition_keys, count(payload_base64) AS binary_records,
           min(arrival_time) AS first_arrival, max(arrival_time) AS last_arrival, date, hour
    FROM {curated}
    GROUP BY ALL
"""
#: table: (its time bucket's column, how it is computed)
_METRIC_TABLES = {
    "per_minute": ("minute", "date_trunc('minute', arrival_time)"),
    "per_hour": ("hour_start", "date_trunc('hour', arrival_time)"),
}
_CURATED_COLUMNS = (
    "stream, shard_id, sequence_number, sub_sequence_number, partition_key, epoch, payload, payload_base64,"
    " epoch_us(arrival_time) AS arrival_us, date, hour"
)
_METRIC_COLUMNS = (
    "stream, epoch_us({bucket}) AS bucket, records, shards, partition_keys, binary_records,"
    " epoch_us(first_arrival) AS first_us, epoch_us(last_arrival) AS last_us, date, hour"
)


def _parquet(path: Path) -> str:
    return f"read_parquet('{path}/*/*/*.parquet', hive_partitioning = true, hive_types_autocast = false)"


def duckdb_pipeline(con: Any, raw_root: Path, out: Path) -> dict[str, float]:
    """Dedup ``raw_root`` into ``out/curated`` and build ``out/per_minute``/``out/per_hour``; returns timings."""
    glob = f"{raw_root}/stream=*/date=*/hour=*/*.jsonl.gz"
    out.mkdir(parents=True, exist_ok=True)
    partitioned = "(FORMAT parquet, PARTITION_BY (date, hour), OVERWRITE_OR_IGNORE true)"
    started = time.perf_counter()
    con.execute(f"""
        COPY (
            SELECT stream, shard_id, sequence_number, sub_sequence_number::BIGINT AS sub_sequence_number,
                   partition_key, arrival AS arrival_time, epoch::BIGINT AS epoch,
                   CASE WHEN data_type = 'VARCHAR' THEN data END AS payload,
                   CASE WHEN data_base64_type = 'VARCHAR' THEN data_base64 END AS payload_base64,
                   part.d AS date, part.h AS hour
            FROM ({_lines_query(glob)})
            WHERE {_VALID}
            QUALIFY row_number() OVER (
                PARTITION BY stream, shard_id, sequence_number, sub_sequence_number::BIGINT
                ORDER BY epoch::BIGINT) = 1
        ) TO '{out}/curated' {partitioned}
    """)
    compacted = time.perf_counter()
    for table, (name, bucket) in _METRIC_TABLES.items():
        query = _METRICS.format(bucket=bucket, name=name, curated=_parquet(out / "curated"))
        con.execute(f"COPY ({query}) TO '{out}/{table}' {partitioned}")
    finished = time.perf_counter()
    return {
        "compact_s": compacted - started,
        "aggregate_s": finished - compacted,
        "total_s": finished - started,
    }


def compare(con: Any, spark_out: Path, duck_out: Path) -> dict[str, int]:
    """Row-level differences between Spark's and DuckDB's curated table and metrics tables (all must be 0)."""

    def count(query: str) -> int:
        return int(con.execute(f"SELECT count(*) FROM ({query})").fetchone()[0])

    def differences(table: str, columns: str) -> int:
        spark, duck = (f"SELECT {columns} FROM {_parquet(out / table)}" for out in (spark_out, duck_out))
        return count(f"({spark}) EXCEPT ALL ({duck})") + count(f"({duck}) EXCEPT ALL ({spark})")

    spark_curated = _parquet(spark_out / "curated")
    result = {
        "curated_rows_spark": count(f"FROM {spark_curated}"),
        "curated_rows_duckdb": count(f"FROM {_parquet(duck_out / 'curated')}"),
        "curated_differences": differences("curated", _CURATED_COLUMNS),
        "duplicate_keys_spark": count(
            f"SELECT 1 FROM {spark_curated}"
            " GROUP BY stream, shard_id, sequence_number, sub_sequence_number HAVING count(*) > 1"
        ),
    }
    for table, (name, _) in _METRIC_TABLES.items():
        result[f"{table}_differences"] = differences(table, _METRIC_COLUMNS.format(bucket=name))
    return result
