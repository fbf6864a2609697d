"""A discrete-event fleet simulator: the real ``Coordinator`` and ``Effects`` of each worker over the fleet's
in-memory tables, billed at the repository seam (``metered.py``). No threads and no sleeping: a heap of
wake-ups, each DynamoDB request taking ``request_latency`` simulated seconds."""

from __future__ import annotations

import contextlib
import heapq
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from consumer.config import LeaseConfig, StreamSpec, WorkerConfig
from consumer.errors import CheckpointRejectedError
from consumer.leases.liveness import OwnValidity
from consumer.leases.memory import InMemoryTables
from consumer.leases.model import Lease, WorkerItem
from consumer.lifecycle.coordinator import Coordinator
from consumer.lifecycle.effects import Effects, ShardRunners
from consumer.lifecycle.messages import Event, Outcome, ShardFinished, Stop
from consumer.lifecycle.processor import ShutdownReason
from consumer.metrics.sink import InMemoryMetrics
from consumer.records import Position
from consumer.retrieval.memory import InMemoryKinesis
from tools.coordination.billing import Ledger
from tools.coordination.metered import MeteredTables

__all__ = ["FleetSim", "SimSettings"]

STREAM = "bench-coordination-sim000"  # as long as the real run's stream name: the same item sizes
LEASE_TABLE = "sim-leases"
CHECKPOINT_TABLE = "sim-checkpoints"
WALL_EPOCH_MS = 1_700_000_000_000  # simulated wall time starts here (the repository stamps it on items)


@dataclass(frozen=True)
class SimSettings:
    """The coordinator's lease settings and the simulated costs of the world around it."""

    lease: LeaseConfig = field(default_factory=LeaseConfig)
    request_latency: float = 0.005  # simulated seconds per DynamoDB request
    drain: float = 0.05  # a stopped shard consumer reports this long after the Stop
    seed: int = 1


@dataclass
class SimClock:
    """Simulated time: monotonic seconds from 0, and a wall clock that moves with it."""

    now: float = 0.0

    def monotonic(self) -> float:
        return self.now

    def wall_ms(self) -> int:
        return WALL_EPOCH_MS + int(self.now * 1000)


@dataclass
class ConsumptionLog:
    """Who consumes which shard, fleet-wide, and every breach of "one consumer per shard at a time"."""

    clock: SimClock
    consumers: dict[str, dict[str, tuple[int, OwnValidity]]] = field(default_factory=dict)  # key -> worker
    per_worker: dict[str, int] = field(default_factory=dict)
    starts: list[tuple[float, str, str]] = field(default_factory=list)  # (t, key, worker)
    violations: list[str] = field(default_factory=list)

    def start(self, key: str, worker: str, epoch: int, validity: OwnValidity) -> None:
        """``worker`` starts consuming ``key``: a breach if another may still deliver (its window is open)."""
        holders = self.consumers.setdefault(key, {})
        for other, (other_epoch, other_validity) in holders.items():
            if other != worker and other_validity.valid():
                self.violations.append(
                    f"t={self.clock.now:.3f} {key}: {worker} (epoch {epoch}) started while {other} "
                    f"(epoch {other_epoch}) still consumes with {other_validity.remaining():.2f}s of validity"
                )
        if worker not in holders:
            self.per_worker[worker] = self.per_worker.get(worker, 0) + 1
        holders[worker] = (epoch, validity)
        self.starts.append((self.clock.now, key, worker))

    def finish(self, key: str, worker: str) -> None:
        """``worker`` no longer consumes ``key``."""
        holders = self.consumers.get(key, {})
        if holders.pop(worker, None) is not None:
            self.per_worker[worker] -= 1


def _no_processor() -> Any:
    raise RuntimeError("the simulator runs no record processor")


