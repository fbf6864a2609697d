"""The ownership machine is total: every (phase, event) pair is walked, answered and documented.

mypy checks that the code names every phase and event in its ``match`` statements; these tests check that the
walk reaches every one of them, that the answers keep the machine's promises, and that docs/protocol.md shows
what the code does.
"""

from __future__ import annotations

import typing
from pathlib import Path

import pytest

from consumer.lifecycle.messages import ActionResult, LeaseWrite, Outcome, Result, Start, Stop, WriteKind
from consumer.lifecycle.ownership import Finished, Ownership, OwnEvent, Phase, Verdict
from consumer.lifecycle.tables import BEGIN, END, EVENTS, PHASES, Row, main, render, walk

PROTOCOL = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"
TIMED = {Phase.ASKED, Phase.HALTED_ASKED, Phase.TRANSFERRING, Phase.RELEASING, Phase.ENDING}
ROWS = walk()


def _moves(row: Row) -> tuple[Ownership, Ownership | None]:
    return row.before, row.step.next


def test_the_walk_reaches_every_phase_every_event_type_every_outcome_and_every_result() -> None:
    assert {o.phase for _, o in PHASES} == set(Phase)
    sent = [make(o) for _, o in PHASES for _, make in EVENTS]
    assert {type(ev) for ev in sent} == set(typing.get_args(OwnEvent))
    assert {ev.report.outcome for ev in sent if isinstance(ev, Finished)} == set(Outcome)
    assert {ev.result for ev in sent if isinstance(ev, ActionResult)} == set(Result)
    assert len(ROWS) == len(PHASES) * len(EVENTS)


def test_every_pair_is_answered_and_what_is_not_a_transition_says_why_and_changes_nothing() -> None:
    for row in ROWS:
        assert isinstance(row.step.verdict, Verdict), row
        if row.step.verdict is not Verdict.MOVED:
            assert row.step.why, f"{row.phase} / {row.event}: an ignored or invalid answer must say why"
            assert row.step.next is row.before and row.step.actions == [], row


def test_a_running_consumer_is_never_dropped_without_a_stop_unless_it_reported_its_end() -> None:
    for row in ROWS:
        before, after = _moves(row)
        if before.consuming and (after is None or not after.consuming):
            stopped = any(isinstance(a, Stop) for a in row.step.actions)
            assert stopped or isinstance(row.sent, Finished), f"{row.phase} / {row.event}"


def test_a_write_is_sent_only_on_entering_writing_and_never_while_a_consumer_runs() -> None:
    for row in ROWS:
        before, after = _moves(row)
        moves = [a for a in row.step.actions if isinstance(a, LeaseWrite) and a.kind is not WriteKind.HALT]
        entering = after is not None and after.phase is Phase.WRITING and before.phase is not Phase.WRITING
        assert bool(moves) == entering, f"{row.phase} / {row.event}"
        if entering:
            assert after is not None and [w.kind for w in moves] == [after.writing]
            assert not before.consuming


def test_timers_are_set_exactly_in_the_timed_phases_and_a_transfer_always_has_a_destination() -> None:
    for row in ROWS:
        after = row.step.next
        if after is None:
            continue
        assert (after.due_at != float("inf")) == (after.phase in TIMED), f"{row.phase} / {row.event}"
        assert (after.phase is Phase.WRITING) == (after.writing is not None), f"{row.phase} / {row.event}"
        if after.phase is Phase.TRANSFERRING:
            assert after.give_to is not None
        if after.phase is Phase.RELEASING:
            assert after.give_to is None


def test_a_due_timer_is_never_invalid_and_a_step_never_starts_a_consumer() -> None:
    for row in ROWS:
        assert not any(isinstance(a, Start) for a in row.step.actions)
        if row.event == "its `due_at` comes":
            assert (row.step.verdict is Verdict.INVALID) == (row.before.phase not in TIMED), row.phase


def test_docs_protocol_md_shows_the_tables_the_code_generates() -> None:
    text = PROTOCOL.read_text(encoding="utf-8")
    start, end = text.find(BEGIN), text.find(END)
    assert 0 <= start < end, f"docs/protocol.md lost its markers: {BEGIN!r} ... {END!r}"
    assert text[start : end + len(END)] == render(), (
        "docs/protocol.md's ownership tables differ from the code: run `python -m consumer.lifecycle.tables` "
        "from the repository root and review the diff"
    )


def test_the_generator_rewrites_a_stale_file_and_check_reports_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = tmp_path / "protocol.md"
    doc.write_text(f"# before\n\n{BEGIN}\n| an old row |\n{END}\n\nafter\n", encoding="utf-8")
    assert main([str(doc), "--check"]) == 1
    assert "python -m consumer.lifecycle.tables" in capsys.readouterr().err
    assert main([str(doc)]) == 0
    assert doc.read_text(encoding="utf-8") == f"# before\n\n{render()}\n\nafter\n"
    assert main([str(doc), "--check"]) == 0
