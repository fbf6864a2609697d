"""``status --watch``: a live terminal view of the fleet (rich), redrawn once a second.

Each redraw is one status read: DynamoDB only (the lag comes with the workers' heartbeats), never Kinesis."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from consumer.admin.status import FleetStatus
from consumer.errors import ConfigError

__all__ = ["render", "require_rich", "watch"]

_LEASE_STYLE = {
    "running": "green",
    "handing over": "cyan",
    "halted": "bold red",
    "owner dead": "red",
    "waiting": "blue",
    "released": "yellow",
    "not consumed": "magenta",
    "stream gone": "magenta",
    "ended": "dim",
    "skipped": "dim",
}
_WORKER_STYLE = {"alive": "green", "draining": "cyan", "dead": "bold red"}


def _lag(ms: int | None, note: str | None, age_s: float | None) -> str:
    if ms is None:
        return f"? {note}" if note else "?"
    return f"{ms / 1000:.1f}s" if age_s is None else f"{ms / 1000:.1f}s ({age_s:g}s ago)"


@dataclass(frozen=True)
class _Column:
    """A column of the live view, and how it gives way on a narrow terminal. With ``minimum`` None it keeps
    its whole width; otherwise it may shrink down to ``minimum`` (its text wrapped and folded, or cut with an
    ellipsis when not ``fold``) and gets room back after the columns of a lower ``rank``. An ``optional``
    column is left out when even the minimums do not fit."""

    name: str
    minimum: int | None = None
    rank: int = 0
    fold: bool = True
    optional: bool = False


_SHARD_COLUMNS = (
    _Column("stream", 8),
    _Column("shard"),
    _Column("state", 12),  # "handing over", "owner dead" on one line; a longer detail wraps
    _Column("owner", 8),  # folded, not cut: worker ids differ at their end (host-pid-random)
    _Column("epoch"),
    _Column("checkpoint", 10, rank=1, fold=False, optional=True),  # 56 digits: `status` prints it whole
    _Column("lag", 7),
)
_WORKER_COLUMNS = (
    _Column("worker", 12),
    _Column("state"),
    _Column("since", 10),
    _Column("leases"),
    _Column("last heartbeat", 9),
    _Column("leads"),
)


def _room(columns: Sequence[_Column], width: int) -> int:
    """The cells left for the columns' text in a table ``width`` cells wide (rich's default box: a border
    between and around the columns, one cell of padding each side of each)."""
    return width - (len(columns) + 1) - 2 * len(columns)


def _fit(
    columns: Sequence[_Column], rows: Sequence[Mapping[str, str]], width: int | None
) -> list[tuple[_Column, int | None]]:
    """The columns to show and each one's text width, for a table ``width`` cells wide: each at its own width
    (None) when the table fits as it is, or ``width`` is None. Otherwise each column that may shrink gets its
    ``minimum`` (no more than it needs), then the room left one cell at a time in turn, by ``rank``. (Left to
    rich, the shrinking came all out of the one column that wraps, the state, down to nothing.)"""
    from rich.cells import cell_len

    needs = {c.name: max([cell_len(c.name), *(cell_len(r[c.name]) for r in rows)]) for c in columns}
    if width is None or sum(needs.values()) <= _room(columns, width):
        return [(c, None) for c in columns]
    widths = {c.name: needs[c.name] if c.minimum is None else min(needs[c.name], c.minimum) for c in columns}
    if sum(widths.values()) > _room(columns, width):  # not even the minimums: leave out what may go
        columns = [c for c in columns if not c.optional]
    left = _room(columns, width) - sum(widths[c.name] for c in columns)
    for rank in sorted({c.rank for c in columns}):
        growing = [c.name for c in columns if c.rank == rank and c.minimum is not None]
        while left > 0 and (growing := [n for n in growing if widths[n] < needs[n]]):
            for name in growing[:left]:
                widths[name] += 1
                left -= 1
    return [(c, widths[c.name]) for c in columns]


def _table(
    title: str,
    columns: Sequence[_Column],
    rows: Sequence[Mapping[str, str]],
    styles: Sequence[Mapping[str, str]],
    width: int | None,
) -> Any:
    """A rich table of ``rows`` (column name -> text; ``styles``: column name -> style), fitted to ``width``."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, title_justify="left", expand=False)
    shown = _fit(columns, rows, width)
    for column, fitted in shown:
        if column.fold:  # wrapped (and folded) only when given a width; on one line at its own width
            table.add_column(column.name, width=fitted, no_wrap=fitted is None, overflow="fold")
        else:
            table.add_column(column.name, width=fitted, no_wrap=True, overflow="ellipsis")
    for row, style in zip(rows, styles, strict=True):
        table.add_row(*(Text(row[c.name], style=style.get(c.name, "")) for c, _ in shown))
    return table


