"""The compaction's generated code stays small enough for the JVM to compile (docs/benchmarks.md, pipeline).

The HotSpot JIT does not compile a method over 8,000 bytes of bytecode; Spark fuses a stage's operators into one
generated method and, past ``spark.sql.codegen.hugeMethodLimit`` (8,000 in :data:`~spark_jobs.storage.JOB_SQL_CONF`),
runs the stage operator by operator instead. The line checks of :func:`~spark_jobs.transforms.parse_raw_lines`
fused into one stage made a ~12,300-byte method; they are split in two, and this holds them there.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_jobs import compact
from spark_jobs.transforms import (
    deduplicate,
    parse_raw_lines,
    quarantined,
    valid_records,
    with_event_id,
    with_payload_columns,
)
from tests.spark.helpers import line, record, write_object

pytestmark = pytest.mark.spark


@pytest.fixture
def codegen(spark: Any) -> Iterator[Any]:
    """The session with whole-stage code generation on (the tests' session turns it off) and adaptive
    execution off (its plan is generated only when run), as in the benchmark and on EMR."""
    keys = ("spark.sql.codegen.wholeStage", "spark.sql.adaptive.enabled")
    saved = {key: spark.conf.get(key) for key in keys}
    spark.conf.set("spark.sql.codegen.wholeStage", "true")
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    try:
        yield spark
    finally:
        for key, value in saved.items():
            spark.conf.set(key, value)


def _method_sizes(spark: Any, df: DataFrame) -> list[tuple[int, str]]:
    """(largest generated method in bytes of bytecode, the stage's top operator) of each generated stage."""
    plan = df._jdf.queryExecution().executedPlan()
    stages = spark._jvm.org.apache.spark.sql.execution.debug.package.codegenStringSeq(plan)
    out = []
    for i in range(stages.size()):
        stage = stages.apply(i)
        out.append((int(stage._3().maxMethodCodeSize()), stage._1().strip().splitlines()[0]))
    return out


@pytest.mark.parametrize(
    ("event_id_field", "payload_columns"),
    [(None, None), ("event_id", "amount DECIMAL(38,20), sku STRING")],
)
def test_every_generated_method_of_the_compaction_is_under_the_jit_limit(
    codegen: Any, tmp_path: Path, event_id_field: str | None, payload_columns: str | None
) -> None:
    spark = codegen
    limit = int(spark.conf.get("spark.sql.codegen.hugeMethodLimit"))
    assert limit <= 8000  # the JIT's limit: past it Spark must not run the big method
    raw = tmp_path / "raw"
    write_object(raw, "a.jsonl.gz", [line(record())])
    patterns = compact.raw_patterns(str(raw), "2026-11-21T01", "2026-11-21T01")

    def parsed() -> DataFrame:
        return compact.read_raw(spark, str(raw), patterns).transform(parse_raw_lines)

    # the two plans of compact._compact: the curated rows (after its observation) and the quarantine
    curated = (
        parsed()
        .observe("lines", F.count(F.lit(1)).alias("lines"))
        .transform(with_event_id(event_id_field))
        .transform(valid_records)
        .transform(deduplicate)
        .transform(with_payload_columns(payload_columns))
    )
    for df in (curated, parsed().transform(quarantined)):
        sizes = _method_sizes(spark, df)
        summary = [(size, top[:60]) for size, top in sizes]
        assert any("_unparseable" in top for _, top in sizes), summary  # the line checks are generated code
        assert max(size for size, _ in sizes) <= limit, summary
