"""A discrete-event fleet simulator: the project's real coordinator and effects, on simulated time.

Each simulated worker is ``consumer.lifecycle.coordinator.Coordinator`` (the pure step) plus
``consumer.lifecycle.effects.Effects`` over the in-memory lease repository and checkpoint store, shared by
the fleet and billed at the repository seam as DynamoDB bills the requests of the DynamoDB backends
(``tools.coordination.metered``). The shell mirrors
``consumer.lifecycle.worker.Worker``: register, read the table and create missing leases, then step, run the
actions, feed the resulting events back. No threads and no sleeping: a heap of wake-ups, each request
taking ``request_latency`` simulated seconds. Whatever protocol the coordinator implements is what is
measured; actions other than Start/Stop are left to ``Effects.run``.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from consumer.config import LeaseConfig, StreamSpec, WorkerConfig
from consumer.leases.liveness import OwnValidity
from consumer.leases.memory import InMemoryTables
from consumer.leases.model import WorkerItem
from consumer.lifecycle.coordinator import Coordinator
from consumer.lifecycle.effects import Effects, ShardRunners
from consumer.lifecycle.messages import Event, ShutdownRequested
from consumer.metrics.sink import InMemoryMetrics
from consumer.retrieval.memory import InMemoryKinesis
from tools.coordination.fakes import ConsumptionLog, SimClock, SimShardRunners
from tools.coordination.ledger import Ledger
from tools.coordination.metered import MeteredTables

__all__ = ["FleetSim", "SimSettings", "SimWorker"]

logger = logging.getLogger(__name__)

STREAM = "bench-coordination-sim000"  # as long as the real run's stream name: the same item sizes
LEASE_TABLE = "sim-leases"
CHECKPOINT_TABLE = "sim-checkpoints"


def _no_processor() -> Any:
    raise RuntimeError("the simulator runs no record processor")


@dataclass(frozen=True)
class SimSettings:
    lease: LeaseConfig = field(default_factory=LeaseConfig)
    request_latency: float = 0.005  # simulated seconds per DynamoDB request
    drain: float = 0.05  # a stopped shard consumer reports this long after the Stop
    seed: int = 1


class SimWorker:
    def __init__(self, sim: FleetSim, worker_id: str) -> None:
        self.id = worker_id
        self.sim = sim
        cfg = WorkerConfig(
            application="sim",
            lease_table=LEASE_TABLE,
            checkpoint_table=CHECKPOINT_TABLE,
            worker_id=worker_id,
            streams=(StreamSpec(STREAM, _no_processor),),
            lease=sim.settings.lease,
        )
        self.repo = sim.tables.repository()
        self.checkpoints = sim.tables.checkpoints()
        self.validity = OwnValidity(sim.clock, sim.settings.lease.owner_validity)
        self.runners = SimShardRunners(
            worker_id,
            STREAM,
            self.checkpoints,
            self.validity,
            sim.log,
            sim.later,
            self.hear,
            sim.settings.drain,
        )
        self.coordinator = Coordinator(cfg, sim.clock.monotonic())
        self.effects = Effects(
            worker_id,
            self.repo,
            sim.kinesis,
            (STREAM,),
            ShardRunners(self.runners.start, self.runners.stop),
            self.validity,
            InMemoryMetrics(),
            sim.clock,
        )
        self.pending: list[Event] = []
        self.done = False
        self.wake_at = float("inf")

    def hear(self, event: Event) -> None:
        self.pending.append(event)
        self.sim.wake(self, self.sim.clock.now)

    def boot(self) -> None:
        """``Worker.run`` before its loop: register (the leader's discovery creates the leases)."""
        self.repo.register_worker(
            WorkerItem(self.id, started_ms=self.sim.clock.wall_ms(), streams=frozenset({STREAM}))
        )

    def step(self) -> None:
        """One turn of ``Worker._loop``."""
        clock = self.sim.clock
        events, self.pending = self.pending, []
        before = self.sim.client_requests()
        actions = self.coordinator.step(clock.now, events)
        results = [e for a in actions if (e := self.effects.run(a)) is not None]
        if self.coordinator.done:
            self.done = True
            return
        spent = (self.sim.client_requests() - before) * self.sim.settings.request_latency
        if results:
            self.pending.extend(results)
            self.sim.wake(self, clock.now + max(spent, 1e-4))
        else:
            self.sim.wake(self, max(clock.now + spent, self.coordinator.next_due()))


class FleetSim:
    def __init__(self, shards: int, settings: SimSettings | None = None) -> None:
        self.settings = settings or SimSettings()
        random.seed(self.settings.seed)  # the coordinator's backoff jitter
        self.rng = random.Random(self.settings.seed)
        self.clock = SimClock()
        self.ledger = Ledger(self.clock.monotonic)
        self.tables = MeteredTables(
            InMemoryTables(clock=self.clock), self.ledger, LEASE_TABLE, CHECKPOINT_TABLE
        )
        self.kinesis = InMemoryKinesis()  # discovery only: the runners stand in for reading
        self.kinesis.create_stream(STREAM, shards)
        self.shards = shards
        self.log = ConsumptionLog(self.clock)
        self.workers: dict[str, SimWorker] = {}
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self.steps = 0

    def client_requests(self) -> int:
        return self.tables.requests

    # -- scheduling ------------------------------------------------------------------------------------
    def later(self, delay: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self._heap, (self.clock.now + delay, next(self._seq), fn))

    def wake(self, worker: SimWorker, at: float) -> None:
        if worker.done or at >= worker.wake_at:
            return
        worker.wake_at = at

        def fire() -> None:
            if worker.done or worker.wake_at != at:
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

    # -- the fleet -------------------------------------------------------------------------------------
    def add_worker(self, worker_id: str, at: float) -> None:
        def boot() -> None:
            w = SimWorker(self, worker_id)
            self.workers[worker_id] = w
            w.boot()
            self.wake(w, self.clock.now + self.settings.request_latency * 3)  # its three boot requests

        self.later(max(0.0, at - self.clock.now), boot)

    def shutdown_worker(self, worker_id: str, at: float) -> None:
        self.later(max(0.0, at - self.clock.now), lambda: self.workers[worker_id].hear(ShutdownRequested()))

    def live(self) -> list[str]:
        return [w for w, sw in self.workers.items() if not sw.done]

    def fair(self, workers: list[str] | None = None) -> bool:
        """Every shard consumed by exactly one worker, and each live worker holding its fair share."""
        live = workers if workers is not None else self.live()
        if not live or any(w not in self.workers for w in live):
            return False
        if (
            sum(self.log.per_worker.get(w, 0) for w in live) != self.shards
            or self.log.consumed_shards != self.shards
        ):
            return False
        low, high = self.shards // len(live), -(-self.shards // len(live))
        return all(low <= self.log.per_worker.get(w, 0) <= high for w in live)
