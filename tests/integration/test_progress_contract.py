"""The progress a worker publishes with its heartbeat, on both backends (the in-memory fakes and DynamoDB on
moto over HTTP): stored in the heartbeat's one write, replaced by the next, kept when not given, removed when
empty, refused with a fenced heartbeat, read back by both reads of the worker item, gone with the item, and
small enough for hundreds of shards a worker."""

from __future__ import annotations

import random

import pytest

from consumer.errors import WorkerFencedError
from consumer.leases.model import WorkerItem
from consumer.leases.progress import ShardLag, decode_progress
from tests.integration.contract_support import P1, P2, Backend

FIRST = {("s", "a"): ShardLag(1500, P1.sequence, 120), ("t", "a"): ShardLag(None, None, 0)}
SECOND = {("s", "a"): ShardLag(0, P2.sequence, 40)}


def _published(b: Backend, worker_id: str) -> dict[tuple[str, str], ShardLag]:
    by_get = decode_progress(b.worker(worker_id).progress)
    by_scan = [decode_progress(w.progress) for w in b.repo.snapshot().workers if w.worker_id == worker_id]
    assert by_scan == [by_get]
    return by_get


def test_a_heartbeat_publishes_replaces_keeps_and_removes_progress(b: Backend) -> None:
    b.repo.register_worker(WorkerItem("w1"))
    assert b.worker("w1").progress == b""
    assert b.repo.heartbeat("w1", 0, 2, False, progress=FIRST) == 1
    assert _published(b, "w1") == FIRST
    assert b.repo.heartbeat("w1", 0, 1, False, progress=SECOND) == 2  # replaced as a whole
    assert _published(b, "w1") == SECOND
    assert b.repo.heartbeat("w1", 0, 1, False) == 3  # not given: kept
    assert _published(b, "w1") == SECOND
    item = b.worker("w1")
    assert (item.heartbeat, item.lease_count, item.draining) == (3, 1, False)
    assert b.repo.heartbeat("w1", 0, 0, True, progress={}) == 4  # owns nothing it reads: removed
    assert b.worker("w1").progress == b""


def test_a_fenced_heartbeat_publishes_nothing(b: Backend) -> None:
    b.repo.register_worker(WorkerItem("w1"))
    b.repo.heartbeat("w1", 0, 1, False, progress=FIRST)
    with pytest.raises(WorkerFencedError):
        b.repo.heartbeat("w1", 1, 1, False, progress=SECOND)
    assert _published(b, "w1") == FIRST
    with pytest.raises(WorkerFencedError):  # and never creates an item for an unregistered worker
        b.repo.heartbeat("ghost", 0, 1, False, progress=SECOND)
    assert b.repo.get_worker("ghost") is None


def test_the_progress_goes_with_the_worker_item(b: Backend) -> None:
    b.repo.register_worker(WorkerItem("w1"))
    b.repo.heartbeat("w1", 0, 1, False, progress=FIRST)
    b.repo.deregister_worker("w1")
    assert b.repo.get_worker("w1") is None
    b.repo.register_worker(WorkerItem("w1"))  # registered again: a fresh item, nothing published yet
    assert b.worker("w1").progress == b""


def test_hundreds_of_shards_fit_in_a_small_item(b: Backend) -> None:
    rng = random.Random(3)
    progress = {
        ("orders", f"shardId-{i:012d}"): ShardLag(
            rng.randint(0, 10**6), "4959" + "".join(rng.choice("0123456789") for _ in range(52)), i
        )
        for i in range(500)
    }
    b.repo.register_worker(WorkerItem("w1"))
    b.repo.heartbeat("w1", 0, 500, False, progress=progress)
    item = b.worker("w1")
    assert decode_progress(item.progress) == progress
    assert len(item.progress) < 500 * 45  # about 40 bytes a shard: 22 KB for 500, far under 400 KB
