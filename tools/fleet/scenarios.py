"""The fleet benchmark's scenarios: each drives one :class:`tools.fleet.runner.Fleet` and returns extras.

Repeated scenarios (``scale_cycles``, ``rolling_restart_cycles``) repeat their planned transition until each
kind of hand-off has happened ``Timing.handoffs`` times, so that p99 is a percentile and not the maximum.
They return ``handoff_kinds``: per kind, which moves count (after ``since``; from or to which workers).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from consumer.checkpoint.dynamodb import DynamoDBCheckpointStore
from consumer.errors import CheckpointRejectedError
from consumer.records import Position
from tools.fleet.analysis import Move, handoff_moves, ownership_runs
from tools.fleet.runner import Fleet

__all__ = ["SCENARIOS", "Scenario", "Timing", "count_kind", "formed", "hold", "wait_for", "wait_formed"]


@dataclass(frozen=True)
class Timing:
    """How long a scenario holds on beyond the events it waits on (the tests hold 0 s; ``make bench`` holds
    longer so that its cost figures cover a steady fleet)."""

    #: Held once the fleet has formed (every shard delivering, each worker owning its share).
    warmup: float = 12.0
    #: Held once a transition has finished (every shard delivering again, from the workers meant to own it).
    settle: float = 12.0
    steady_window: float = 60.0
    #: Planned hand-offs wanted per kind in the repeated scenarios, and a bound on their repetitions.
    handoffs: int = 100
    max_cycles: int = 30
    #: How long one step of a repeated scenario may take to settle before it is counted as timed out.
    step_timeout: float = 60.0
    #: How often a wait looks at the journals again.
    poll: float = 0.3


Scenario = Callable[[Fleet, Timing], dict[str, Any]]


def count_kind(moves: list[Move], kind: dict[str, Any]) -> list[Move]:
    """The moves of one hand-off kind: after ``since``, and from/to the listed workers when given."""
    since = float(kind.get("since", 0.0))
    sources, targets = kind.get("from"), kind.get("to")
    return [
        m
        for m in moves
        if m.at >= since
        and (sources is None or m.source in sources)
        and (targets is None or m.target in targets)
        and not (kind.get("exclude_from") and m.source in kind["exclude_from"])
    ]


def _moves(f: Fleet) -> list[Move]:
    return handoff_moves(ownership_runs(f.deliveries()))


def wait_for(f: Fleet, t: Timing, what: str, cond: Callable[[], bool], timeouts: list[str]) -> None:
    """Poll ``cond`` until it holds, for at most ``t.step_timeout``; a time-out is noted in ``timeouts``."""
    deadline = time.monotonic() + t.step_timeout
    while not cond():
        if time.monotonic() > deadline:
            f.mark(f"timed out waiting for {what}")
            timeouts.append(what)
            return
        time.sleep(t.poll)
    f.mark(what)


def hold(seconds: float) -> None:
    """Hold on for a benchmark's extra window (``Timing.warmup``/``settle``); the tests hold 0 s."""
    if seconds > 0:
        time.sleep(seconds)


def formed(f: Fleet, workers: set[str]) -> bool:
    """The fleet formed: every shard's latest delivery is by one of ``workers``, and each of them delivers its
    share (the lease planner's: the shards divided evenly, one more for some)."""
    owners = f.last_owners(time.time())
    share, extra = divmod(f.settings.shards, len(workers))
    counts = [len(owners.get(w, [])) for w in workers]
    return sum(counts) >= f.settings.shards and all(share <= n <= share + (extra > 0) for n in counts)


def wait_formed(f: Fleet, t: Timing, workers: set[str], timeouts: list[str]) -> None:
    """Wait for :func:`formed`, then hold ``t.warmup``."""
    wait_for(f, t, f"the fleet formed: {', '.join(sorted(workers))}", partial(formed, f, workers), timeouts)
    hold(t.warmup)


def _all_shards_since(f: Fleet, since: float, workers: set[str]) -> bool:
    """Every shard has delivered a record after ``since``, by one of ``workers``."""
    fresh = {d.shard for d in f.deliveries() if d.t > since and d.worker in workers}
    return len(fresh) >= f.settings.shards


def signal_and_watch(f: Fleet, worker: str, sig: signal.Signals) -> dict[str, Any]:
    owners = f.last_owners(time.time())
    t = f.signal(worker, sig)
    return {"signals": {worker: t}, "owners": {worker: owners.get(worker, [])}}


