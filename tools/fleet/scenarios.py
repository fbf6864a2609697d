"""The fleet benchmark's scenarios, each driving one :class:`tools.fleet.runner.Fleet`, and
:func:`run_scenario`; the repeated ones repeat their transition until each kind of hand-off happened
``Timing.handoffs`` times, so that p99 is a percentile and not the maximum."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Collection
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from consumer.checkpoint.dynamodb import DynamoDBCheckpointStore
from consumer.errors import CheckpointRejectedError
from consumer.records import Position
from tools.demo_report import ownership_figure, save
from tools.fleet import analysis
from tools.fleet.runner import Fleet, FleetSettings, poll

__all__ = [
    "SCENARIOS",
    "Log",
    "Timing",
    "every_shard_since",
    "form",
    "formed",
    "run_scenario",
    "wait_for",
]


@dataclass(frozen=True)
class Timing:
    """How long a scenario holds on beyond the events it waits on (the tests: 0 s), and how it waits."""

    warmup: float = 12.0  # held once the fleet formed (every shard delivering, each worker its share)
    settle: float = 12.0  # held once a transition finished (every shard delivering from its new owners)
    steady_window: float = 60.0
    handoffs: int = 100  # planned hand-offs wanted per kind in the repeated scenarios
    max_cycles: int = 30
    step_timeout: float = 60.0  # the longest a wait may take before it is counted as timed out
    poll: float = 0.3  # how often a wait looks at the journals again


Scenario = Callable[[Fleet, Timing], dict[str, Any]]


@dataclass
class Log:
    """A scenario's signals (with the shards each worker had delivered last) and exit codes."""

    signals: dict[str, float] = field(default_factory=dict)
    owners: dict[str, list[str]] = field(default_factory=dict)
    exit_codes: dict[str, int] = field(default_factory=dict)

    def signal(self, f: Fleet, workers: list[str], sig: signal.Signals) -> float:
        """Send ``sig`` to ``workers``; returns when the last one was sent."""
        owners = f.last_owners(time.time())
        for w in workers:
            self.signals[w] = f.signal(w, sig)
            self.owners[w] = owners.get(w, [])
        return self.signals[workers[-1]]

    def stop(self, f: Fleet, workers: list[str]) -> float:
        """SIGTERM ``workers`` and wait for their exit; returns when the last one was signalled."""
        t = self.signal(f, workers, signal.SIGTERM)
        for w in workers:
            self.exit_codes[w] = f.wait_exit(w)
        return t


def wait_for(f: Fleet, t: Timing, what: str, cond: Callable[[], bool]) -> None:
    """Poll ``cond`` until it holds, for at most ``t.step_timeout``; a time-out is noted in ``f.timeouts``."""
    if poll(cond, t.step_timeout, t.poll):
        f.mark(what)
    else:
        f.mark(f"timed out waiting for {what}")
        f.timeouts.append(what)


def formed(f: Fleet, workers: set[str]) -> bool:
    """Every shard's latest delivery is by one of ``workers``, each with its share (even, +1 for some)."""
    owners = f.last_owners(time.time())
    share, extra = divmod(f.settings.shards, len(workers))
    counts = [len(owners.get(w, [])) for w in workers]
    return sum(counts) >= f.settings.shards and all(share <= n <= share + (extra > 0) for n in counts)


def form(f: Fleet, t: Timing, workers: Collection[str]) -> None:
    """Start ``workers``, wait until they formed a fleet, then hold ``t.warmup``."""
    for w in sorted(workers):
        f.start_worker(w)
    wait_for(f, t, f"the fleet formed: {', '.join(sorted(workers))}", partial(formed, f, set(workers)))
    time.sleep(t.warmup)


def every_shard_since(f: Fleet, since: float, workers: set[str]) -> bool:
    """Every shard has delivered a record after ``since``, by one of ``workers``."""
    return len({d.shard for d in f.deliveries() if d.t > since and d.worker in workers}) >= f.settings.shards


def _repeat(
    f: Fleet, t: Timing, log: Log, kinds: dict[str, analysis.Kind], step: Callable[[int], None]
) -> dict[str, Any]:
    """Run ``step`` until every kind counts ``t.handoffs`` moves, at most ``t.max_cycles`` times."""
    for cycle in range(1, t.max_cycles + 1):
        step(cycle)
        moves = analysis.handoff_moves(analysis.ownership_runs(f.deliveries()))
        if all(len(kind.of(moves)) >= t.handoffs for kind in kinds.values()):
            break
    return {**asdict(log), "planned": True, "cycles": cycle, "handoff_kinds": kinds}


