"""docs/protocol.md shows what the shard machine does: its table is generated from ``transition`` and ``decide``,
and this test fails when the file differs from the code."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest

from consumer.lifecycle import tables
from consumer.lifecycle.shard_messages import ShardEvent
from consumer.lifecycle.shard_model import Phase, Verdict, Work
from consumer.lifecycle.shard_tables import BEGIN, END, EVENTS, STATES, render, state_name, walk

PROTOCOL = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"
ROWS = walk()


def test_the_walk_reaches_every_phase_every_action_in_flight_and_every_event_type() -> None:
    assert {s.phase for s in STATES} == set(Phase)
    assert {s.awaiting for s in STATES} == {*Work, None}
    assert {type(ev) for _, ev in EVENTS} == set(typing.get_args(ShardEvent))
    assert len(ROWS) == len(STATES) * len(EVENTS)
    assert len({state_name(s) for s in STATES}) == len(STATES), "two states the table cannot tell apart"
    assert len({label for label, _ in EVENTS}) == len(EVENTS)


def test_every_state_and_event_is_in_the_table_and_every_kind_of_answer_shows() -> None:
    text = render()
    for s in STATES:
        assert state_name(s) in text
    for label, _ in EVENTS:
        assert f"| {label} |" in text
    assert {row.step.verdict for row in ROWS} == set(Verdict)
    assert "| invalid |" in text and "| ignored |" in text


def test_docs_protocol_shows_the_shard_table_the_code_generates() -> None:
    text = PROTOCOL.read_text(encoding="utf-8")
    start, end = text.find(BEGIN), text.find(END)
    assert 0 <= start < end, f"docs/protocol.md lost its markers: {BEGIN!r} ... {END!r}"
    assert text[start : end + len(END)] == render(), (
        "docs/protocol.md's shard table differs from the code: run `python -m consumer.lifecycle.tables` "
        "from the repository root and review the diff"
    )
    assert tables.rewrite(text) == text


def test_the_generator_rewrites_a_stale_shard_table_and_check_reports_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = tmp_path / "protocol.md"
    doc.write_text(f"# before\n\n{BEGIN}\n| an old row |\n{END}\n\nafter\n", encoding="utf-8")
    assert tables.main([str(doc), "--check"]) == 1
    assert "python -m consumer.lifecycle.tables" in capsys.readouterr().err
    assert doc.read_text(encoding="utf-8").count("an old row") == 1  # --check writes nothing
    assert tables.main([str(doc)]) == 0
    assert doc.read_text(encoding="utf-8") == f"# before\n\n{render()}\n\nafter\n"
    assert tables.main([str(doc), "--check"]) == 0


def test_a_file_with_neither_table_is_refused() -> None:
    with pytest.raises(ValueError, match="markers are missing"):
        tables.rewrite("# nothing generated here\n")
