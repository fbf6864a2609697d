"""``python -m consumer replay`` (a subprocess, as an operator runs it) of a shard that has no checkpoint yet (a
``LATEST`` application stopped before its first record): the plan shows ``checkpoint none``, not Python's
``None``, and the undo line says the shard started at the application's initial position, which no replay
can restore, instead of claiming ``TRIM_HORIZON``."""

from __future__ import annotations

import time

import pytest

from consumer.leases.dynamodb import DynamoDBLeaseRepository
from consumer.leases.model import Lease
from tests.integration.support import create_stream, make_names, put_numbered, run_cli

pytestmark = pytest.mark.integration


def test_replay_of_a_shard_without_a_checkpoint_says_none_and_a_true_undo_line(
    emulators, kinesis_client, dynamodb_client, unique_name
) -> None:
    names = make_names(unique_name, dynamodb_client)
    [shard] = create_stream(kinesis_client, names.stream, 1)
    repo = DynamoDBLeaseRepository(dynamodb_client, names.lease_table, names.checkpoint_table)
    # as discovery creates it under LATEST: no checkpoint, LATEST fixed at the creation time
    assert repo.create_lease(Lease(names.stream, shard, latest_ms=int(time.time() * 1000)))
    [sequence, _] = put_numbered(kinesis_client, names.stream, "r", 2)

    out = run_cli(emulators, names, "replay", "--stream", names.stream, "--sequence", sequence, "--yes")
    assert out.returncode == 0, out
    assert f"{names.stream}/{shard}: checkpoint none -> {sequence}/-1 " in out.stdout
    assert (
        "undo: (no checkpoint before: the shard started at the application's initial position "
        "(CONSUMER_INITIAL_POSITION); a replay always sets a checkpoint, so it cannot restore that)\n"
    ) in out.stdout
    assert "None" not in out.stdout and "TRIM_HORIZON" not in out.stdout