def scale_cycles(f: Fleet, t: Timing) -> dict[str, Any]:
    """2 workers; repeatedly start 2 more (scale-out), wait for balance, SIGTERM them (scale-in)."""
    base, log = {"w1", "w2"}, Log()
    form(f, t, base)
    added: list[str] = []  # every worker started by a cycle, so far: the kinds count moves to and from them
    since = time.time()
    kinds = {
        "scale_out": analysis.Kind(since, sources=base, targets=added),
        "scale_in": analysis.Kind(since, sources=added),
    }
    share = f.settings.shards // 4

    def cycle(n: int) -> None:
        new = [f"w3c{n}", f"w4c{n}"]
        for w in new:
            f.start_worker(w)
        added.extend(new)

        def balanced() -> bool:
            owners = f.last_owners(time.time())
            return all(len(owners.get(w, [])) >= share for w in new)

        wait_for(f, t, f"cycle {n}: new workers own their share", balanced)
        stopped = log.stop(f, new)
        back = partial(every_shard_since, f, stopped, base)
        wait_for(f, t, f"cycle {n}: base workers own every shard", back)

    return _repeat(f, t, log, kinds, cycle)


def rolling_restart_cycles(f: Fleet, t: Timing) -> dict[str, Any]:
    """2 workers; repeatedly start a replacement, let it be seen, SIGTERM the oldest (as ECS deploys)."""
    live, log = ["r0a", "r0b"], Log()
    form(f, t, live)

    def step(n: int) -> None:
        new, old = f"r{n}", live.pop(0)
        f.start_worker(new)
        f.wait_registered(new)
        time.sleep(2 * f.settings.scan_interval + 0.5)  # the old workers have seen the new one alive
        stopped = log.stop(f, [old])
        live.append(new)
        wait_for(f, t, f"step {n}: every shard flows", partial(every_shard_since, f, stopped, set(live)))

    return _repeat(f, t, log, {"rolling_restart": analysis.Kind(time.time())}, step)


def crash(f: Fleet, t: Timing, *, leader: bool = False) -> dict[str, Any]:
    """SIGKILL one of three workers (``leader``: the leader, the worst case: the leadership moves first)."""
    workers, log = {"w1", "w2", "w3"}, Log()
    form(f, t, workers)
    victim = f.leader() if leader else "w3"
    if victim not in workers:
        f.timeouts.append(f"no leader among the workers ({victim})")
        victim = "w3"
    killed = log.signal(f, [victim], signal.SIGKILL)
    f.wait_exit(victim)
    taken = partial(every_shard_since, f, killed, workers - {victim})
    wait_for(f, t, "the survivors deliver every shard", taken)
    time.sleep(t.settle)
    return {**asdict(log), "planned": False, "victim": victim, "victim_led": leader}


def zombie(f: Fleet, t: Timing) -> dict[str, Any]:
    """SIGSTOP a worker until w1 took its shards over, then SIGCONT it: it must deliver nothing under its old
    epochs, hear it lost those leases and have a late checkpoint refused."""
    form(f, t, {"w1", "zombie"})
    old_epochs = {d.shard: d.epoch for d in f.deliveries() if d.worker == "zombie"}
    held = {s: old_epochs[s] for s in f.last_owners(time.time()).get("zombie", [])}  # at the pause
    stopped = f.signal("zombie", signal.SIGSTOP)

    def taken_over() -> bool:  # w1 delivers every shard the zombie held, under a newer epoch
        newer = {d.shard for d in f.deliveries() if d.worker == "w1" and d.epoch > held.get(d.shard, 0)}
        return set(held) <= newer

    wait_for(f, t, "w1 owns the paused zombie's shards", taken_over)
    resumed = f.signal("zombie", signal.SIGCONT)

    def fenced() -> bool:  # the resumed zombie was told (lease_lost) of every lease it held at the pause
        lost = {(e["s"], int(e["e"])) for e in f.journal() if e["k"] == "lease_lost" and e["w"] == "zombie"}
        return set(held.items()) <= lost

    wait_for(f, t, "the zombie lost its old leases", fenced)
    time.sleep(t.settle)
    # After SIGCONT: a process runs on for a moment after kill(SIGSTOP) returns.
    after = [d for d in f.deliveries() if d.worker == "zombie" and d.t >= resumed]
    rejected = None
    if old_epochs:
        shard, epoch = next(iter(old_epochs.items()))
        store = DynamoDBCheckpointStore(f.ddb, f.checkpoint_table)
        try:
            store.save(f.stream, shard, epoch, Position("9" * 50))
            rejected = False
        except CheckpointRejectedError as exc:
            rejected = exc.stale_epoch
    stale = sum(old_epochs.get(d.shard) == d.epoch for d in after)
    return {
        "planned": False,
        "zombie_shards_before_pause": len(old_epochs),
        "zombie_deliveries_under_old_epochs_after_pause": stale,
        "zombie_late_checkpoint_rejected": rejected,
        "paused_s": round(resumed - stopped, 3),
    }