def scale_cycles(f: Fleet, t: Timing) -> dict[str, Any]:
    """2 workers; repeatedly start 2 more (scale-out), wait for balance, SIGTERM them (scale-in)."""
    base = {"w1", "w2"}
    for w in sorted(base):
        f.start_worker(w)
    timeouts: list[str] = []
    wait_formed(f, t, base, timeouts)
    since = time.time()
    added: list[str] = []
    signals: dict[str, float] = {}
    owners: dict[str, list[str]] = {}
    codes: dict[str, int] = {}
    share = f.settings.shards // 4
    kinds: dict[str, dict[str, Any]] = {}
    for cycle in range(1, t.max_cycles + 1):
        new = [f"w3c{cycle}", f"w4c{cycle}"]
        for w in new:
            f.start_worker(w)
        added += new

        def balanced(new: list[str] = new) -> bool:
            now_owners = f.last_owners(time.time())
            return all(len(now_owners.get(w, [])) >= share for w in new)

        wait_for(f, t, f"cycle {cycle}: new workers own their share", balanced, timeouts)
        now_owners = f.last_owners(time.time())
        for w in new:
            signals[w] = f.signal(w, signal.SIGTERM)
            owners[w] = now_owners.get(w, [])
        stopped = time.time()
        for w in new:
            codes[w] = f.wait_exit(w)
        wait_for(
            f,
            t,
            f"cycle {cycle}: base workers own every shard",
            partial(_all_shards_since, f, stopped, base),
            timeouts,
        )
        kinds = {
            "scale_out": {"since": since, "to": added, "exclude_from": added},
            "scale_in": {"since": since, "from": added},
        }
        moves = _moves(f)
        if all(len(count_kind(moves, k)) >= t.handoffs for k in kinds.values()):
            break
    return {
        "planned": True,
        "cycles": cycle,
        "signals": signals,
        "owners": owners,
        "exit_codes": codes,
        "step_timeouts": timeouts,
        "handoff_kinds": kinds,
    }


def rolling_restart_cycles(f: Fleet, t: Timing) -> dict[str, Any]:
    """2 workers; repeatedly start a replacement, let it be seen, SIGTERM the oldest (an ECS rolling deploy)."""
    live = ["r0a", "r0b"]
    for w in live:
        f.start_worker(w)
    timeouts: list[str] = []
    wait_formed(f, t, set(live), timeouts)
    since = time.time()
    signals: dict[str, float] = {}
    owners: dict[str, list[str]] = {}
    codes: dict[str, int] = {}
    kinds = {"rolling_restart": {"since": since}}
    for step in range(1, t.max_cycles + 1):
        new, old = f"r{step}", live[0]
        f.start_worker(new)
        f.wait_registered(new)
        time.sleep(2 * f.settings.scan_interval + 0.5)  # the old workers have seen the new one alive
        watched = signal_and_watch(f, old, signal.SIGTERM)
        signals.update(watched["signals"])
        owners.update(watched["owners"])
        stopped = time.time()
        codes[old] = f.wait_exit(old)
        live = [*live[1:], new]
        wait_for(
            f,
            t,
            f"step {step}: every shard flows",
            partial(_all_shards_since, f, stopped, set(live)),
            timeouts,
        )
        if len(count_kind(_moves(f), kinds["rolling_restart"])) >= t.handoffs:
            break
    return {
        "planned": True,
        "cycles": step,
        "signals": signals,
        "owners": owners,
        "exit_codes": codes,
        "step_timeouts": timeouts,
        "handoff_kinds": kinds,
    }


def workers_since(f: Fleet, since: float) -> set[str]:
    return {d.worker for d in f.deliveries() if d.t > since}


def crash(f: Fleet, t: Timing, *, leader: bool = False) -> dict[str, Any]:
    """SIGKILL one of three workers (``leader``: the one that leads, the worst case: another worker must
    first take the leadership over, then reassign the dead worker's leases)."""
    workers = {"w1", "w2", "w3"}
    for w in sorted(workers):
        f.start_worker(w)
    timeouts: list[str] = []
    wait_formed(f, t, workers, timeouts)
    victim = f.leader() if leader else "w3"
    if victim not in workers:
        timeouts.append(f"no leader among the workers ({victim})")
        victim = "w3"
    watched = signal_and_watch(f, victim, signal.SIGKILL)
    killed = time.time()
    f.wait_exit(victim)
    survivors = workers - {victim}
    wait_for(
        f, t, "the survivors deliver every shard", partial(_all_shards_since, f, killed, survivors), timeouts
    )
    hold(t.settle)
    return {"planned": False, "victim": victim, "victim_led": leader, "timeouts": timeouts, **watched}


def crash_leader(f: Fleet, t: Timing) -> dict[str, Any]:
    return crash(f, t, leader=True)


