"""The fleet scenarios only the tests run: one scale-out, one scale-in and one rolling restart, each a
single planned transition (the benchmark repeats them: ``tools.fleet.scenarios``). Each step waits on the
event it stands for (the fleet formed, the new workers own their share, every shard flows again from the
workers meant to own it), bounded by ``Timing.step_timeout``; a wait that times out is returned in
``timeouts``."""

from __future__ import annotations

import signal
import time
from functools import partial
from typing import Any

from tools.fleet.runner import Fleet
from tools.fleet.scenarios import Timing, formed, hold, signal_and_watch, wait_for, wait_formed

__all__ = ["rolling_restart", "scale_in", "scale_out"]


def _every_shard_since(f: Fleet, since: float, workers: set[str]) -> bool:
    """Every shard has delivered a record after ``since``, by one of ``workers``."""
    fresh = {d.shard for d in f.deliveries() if d.t > since and d.worker in workers}
    return len(fresh) >= f.settings.shards


def scale_out(f: Fleet, t: Timing) -> dict[str, Any]:
    """2 workers, then 2 more."""
    f.start_worker("w1")
    f.start_worker("w2")
    timeouts: list[str] = []
    wait_formed(f, t, {"w1", "w2"}, timeouts)
    f.start_worker("w3")
    f.start_worker("w4")
    everyone = {"w1", "w2", "w3", "w4"}
    wait_for(f, t, "the new workers own their share", partial(formed, f, everyone), timeouts)
    hold(t.settle)
    return {"planned": True, "timeouts": timeouts}


def scale_in(f: Fleet, t: Timing) -> dict[str, Any]:
    """4 workers, then SIGTERM to 2 of them."""
    for w in ("w1", "w2", "w3", "w4"):
        f.start_worker(w)
    timeouts: list[str] = []
    wait_formed(f, t, {"w1", "w2", "w3", "w4"}, timeouts)
    owners = f.last_owners(time.time())
    signals = {w: f.signal(w, signal.SIGTERM) for w in ("w3", "w4")}
    codes = {w: f.wait_exit(w) for w in ("w3", "w4")}
    stayed = {"w1", "w2"}
    wait_for(
        f,
        t,
        "w1 and w2 deliver every shard",
        partial(_every_shard_since, f, max(signals.values()), stayed),
        timeouts,
    )
    hold(t.settle)
    return {
        "planned": True,
        "signals": signals,
        "owners": {w: owners.get(w, []) for w in signals},
        "exit_codes": codes,
        "timeouts": timeouts,
    }


def rolling_restart(f: Fleet, t: Timing) -> dict[str, Any]:
    """2 workers replaced one by one: start the new one, wait until it owns its share (the fleet counts it
    live), SIGTERM the old one, wait until every shard flows again from the workers left."""
    live = {"old1", "old2"}
    for w in sorted(live):
        f.start_worker(w)
    timeouts: list[str] = []
    wait_formed(f, t, live, timeouts)
    signals: dict[str, float] = {}
    owners_at: dict[str, list[str]] = {}
    codes: dict[str, int] = {}
    for old, new in (("old1", "new1"), ("old2", "new2")):
        f.start_worker(new)
        live.add(new)
        wait_for(f, t, f"{new} owns its share", partial(formed, f, live), timeouts)
        watched = signal_and_watch(f, old, signal.SIGTERM)
        signals.update(watched["signals"])
        owners_at.update(watched["owners"])
        codes[old] = f.wait_exit(old)
        live.discard(old)
        wait_for(
            f,
            t,
            f"every shard flows after {old}",
            partial(_every_shard_since, f, signals[old], live),
            timeouts,
        )
    hold(t.settle)
    return {
        "planned": True,
        "signals": signals,
        "owners": owners_at,
        "exit_codes": codes,
        "timeouts": timeouts,
    }