def shard_split(f: Fleet, t: Timing) -> dict[str, Any]:
    """Split a shard under load: both children must be read, and only after their parent ended."""
    form(f, t, {"w1", "w2"})
    shards = f.kinesis.list_shards(StreamName=f.stream)["Shards"]
    parent = shards[0]["ShardId"]
    low, high = (int(shards[0]["HashKeyRange"][k]) for k in ("StartingHashKey", "EndingHashKey"))
    f.mark(f"split {parent}")
    f.kinesis.split_shard(StreamName=f.stream, ShardToSplit=parent, NewStartingHashKey=str((low + high) // 2))
    f.wait_active()
    kids = {s["ShardId"] for s in f.kinesis.list_shards(StreamName=f.stream)["Shards"]}
    kids -= {s["ShardId"] for s in shards}

    def delivering() -> bool:
        return kids <= {d.shard for d in f.deliveries()}

    wait_for(f, t, "both children delivering", delivering)
    time.sleep(t.settle)
    ds = f.deliveries()
    parent_last = max((d.t for d in ds if d.shard == parent), default=0.0)
    kid_first = min((d.t for d in ds if d.shard in kids), default=float("inf"))
    early = int(kid_first < parent_last)
    return {"planned": False, "children": sorted(kids), "children_before_parent_end": early}


def steady(f: Fleet, t: Timing) -> dict[str, Any]:
    """2 workers on their own for ``t.steady_window`` (the cost figures)."""
    form(f, t, {"w1", "w2"})
    time.sleep(t.steady_window)
    return {"planned": False, "steady_window_s": t.steady_window}


#: name -> (scenario, FleetSettings overrides), all run by ``make bench`` (the tests' own: tests/support).
SCENARIOS: dict[str, tuple[Scenario, dict[str, Any]]] = {
    # 16 shards at 10 records/s each: each repetition moves 8 shards (a worker start takes seconds here).
    "scale_cycles": (scale_cycles, {"shards": 16, "rate": 160.0}),
    "rolling_restart_cycles": (rolling_restart_cycles, {"shards": 16, "rate": 160.0}),
    "crash_sigkill": (crash, {}),
    "crash_leader_sigkill": (partial(crash, leader=True), {}),
    "zombie_sigstop": (zombie, {}),
    "shard_split": (shard_split, {"shards": 4}),
    "steady_state": (steady, {}),
}


def run_scenario(
    name: str,
    endpoints: Any,
    workdir: Path,
    settings: FleetSettings,
    timing: Timing,
    scenario: Scenario | None = None,
) -> dict[str, Any]:
    """Run scenario ``name`` (or ``scenario``, without overrides) on its own fleet; returns its figures."""
    fn, overrides = SCENARIOS[name] if scenario is None else (scenario, {})
    settings = replace(settings, **overrides)
    fleet = Fleet(endpoints, workdir / name, settings, name.split("_", maxsplit=1)[0])
    print(f"scenario {name}: {settings.shards} shards, lease {settings.lease_duration}s", flush=True)
    with fleet:
        extra = fn(fleet, timing)
        fleet.stop_producer()
        drained = fleet.wait_drained()
    deliveries = fleet.deliveries()
    produced = [(s, q) for s, q, _ in fleet.produced]
    result = analysis.analyze(produced, deliveries, extra.pop("signals", None), extra.pop("owners", None))
    if kinds := extra.pop("handoff_kinds", None):
        gaps, parts = analysis.handoff_figures(deliveries, kinds, fleet.milestones())
        result["handoff_gap_by_kind_s"], result["handoff_phases_by_kind_s"] = gaps, parts
    since = timing.warmup if name == "steady_state" else 0.0
    result |= extra | {"timeouts": fleet.timeouts} | analysis.producer_figures(fleet.produced)
    result |= analysis.dynamodb_cost(fleet.worker_stats(), settings.shards, since)
    result |= {"shards": settings.shards, "rate": settings.rate, "drained": drained}
    png = workdir / f"{name}.png"
    runs = analysis.ownership_runs(deliveries)
    save(ownership_figure(runs, fleet.events, fleet.began, f"{name}: shard ownership"), png)
    return result | {"duration_s": round(time.time() - fleet.began, 1), "timeline_png": str(png)}
