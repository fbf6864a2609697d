"""What ``replay`` says of a shard that had no checkpoint (``consumer.admin.ops``): its old checkpoint is shown
as ``none`` (never Python's ``None``), and its undo line says where the shard really started (the
application's initial position, whatever it is) and that no replay restores that, instead of naming
``TRIM_HORIZON``; a shard with a checkpoint still gets the exact command that restores it."""

from __future__ import annotations

from typing import Any

from consumer.admin.ops import NO_UNDO, plan_replay, replay
from consumer.leases.memory import InMemoryCheckpointStore, InMemoryLeaseRepository, InMemoryTables
from consumer.leases.model import Lease
from consumer.records import Position

STREAM, START = "orders", 49_600_000_000_000_000_000
SEQ = str(START + 7)


class TwoShardKinesis:
    """A stream of two open shards whose every sequence number from ``START`` on is a position."""

    def list_shards(self, **_: Any) -> dict[str, Any]:
        rng = {"StartingSequenceNumber": str(START)}
        return {
            "Shards": [{"ShardId": f"shardId-00000000000{i}", "SequenceNumberRange": rng} for i in range(2)]
        }

    def get_shard_iterator(self, **_: Any) -> dict[str, str]:
        return {"ShardIterator": "it"}


def _plans_and_undo() -> tuple[list[Any], list[str]]:
    tables = InMemoryTables()
    repo, store = InMemoryLeaseRepository(tables), InMemoryCheckpointStore(tables)
    for shard in ("shardId-000000000000", "shardId-000000000001"):
        repo.create_lease(Lease(STREAM, shard))
    # shard 1 has a checkpoint; shard 0 never had one (e.g. a LATEST application stopped before any record)
    lease = next(x for x in repo.snapshot().leases if x.shard_id == "shardId-000000000001")
    lease = repo.reset_checkpoint(lease, Position(str(START + 3), 2))
    plans = plan_replay(
        repo, store, TwoShardKinesis(), STREAM, None, checkpoint=Position(SEQ, -1), say=lambda _: None
    )
    return plans, replay(repo, plans, lease_table="lt", checkpoint_table="ct")


def test_a_shard_without_a_checkpoint_shows_none_and_an_undo_line_that_is_true() -> None:
    plans, undo = _plans_and_undo()
    by_shard = dict(zip((p.lease.shard_id for p in plans), zip(plans, undo, strict=True), strict=True))
    plan, line = by_shard["shardId-000000000000"]
    assert plan.old_checkpoint is None  # the CLI shows "checkpoint none -> ..." (test_replay_no_checkpoint)
    assert "TRIM_HORIZON" not in line
    assert line == NO_UNDO
    assert "the application's initial position" in line and "cannot restore" in line


def test_a_shard_with_a_checkpoint_keeps_its_exact_undo_command() -> None:
    plans, undo = _plans_and_undo()
    by_shard = dict(zip((p.lease.shard_id for p in plans), zip(plans, undo, strict=True), strict=True))
    plan, line = by_shard["shardId-000000000001"]
    assert plan.old_checkpoint == Position(str(START + 3), 2)
    assert f"checkpoint {plan.old_checkpoint} -> " == f"checkpoint {START + 3}/2 -> "
    assert line == (
        f"python -m consumer replay --lease-table lt --checkpoint-table ct --stream {STREAM} "
        f"--shard shardId-000000000001 --checkpoint {START + 3}/2 --yes"
    )
