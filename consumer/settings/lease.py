"""How leases are held and observed: the lease duration, the owner's margin and every polling cadence."""

from __future__ import annotations

from dataclasses import dataclass

from consumer.errors import ConfigError
from consumer.settings.checks import check_types, positive

__all__ = ["LeaseConfig"]


@dataclass(frozen=True)
class LeaseConfig:
    """How leases are held and observed.

    A taker waits ``lease_duration`` (its own monotonic clock) without seeing the owner's heartbeat move;
    an owner stops delivering ``safety_margin`` before that, counted from the start of its last good heartbeat.
    """

    lease_duration: float = 10.0
    safety_margin: float = 2.0
    heartbeat_interval: float | None = None
    scan_interval: float = 1.0  # the leader's read of the whole table
    inbox_poll_interval: float = 0.1  # our own item, while something is under way
    idle_poll_interval: float = 1.0  # our own item, when nothing is under way
    leader_check_interval: float = 1.0  # the leader's heartbeat, watched by the other workers
    max_moves_per_second: int = 200  # the leader's lease moves (keeps a fleet start within throughput)
    discovery_interval: float = 10.0
    handoff_timeout: float | None = None
    max_leases_per_worker: int | None = None
    give_up_after: float | None = None  # a shard failing transiently this long is released (default: lease)
    forget_workers_after: float | None = (
        None  # silent worker items are deleted after this (default: 3 leases)
    )

    def __post_init__(self) -> None:
        check_types("lease", self)
        positive("lease.lease_duration", self.lease_duration)
        for name in ("give_up_after", "forget_workers_after"):
            if getattr(self, name) is not None:
                positive(f"lease.{name}", getattr(self, name))
        if self.forget_workers_after is not None and self.forget_workers_after < 2 * self.lease_duration:
            raise ConfigError(
                "lease.forget_workers_after",
                f"must be at least twice lease.lease_duration ({2 * self.lease_duration})",
            )
        if not 0 < self.safety_margin < self.lease_duration:
            raise ConfigError(
                "lease.safety_margin",
                f"must be > 0 and < lease.lease_duration ({self.lease_duration}); got {self.safety_margin}",
            )
        if self.heartbeat_interval is not None and not (
            0 < self.heartbeat_interval < self.lease_duration - self.safety_margin
        ):
            raise ConfigError(
                "lease.heartbeat_interval",
                f"must be > 0 and < lease.lease_duration - lease.safety_margin "
                f"({self.lease_duration - self.safety_margin}); got {self.heartbeat_interval}",
            )
        _check_cadence(self)
        if self.handoff_timeout is not None:
            positive("lease.handoff_timeout", self.handoff_timeout)
        if self.max_leases_per_worker is not None and self.max_leases_per_worker < 1:
            raise ConfigError("lease.max_leases_per_worker", "must be >= 1 or unset")

    @property
    def heartbeat_every(self) -> float:
        """Default: half the owner's window, so one failed heartbeat can be retried before it closes."""
        return self.heartbeat_interval or (self.lease_duration - self.safety_margin) / 2

    @property
    def idle_poll(self) -> float:
        """The quiet-time poll of our own item (never faster than the busy one)."""
        return max(self.idle_poll_interval, self.inbox_poll_interval)

    @property
    def owner_validity(self) -> float:
        """Seconds after a good heartbeat's start during which the owner may still deliver."""
        return self.lease_duration - self.safety_margin

    @property
    def give_up_seconds(self) -> float:
        """How long a shard may keep failing transiently before its owner releases it for another worker."""
        return self.give_up_after or self.lease_duration

    @property
    def forget_workers_seconds(self) -> float:
        """How long a worker item may stay silent before a live worker deletes it."""
        return self.forget_workers_after or 3 * self.lease_duration

    @property
    def handoff_stall_after(self) -> float:
        """Seconds after which an unanswered hand-off counts as stalled (metric and alarm)."""
        return self.handoff_timeout or 2 * self.lease_duration


def _check_cadence(c: LeaseConfig) -> None:
    """The polling and planning intervals, against each other and the lease duration."""
    for name in (
        "scan_interval",
        "inbox_poll_interval",
        "idle_poll_interval",
        "leader_check_interval",
        "discovery_interval",
    ):
        positive(f"lease.{name}", getattr(c, name))
    if c.max_moves_per_second < 5:
        raise ConfigError("lease.max_moves_per_second", f"must be >= 5; got {c.max_moves_per_second}")
    if c.leader_check_interval >= c.lease_duration:
        raise ConfigError(
            "lease.leader_check_interval",
            f"must be shorter than lease.lease_duration ({c.lease_duration}); got {c.leader_check_interval}",
        )
    if c.scan_interval >= c.lease_duration:
        raise ConfigError(
            "lease.scan_interval",
            f"must be shorter than lease.lease_duration ({c.lease_duration}); got {c.scan_interval}",
        )
