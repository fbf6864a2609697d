"""The simulator's stand-ins for what is not coordination: a clock and shard runners (Kinesis discovery is the
project's own ``InMemoryKinesis``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

from consumer.checkpoint.store import CheckpointStore
from consumer.errors import CheckpointRejectedError
from consumer.leases.liveness import OwnValidity
from consumer.leases.model import Lease
from consumer.lifecycle.messages import Outcome, ShardFinished, Stop
from consumer.lifecycle.processor import ShutdownReason
from consumer.records import Position

__all__ = ["ConsumptionLog", "SimClock", "SimShardRunners"]

WALL_EPOCH_MS = 1_700_000_000_000  # simulated wall time starts here (the repository stamps it on items)


class SimClock:
    """Simulated time: monotonic seconds from 0, and a wall clock that moves with it."""

    def __init__(self) -> None:
        self.now = 0.0

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
    consumed_shards: int = 0  # shards with at least one consumer

    def start(self, key: str, worker: str, epoch: int, validity: OwnValidity) -> None:
        holders = self.consumers.setdefault(key, {})
        for other, (other_epoch, other_validity) in holders.items():
            # The other consumer may still deliver while its owner's window is open.
            if other != worker and other_validity.valid():
                self.violations.append(
                    f"t={self.clock.now:.3f} {key}: {worker} (epoch {epoch}) started while {other} "
                    f"(epoch {other_epoch}) still consumes with {other_validity.remaining():.2f}s of validity"
                )
        if not holders:
            self.consumed_shards += 1
        if worker not in holders:
            self.per_worker[worker] = self.per_worker.get(worker, 0) + 1
        holders[worker] = (epoch, validity)
        self.starts.append((self.clock.now, key, worker))

    def finish(self, key: str, worker: str) -> None:
        holders = self.consumers.get(key, {})
        if holders.pop(worker, None) is not None:
            self.per_worker[worker] -= 1
            if not holders:
                self.consumed_shards -= 1


class SimShardRunners:
    """One worker's shard consumers: Start reads the checkpoint and consumes; Stop drains, checkpoints (when
    asked to stop, not when the lease was lost) and reports ``ShardFinished`` after ``drain`` seconds."""

    def __init__(
        self,
        worker: str,
        stream: str,
        checkpoints: CheckpointStore,
        validity: OwnValidity,
        log: ConsumptionLog,
        later: Callable[[float, Callable[[], None]], None],
        report: Callable[[ShardFinished], None],
        drain: float,
    ) -> None:
        self.worker = worker
        self.stream = stream
        self._checkpoints = checkpoints
        self._validity = validity
        self._log = log
        self._later = later
        self._report = report
        self._drain = drain
        self.running: dict[str, Lease] = {}
        self._position = 0

    def start(self, lease: Lease) -> None:
        self._checkpoints.get(lease.stream, lease.shard_id)  # where to resume (the real consumer's read)
        self.running[lease.key] = lease
        self._log.start(lease.key, self.worker, lease.epoch, self._validity)

    def _save(self, lease: Lease) -> None:
        """The final checkpoint of a shard asked to stop."""
        self._position += 1
        with contextlib.suppress(
            CheckpointRejectedError
        ):  # the lease moved on: the table tells the coordinator
            self._checkpoints.save(
                lease.stream, lease.shard_id, lease.epoch, Position(f"{self._position:021d}")
            )

    def stop(self, stop: Stop) -> None:
        lease = self.running.get(stop.key)
        if lease is None:
            return
        requested = stop.reason is ShutdownReason.REQUESTED

        def finished() -> None:
            if self.running.pop(stop.key, None) is None:
                return
            if requested:
                self._save(lease)
            self._log.finish(stop.key, self.worker)
            self._report(ShardFinished(stop.key, lease.epoch, Outcome.STOPPED if requested else Outcome.LOST))

        self._later(self._drain, finished)
