"""``status --watch`` on an ordinary terminal: the shard's state, its owner and each worker's state stay
readable at 80 and 120 columns, and the table stays within the width (the checkpoint gives way first)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from consumer.admin.status import FleetStatus, LeaseStatus, WorkerStatus
from consumer.admin.watch import render

# What a deployed fleet shows: the demo's stream name, default worker ids (host-pid-random), 56-digit positions.
STREAM = "kinesis-fleet-dev-events"
W1 = "ip-10-0-1-23.ec2.internal-12345-a1b2c3"
W2 = "ip-10-0-7-201.ec2.internal-678-d4e5f6"
SEQUENCE = "49659123456789012345678901234567890123456789012345678901"


def _lease(n: int, state: str, **fields: object) -> LeaseStatus:
    base: dict[str, object] = {
        "stream": STREAM,
        "shard_id": f"shardId-{n:012d}",
        "state": state,
        "owner": W1,
        "owner_state": "alive",
        "epoch": 12,
        "checkpoint": f"{SEQUENCE}/0",
        "millis_behind_latest": 1200,
        "lag_note": None,
        "owner_heartbeat_age_s": 1.0,
        "handoff_to": None,
        "halted_at": None,
        "halted_since": None,
        "lag_age_s": 0.8,
    }
    return LeaseStatus(**{**base, **fields})  # type: ignore[arg-type]


def _fleet(*streams: str) -> FleetStatus:
    leases = [
        _lease(0, "running"),
        _lease(1, "handing over", handoff_to=W2),
        _lease(
            2, "halted", halted_at=SEQUENCE, halted_since="2026-11-29T10:59:00Z", millis_behind_latest=None
        ),
        _lease(3, "owner dead", owner_state="dead"),
        _lease(4, "released", owner=None, owner_state=None, millis_behind_latest=None, lag_note="no owner"),
        _lease(5, "ended", owner=None, owner_state=None),
    ]
    if streams:  # the same shards, spread over these streams
        leases = [
            LeaseStatus(**{**x.__dict__, "stream": streams[i % len(streams)]}) for i, x in enumerate(leases)
        ]
    workers = [
        WorkerStatus(W1, "alive", "2026-11-29T10:00:00Z", 3, 100, 0.5, leads=True),
        WorkerStatus(W2, "draining", "2026-11-29T10:00:00Z", 1, 100, 0.7),
        WorkerStatus("w-gone", "dead", "2026-11-29T09:00:00Z", 1, 100, 3600.0),
    ]
    return FleetStatus("2026-11-29T11:00:00Z", 10.0, leases, workers)


def _shown(status: FleetStatus, width: int) -> str:
    out = io.StringIO()
    Console(width=width, file=out, color_system=None, force_terminal=False).print(render(status, width))
    return out.getvalue()


def _bounds(header: str, name: str) -> tuple[int, int]:
    """Where column ``name`` lies in a rich table's header line: between which two borders."""
    borders = [i for i, ch in enumerate(header) if ch == "┃"]
    at = header.index(f" {name} ")
    return max(b for b in borders if b < at), min(b for b in borders if b > at)


def _column(text: str, table: str, name: str, key: str) -> list[str]:
    """The cells of column ``name`` in the rich table below the line that starts with ``table``, a wrapped
    cell's lines joined with spaces. ``key``: a column whose text is never wrapped, so that each row's first
    line is the one with text in it."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(table))
    header = next(line for line in lines[start:] if line.startswith("┃") and f" {name} " in line)
    (left, right), (key_left, key_right) = _bounds(header, name), _bounds(header, key)
    cells: list[str] = []
    for line in lines[lines.index(header) + 2 :]:
        if not line.startswith("│"):
            break
        piece = line[left + 1 : right].strip()
        if line[key_left + 1 : key_right].strip():  # a row's first line
            cells.append(piece)
        elif piece:
            cells[-1] += f" {piece}"
    return cells


def _whole(cells: list[str]) -> list[str]:
    """Cells as their text was before it was wrapped or folded (every space taken out)."""
    return [cell.replace(" ", "") for cell in cells]


@pytest.mark.parametrize("width", [80, 120])
def test_the_states_and_owners_are_readable_on_an_ordinary_terminal(width: int) -> None:
    text = _shown(_fleet(), width)
    assert max(len(line) for line in text.splitlines()) <= width  # nothing cut at the terminal's edge
    states = _column(text, "shards", "state", "shard")
    assert states[0] == "running" and states[4] == "released" and states[5] == "ended"
    assert states[1].startswith("handing over")
    assert _whole(states)[1] == f"handingoverto{W2}"  # wrapped and folded, every character there
    assert states[2].startswith("halted at") and _whole(states)[2].startswith(f"haltedat{SEQUENCE}since")
    assert states[3].startswith("owner ") and "dead" in states[3]
    assert _whole(_column(text, "shards", "owner", "shard")) == [W1, W1, W1, W1, "-", "-"]  # folded, not cut
    assert _column(text, "workers", "state", "state") == ["alive", "draining", "dead"]
    assert _whole(_column(text, "workers", "worker", "state")) == [W1, W2, "w-gone"]
    assert "shards of kinesis-fleet-dev-events (6)" in text  # one stream: named once, in the title


def test_the_checkpoint_gives_way_first_and_is_whole_when_there_is_room() -> None:
    assert "checkpoint" not in _shown(
        _fleet(), 80
    )  # left out: a few digits tell nothing (`status` prints it)
    middle = _shown(_fleet(), 120)
    cut = _column(middle, "shards", "checkpoint", "shard")
    assert cut[0].endswith("…") and SEQUENCE.startswith(cut[0][:-1])  # cut, on one line
    wide = _shown(_fleet(), 260)
    assert f"{SEQUENCE}/0" in wide and f"handing over to {W2}" in wide  # room enough: each on one line


def test_several_streams_keep_the_stream_column() -> None:
    text = _shown(_fleet("orders", "payments-eu-west-1"), 120)
    assert max(len(line) for line in text.splitlines()) <= 120
    assert _whole(_column(text, "shards", "stream", "shard"))[:2] == ["orders", "payments-eu-west-1"]
    assert _column(text, "shards", "state", "shard")[0] == "running"
    assert "shards (6)" in text


def test_without_a_width_the_view_is_as_wide_as_its_text() -> None:
    out = io.StringIO()
    Console(width=400, file=out, color_system=None).print(render(_fleet()))
    text = out.getvalue()
    assert f"{SEQUENCE}/0" in text and f"handing over to {W2}" in text and f"owner {W1} is dead" in text
