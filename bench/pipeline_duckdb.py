"""The DuckDB reference: the same compaction and metrics computed independently from the raw objects.

It implements the rules of docs/data-format.md in SQL (not by calling spark_jobs), so agreement between the two
is evidence that both are right. DuckDB is also the local speed reference for the Spark jobs.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

__all__ = ["compare", "duckdb_pipeline"]

_COLUMNS = (
    "{stream: 'VARCHAR', shard_id: 'VARCHAR', sequence_number: 'VARCHAR', sub_sequence_number: 'BIGINT',"
    " partition_key: 'VARCHAR', arrival_time: 'VARCHAR', epoch: 'BIGINT', payload: 'JSON', payload_base64: 'VARCHAR'}"
)

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
            SELECT stream, shard_id, sequence_number, sub_sequence_number, partition_key,
                   arrival_time::TIMESTAMPTZ AS arrival_time, epoch, payload, payload_base64,
                   strftime(arrival_time::TIMESTAMPTZ AT TIME ZONE 'UTC', '%Y-%m-%d') AS date,
                   strftime(arrival_time::TIMESTAMPTZ AT TIME ZONE 'UTC', '%H') AS hour
            FROM read_json('{glob}', format = 'newline_delimited', ignore_errors = true,
                           hive_partitioning = false, columns = {_COLUMNS})
            WHERE stream IS NOT NULL AND shard_id IS NOT NULL AND partition_key IS NOT NULL
              AND regexp_full_match(sequence_number, '[0-9]{{1,56}}')
              AND sub_sequence_number >= 0 AND epoch >= 0
              AND try_cast(arrival_time AS TIMESTAMPTZ) IS NOT NULL
              AND (payload IS NULL) <> (payload_base64 IS NULL)
            QUALIFY row_number() OVER (
                PARTITION BY stream, shard_id, sequence_number, sub_sequence_number ORDER BY epoch) = 1
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
        "stream, shard_id, sequence_number, sub_sequence_number, partition_key, epoch, payload_base64,"
        " epoch_us(arrival_time) AS arrival_us, payload->>'event_id' AS event_id, (payload->>'amount')::BIGINT AS amount,"
        " date, hour"
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