def render(status: FleetStatus, width: int | None = None) -> Any:
    """The view of one status read: a shard table and a worker table, each fitted to ``width`` terminal
    cells when given (the shard state, its owner and the worker's state stay readable at 80 columns)."""
    from rich.console import Group
    from rich.text import Text

    one_stream = len({x.stream for x in status.leases}) == 1
    shard_columns = [c for c in _SHARD_COLUMNS if not (one_stream and c.name == "stream")]
    shard_rows = [
        {
            "stream": x.stream,
            "shard": x.shard_id,
            "state": x.detail,
            "owner": x.owner or "-",
            "epoch": str(x.epoch),
            "checkpoint": x.checkpoint or "-",
            "lag": _lag(x.millis_behind_latest, x.lag_note, x.lag_age_s),
        }
        for x in status.leases
    ]
    of = f" of {status.leases[0].stream}" if one_stream else ""  # the stream named once, not on each row
    shards = _table(
        f"shards{of} ({len(status.leases)})",
        shard_columns,
        shard_rows,
        [{"state": _LEASE_STYLE.get(x.state, "")} for x in status.leases],
        width,
    )
    worker_rows = [
        {
            "worker": w.worker_id,
            "state": w.state,
            "since": w.since or "-",
            "leases": str(w.leases),
            "last heartbeat": f"{w.heartbeat_age_s}s ago" if w.heartbeat_age_s is not None else "-",
            "leads": "yes" if w.leads else "",
        }
        for w in status.workers
    ]
    workers = _table(
        f"workers ({len(status.workers)})",
        _WORKER_COLUMNS,
        worker_rows,
        [{"state": _WORKER_STYLE.get(w.state, "")} for w in status.workers],
        width,
    )
    header = Text(
        f"fleet at {status.generated_at} (dead: no heartbeat for {status.lease_duration_s:g}s); Ctrl-C to quit",
        style="bold",
    )
    return Group(header, shards, workers)


def require_rich() -> None:
    """Fail in one line, naming the extra to install, when ``rich`` (an optional dependency) is missing."""
    try:
        import rich  # noqa: F401
    except ImportError:
        raise ConfigError(
            "--watch",
            "needs the optional package 'rich': pip install 'kinesis-fleet-consumer[watch]' "
            "(or run status without --watch)",
        ) from None


def watch(read: Callable[[], FleetStatus], *, interval: float = 1.0, count: int | None = None) -> None:
    """Redraw ``read()`` every ``interval`` seconds until Ctrl-C (or ``count`` redraws)."""
    from rich.console import Console
    from rich.live import Live

    console = Console()
    shown = 0
    with Live(render(read(), console.width), console=console, auto_refresh=False, transient=False) as live:
        shown += 1
        live.refresh()
        next_at = time.monotonic() + interval
        try:
            while count is None or shown < count:
                time.sleep(max(0.0, next_at - time.monotonic()))
                next_at += interval
                live.update(render(read(), console.width), refresh=True)  # resized: fitted again
                shown += 1
        except KeyboardInterrupt:
            return
