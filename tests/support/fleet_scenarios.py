"""The fleet scenarios only the tests run: one scale-out, one scale-in and one rolling restart, each a
single planned transition (the benchmark repeats them: ``tools.fleet.scenarios``). Each step waits on the
event it stands for (the fleet formed, the new workers own their share, every shard flows again from the
workers meant to own it), bounded by ``Timing.step_timeout``; a wait that times out is noted in the fleet's
``timeouts``."""

from __future__ import annotations

from dataclasses import asdict
from functools import partial
from typing import Any

from tools.fleet.runner import Fleet
from tools.fleet.scenarios import Log, Timing, every_shard_since, form, formed, wait_for

__all__ = ["rolling_restart", "scale_in", "scale_out"]


def scale_out(f: Fleet, t: Timing) -> dict[str, Any]:
    """2 workers, then 2 more."""
    form(f, t, {"w1", "w2"})
    f.start_worker("w3")
    f.start_worker("w4")
    everyone = {"w1", "w2", "w3", "w4"}
    wait_for(f, t, "the new workers own their share", partial(formed, f, everyone))
    return {"planned": True}


def scale_in(f: Fleet, t: Timing) -> dict[str, Any]:
    """4 workers, then SIGTERM to 2 of them."""
    log = Log()
    form(f, t, {"w1", "w2", "w3", "w4"})
    stopped = log.stop(f, ["w3", "w4"])
    back = partial(every_shard_since, f, stopped, {"w1", "w2"})
    wait_for(f, t, "w1 and w2 deliver every shard", back)
    return {**asdict(log), "planned": True}


def rolling_restart(f: Fleet, t: Timing) -> dict[str, Any]:
    """2 workers replaced one by one: start the new one, wait until it owns its share (the fleet counts it
    live), SIGTERM the old one, wait until every shard flows again from the workers left."""
    live = {"old1", "old2"}
    log = Log()
    form(f, t, live)
    for old, new in (("old1", "new1"), ("old2", "new2")):
        f.start_worker(new)
        live.add(new)
        wait_for(f, t, f"{new} owns its share", partial(formed, f, live))
        stopped = log.stop(f, [old])
        live.discard(old)
        flows = partial(every_shard_since, f, stopped, set(live))
        wait_for(f, t, f"every shard flows after {old}", flows)
    return {**asdict(log), "planned": True}
