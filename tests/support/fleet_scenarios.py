"""The fleet scenarios only the tests run: one scale-out, one scale-in and one rolling restart, each a
single planned transition (the benchmark repeats them: ``tools.fleet.scenarios``)."""

from __future__ import annotations

import signal
import time
from typing import Any

from tools.fleet.runner import Fleet
from tools.fleet.scenarios import Timing, signal_and_watch, wait_for, workers_since

__all__ = ["rolling_restart", "scale_in", "scale_out"]


def scale_out(f: Fleet, t: Timing) -> dict[str, Any]:
    """2 workers, then 2 more."""
    f.start_worker("w1")
    f.start_worker("w2")
    time.sleep(t.warmup)
    since = time.time()
    f.start_worker("w3")
    f.start_worker("w4")
    timeouts: list[str] = []
    new = {"w3", "w4"}
    wait_for(f, t, "the new workers' first records", lambda: new <= workers_since(f, since), timeouts)
    time.sleep(t.settle)
    return {"planned": True, "timeouts": timeouts}


def scale_in(f: Fleet, t: Timing) -> dict[str, Any]:
    """4 workers, then SIGTERM to 2 of them."""
    for w in ("w1", "w2", "w3", "w4"):
        f.start_worker(w)
    timeouts: list[str] = []
    everyone = {"w1", "w2", "w3", "w4"}
    wait_for(f, t, "every worker's first record", lambda: everyone <= workers_since(f, 0.0), timeouts)
    time.sleep(t.warmup)
    owners = f.last_owners(time.time())
    signals = {w: f.signal(w, signal.SIGTERM) for w in ("w3", "w4")}
    codes = {w: f.wait_exit(w) for w in ("w3", "w4")}
    time.sleep(t.settle)
    return {
        "planned": True,
        "signals": signals,
        "owners": {w: owners.get(w, []) for w in signals},
        "exit_codes": codes,
        "timeouts": timeouts,
    }


def rolling_restart(f: Fleet, t: Timing) -> dict[str, Any]:
    """2 workers replaced one by one: start the new one, let it be seen, SIGTERM the old one."""
    f.start_worker("old1")
    f.start_worker("old2")
    time.sleep(t.warmup)
    signals: dict[str, float] = {}
    owners_at: dict[str, list[str]] = {}
    codes: dict[str, int] = {}
    for old, new in (("old1", "new1"), ("old2", "new2")):
        f.start_worker(new)
        f.wait_registered(new)
        time.sleep(2 * f.settings.scan_interval + 0.5)  # the old worker has seen the new one alive
        w = signal_and_watch(f, old, signal.SIGTERM)
        signals.update(w["signals"])
        owners_at.update(w["owners"])
        codes[old] = f.wait_exit(old)
        time.sleep(3)
    time.sleep(t.settle)
    return {"planned": True, "signals": signals, "owners": owners_at, "exit_codes": codes}