class SimWorker:
    """One worker: ``Worker``'s loop around the real coordinator and effects, stepped by the simulator. Its
    shard consumers are stand-ins: Start reads the checkpoint and consumes; Stop drains, checkpoints (when asked
    to stop, not when the lease was lost) and reports ``ShardFinished`` after ``drain`` seconds."""

    def __init__(self, sim: FleetSim, worker_id: str) -> None:
        self.id = worker_id
        self.sim = sim
        lease, spec = sim.settings.lease, StreamSpec(STREAM, _no_processor)
        cfg = WorkerConfig("sim", LEASE_TABLE, CHECKPOINT_TABLE, (spec,), worker_id, lease)
        self.validity = OwnValidity(sim.clock, lease.owner_validity)
        self.coordinator = Coordinator(cfg, sim.clock.monotonic())
        shards, metrics = ShardRunners(self.start_shard, self.stop_shard), InMemoryMetrics()
        self.effects = Effects(
            worker_id, sim.tables, sim.kinesis, (STREAM,), shards, self.validity, metrics, sim.clock
        )
        self.running: dict[str, Lease] = {}
        self.position = 0  # of the last checkpoint it wrote
        self.pending: list[Event] = []
        self.wake_at = float("inf")

    def start_shard(self, lease: Lease) -> None:
        """Resume from the checkpoint (as the real consumer reads it) and consume."""
        self.sim.tables.get(lease.stream, lease.shard_id)
        self.running[lease.key] = lease
        self.sim.log.start(lease.key, self.id, lease.epoch, self.validity)

    def stop_shard(self, stop: Stop) -> None:
        """Drain, then report the shard finished."""
        lease = self.running.get(stop.key)
        if lease is not None:
            self.sim.later(self.sim.settings.drain, lambda: self._finished(lease, stop.reason))

    def _finished(self, lease: Lease, reason: ShutdownReason) -> None:
        if self.running.pop(lease.key, None) is None:
            return
        requested = reason is ShutdownReason.REQUESTED
        if requested:  # the final checkpoint; refused if the lease moved on (the table tells the coordinator)
            self.position += 1
            with contextlib.suppress(CheckpointRejectedError):
                position = Position(f"{self.position:021d}")
                self.sim.tables.save(lease.stream, lease.shard_id, lease.epoch, position)
        self.sim.log.finish(lease.key, self.id)
        self.hear(ShardFinished(lease.key, lease.epoch, Outcome.STOPPED if requested else Outcome.LOST))

    def hear(self, event: Event) -> None:
        """An event for the next step, now."""
        self.pending.append(event)
        self.sim.wake(self, self.sim.clock.now)

    def step(self) -> None:
        """One turn of ``Worker._loop``: step, run the actions, feed their events back."""
        now = self.sim.clock.now
        events, self.pending = self.pending, []
        before = self.sim.tables.requests
        actions = self.coordinator.step(now, events)
        results = [e for a in actions if (e := self.effects.run(a)) is not None]
        if self.coordinator.done:
            return
        spent = (self.sim.tables.requests - before) * self.sim.settings.request_latency
        if results:
            self.pending.extend(results)
            self.sim.wake(self, now + max(spent, 1e-4))
        else:
            self.sim.wake(self, max(now + spent, self.coordinator.next_due()))


class FleetSim:
    """A fleet over one stream of ``shards`` shards; workers join with :meth:`add_worker`."""

    def __init__(self, shards: int, settings: SimSettings | None = None) -> None:
        self.settings = settings or SimSettings()
        random.seed(self.settings.seed)  # the coordinator's backoff jitter
        self.rng = random.Random(self.settings.seed)
        self.clock = SimClock()
        self.ledger = Ledger(self.clock.monotonic)
        tables = InMemoryTables(clock=self.clock)
        self.tables = MeteredTables(tables, self.ledger, LEASE_TABLE, CHECKPOINT_TABLE)
        self.kinesis = InMemoryKinesis()  # discovery only: the runners stand in for reading
        self.kinesis.create_stream(STREAM, shards)
        self.shards = shards
        self.log = ConsumptionLog(self.clock)
        self.workers: dict[str, SimWorker] = {}
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self.steps = 0

    def later(self, delay: float, fn: Callable[[], None]) -> None:
        """Run ``fn`` ``delay`` simulated seconds from now."""
        heapq.heappush(self._heap, (self.clock.now + delay, next(self._seq), fn))

    def wake(self, worker: SimWorker, at: float) -> None:
        """Step ``worker`` at ``at``, unless it is due earlier."""
        if worker.coordinator.done or at >= worker.wake_at:
            return
        worker.wake_at = at

        def fire() -> None:
            if worker.coordinator.done or worker.wake_at != at:
                return  # superseded by an earlier wake-up
            worker.wake_at = float("inf")
            self.steps += 1
            worker.step()

        heapq.heappush(self._heap, (at, next(self._seq), fire))

    def run_until(self, t: float, stop: Callable[[], bool] | None = None, every: float = 0.05) -> bool:
        """Advance to ``t``; with ``stop``, return True as soon as it holds (checked every ``every`` seconds
        of simulated time, and at ``t``)."""
        checked = self.clock.now
        while self._heap and self._heap[0][0] <= t:
            at, _, fn = heapq.heappop(self._heap)
            self.clock.now = max(self.clock.now, at)
            fn()
            if stop is not None and self.clock.now - checked >= every:
                checked = self.clock.now
                if stop():
                    return True
        self.clock.now = max(self.clock.now, t)
        return stop is not None and stop()

    def add_worker(self, worker_id: str, at: float) -> None:
        """Start a worker at ``at``: it registers (the leader's discovery creates the leases), then steps."""

        def boot() -> None:
            w = self.workers[worker_id] = SimWorker(self, worker_id)
            self.tables.register_worker(
                WorkerItem(worker_id, started_ms=self.clock.wall_ms(), streams=frozenset({STREAM}))
            )
            self.wake(w, self.clock.now + self.settings.request_latency * 3)  # its three boot requests

        self.later(max(0.0, at - self.clock.now), boot)

    def fair(self, workers: list[str]) -> bool:
        """Every shard consumed by exactly one worker, and each of ``workers`` holding its fair share."""
        held = [self.log.per_worker.get(w, 0) for w in workers]
        if not workers or any(w not in self.workers for w in workers):
            return False
        consumed = (1 for holders in self.log.consumers.values() if holders)
        if sum(held) != self.shards or sum(consumed) != self.shards:
            return False
        return all(self.shards // len(workers) <= n <= -(-self.shards // len(workers)) for n in held)
