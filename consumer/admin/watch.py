"""``status --watch``: a live terminal view of the fleet (rich), redrawn once a second.

Each redraw is one status read: DynamoDB only (the lag comes with the workers' heartbeats), never Kinesis."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from consumer.admin.status import FleetStatus
from consumer.errors import ConfigError

__all__ = ["render", "require_rich", "watch"]

_LEASE_STYLE = {
    "running": "green",
    "handing over": "cyan",
    "halted": "bold red",
    "owner dead": "red",
    "released": "yellow",
    "ended": "dim",
}
_WORKER_STYLE = {"alive": "green", "draining": "cyan", "dead": "bold red"}


def _lag(ms: int | None, note: str | None, age_s: float | None) -> str:
    if ms is None:
        return f"? {note}" if note else "?"
    return f"{ms / 1000:.1f}s" if age_s is None else f"{ms / 1000:.1f}s ({age_s:g}s ago)"


def render(status: FleetStatus) -> Any:
    """The view of one status read: a shard table and a worker table."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    shards = Table(title=f"shards ({len(status.leases)})", title_justify="left", expand=False)
    for col in ("stream", "shard", "state", "owner", "epoch", "checkpoint", "lag"):
        shards.add_column(col, no_wrap=col != "state")
    for x in status.leases:
        shards.add_row(
            x.stream,
            x.shard_id,
            Text(x.detail, style=_LEASE_STYLE.get(x.state, "")),
            x.owner or "-",
            str(x.epoch),
            x.checkpoint or "-",
            _lag(x.millis_behind_latest, x.lag_note, x.lag_age_s),
        )
    workers = Table(title=f"workers ({len(status.workers)})", title_justify="left", expand=False)
    for col in ("worker", "state", "since", "leases", "last heartbeat", "leads"):
        workers.add_column(col, no_wrap=True)
    for w in status.workers:
        workers.add_row(
            w.worker_id,
            Text(w.state, style=_WORKER_STYLE.get(w.state, "")),
            w.since or "-",
            str(w.leases),
            f"{w.heartbeat_age_s}s ago" if w.heartbeat_age_s is not None else "-",
            "yes" if w.leads else "",
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
    with Live(render(read()), console=console, auto_refresh=False, transient=False) as live:
        shown += 1
        live.refresh()
        next_at = time.monotonic() + interval
        try:
            while count is None or shown < count:
                time.sleep(max(0.0, next_at - time.monotonic()))
                next_at += interval
                live.update(render(read()), refresh=True)
                shown += 1
        except KeyboardInterrupt:
            return
