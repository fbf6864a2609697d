from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from consumer.records import SHARD_END, Position

seqs = st.integers(min_value=0, max_value=10**56 - 1).map(str)
positions = st.builds(Position, seqs, st.integers(min_value=0, max_value=10**6))


@given(positions, positions)
def test_sort_key_orders_like_positions(a: Position, b: Position) -> None:
    assert (a < b) == (a.sort_key() < b.sort_key())
    assert (a == b) == (a.sort_key() == b.sort_key())


@given(positions)
def test_shard_end_sorts_after_every_position(p: Position) -> None:
    assert p < SHARD_END
    assert p.sort_key() < SHARD_END.sort_key()


def test_numeric_not_lexicographic() -> None:
    assert Position("9") < Position("10")
    assert Position("10", 1) > Position("10", 0)