def zombie(f: Fleet, t: Timing) -> dict[str, Any]:
    f.start_worker("w1")
    f.start_worker("zombie")
    timeouts: list[str] = []
    wait_formed(f, t, {"w1", "zombie"}, timeouts)
    before = [d for d in f.deliveries() if d.worker == "zombie"]
    old_epochs = {d.shard: d.epoch for d in before}
    held = {s: old_epochs[s] for s in f.last_owners(time.time()).get("zombie", [])}  # at the pause
    stopped = f.signal("zombie", signal.SIGSTOP)

    def taken_over() -> bool:  # w1 delivers every shard the zombie held, under a newer epoch
        newer = {d.shard for d in f.deliveries() if d.worker == "w1" and d.epoch > held.get(d.shard, 0)}
        return set(held) <= newer

    wait_for(f, t, "w1 owns the paused zombie's shards", taken_over, timeouts)
    resumed = f.signal("zombie", signal.SIGCONT)

    def fenced() -> bool:  # the resumed zombie was told (lease_lost) of every lease it held at the pause
        lost = {(e["s"], int(e["e"])) for e in f.journal() if e["k"] == "lease_lost" and e["w"] == "zombie"}
        return set(held.items()) <= lost

    wait_for(f, t, "the zombie lost its old leases", fenced, timeouts)
    hold(t.settle)
    # Deliveries after SIGCONT (a process keeps running for a moment after kill(SIGSTOP) returns, so records
    # delivered in that moment are from before the pause).
    after = [d for d in f.deliveries() if d.worker == "zombie" and d.t >= resumed]
    stale = [d for d in after if old_epochs.get(d.shard) == d.epoch]
    rejected = None
    if old_epochs:
        shard, epoch = next(iter(old_epochs.items()))
        store = DynamoDBCheckpointStore(f.ddb, f.checkpoint_table)
        try:
            store.save(f.stream, shard, epoch, Position("9" * 50))
            rejected = False
        except CheckpointRejectedError as exc:
            rejected = exc.stale_epoch
    return {
        "planned": False,
        "timeouts": timeouts,
        "zombie_shards_before_pause": len(old_epochs),
        "zombie_deliveries_under_old_epochs_after_pause": len(stale),
        "zombie_late_checkpoint_rejected": rejected,
        "paused_s": round(resumed - stopped, 3),
    }


def shard_split(f: Fleet, t: Timing) -> dict[str, Any]:
    f.start_worker("w1")
    f.start_worker("w2")
    timeouts: list[str] = []
    wait_formed(f, t, {"w1", "w2"}, timeouts)
    shards = f.kinesis.list_shards(StreamName=f.stream)["Shards"]
    parent = shards[0]["ShardId"]
    low, high = (int(shards[0]["HashKeyRange"][k]) for k in ("StartingHashKey", "EndingHashKey"))
    f.mark(f"split {parent}")
    f.kinesis.split_shard(StreamName=f.stream, ShardToSplit=parent, NewStartingHashKey=str((low + high) // 2))
    f.wait_active()
    kids = [
        s["ShardId"]
        for s in f.kinesis.list_shards(StreamName=f.stream)["Shards"]
        if s.get("ParentShardId") == parent
    ]
    wait_for(
        f, t, "both children delivering", lambda: set(kids) <= {d.shard for d in f.deliveries()}, timeouts
    )
    hold(t.settle)
    ds = f.deliveries()
    parent_last = max((d.t for d in ds if d.shard == parent), default=0.0)
    kid_first = min((d.t for d in ds if d.shard in kids), default=float("inf"))
    return {
        "planned": False,
        "children": kids,
        "children_before_parent_end": int(kid_first < parent_last),
        "timeouts": timeouts,
    }


def steady(f: Fleet, t: Timing) -> dict[str, Any]:
    f.start_worker("w1")
    f.start_worker("w2")
    timeouts: list[str] = []
    wait_formed(f, t, {"w1", "w2"}, timeouts)
    hold(t.steady_window)
    return {"planned": False, "steady_window_s": t.steady_window, "timeouts": timeouts}


#: name -> (scenario, FleetSettings overrides), every one run by ``make bench`` (the single scale-out,
#: scale-in and rolling restart that tests/integration/test_fleet.py runs are in tests/support/).
SCENARIOS: dict[str, tuple[Scenario, dict[str, Any]]] = {
    # 16 shards at 10 records/s each: each repetition moves 8 shards (a worker start takes seconds here).
    "scale_cycles": (scale_cycles, {"shards": 16, "rate": 160.0}),
    "rolling_restart_cycles": (rolling_restart_cycles, {"shards": 16, "rate": 160.0}),
    "crash_sigkill": (crash, {}),
    "crash_leader_sigkill": (crash_leader, {}),
    "zombie_sigstop": (zombie, {}),
    "shard_split": (shard_split, {"shards": 4}),
    "steady_state": (steady, {}),
}
