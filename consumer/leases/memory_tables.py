"""The in-memory lease and checkpoint tables that the in-memory repository and checkpoint store share."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field

from consumer.checkpoint.store import CheckpointItem
from consumer.clock import Clock, SystemClock
from consumer.leases.model import Leader, Lease, WorkerItem

__all__ = ["InMemoryTables"]


@dataclass
class InMemoryTables:
    """Both tables, behind one lock so that multi-item changes are atomic like a transaction.

    ``clock`` stamps the operator-facing wall times (``heartbeat_ms``, ``updated_ms``), as DynamoDB's do.
    """

    leases: dict[tuple[str, str], Lease] = field(default_factory=dict)
    workers: dict[str, WorkerItem] = field(default_factory=dict)
    checkpoints: dict[tuple[str, str], CheckpointItem] = field(default_factory=dict)
    leader: Leader | None = None
    calls: Counter[str] = field(default_factory=Counter)
    lock: threading.RLock = field(default_factory=threading.RLock)
    clock: Clock = field(default_factory=SystemClock)
