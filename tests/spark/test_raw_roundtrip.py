"""Property: any bytes, through the sink's line encoding into a raw object and through the compaction, come back
from the curated row byte for byte."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.spark.helpers import curated_bytes, run_compact, sink_objects, sink_records

pytestmark = pytest.mark.spark

_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**45), max_value=10**45)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=8,
)
#: Arbitrary bytes, and JSON texts written in the ways producers write them (indent, escapes, raw UTF-8).
_DATA = st.binary(max_size=200) | st.builds(
    lambda value, indent, ascii_only: json.dumps(value, indent=indent, ensure_ascii=ascii_only).encode(),
    _JSON,
    st.sampled_from([None, 0, 2]),
    st.booleans(),
)


# A compaction costs seconds of Spark whatever its size: few examples of many records each (the records of an
# example are independent of one another, so this tries as many values as more, smaller examples would).
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_DATA, min_size=1, max_size=200))
def test_random_bytes_come_back_from_the_curated_table(spark, datas):
    with tempfile.TemporaryDirectory() as tmp:
        lake = Path(tmp)
        records = sink_records(datas)
        sink_objects(lake, records)
        counts = run_compact(lake, spark=spark)
        assert (counts["malformed"], counts["curated"]) == (0, len(datas))
        assert curated_bytes(spark, lake) == {r.sequence_number: r.data for r in records}
