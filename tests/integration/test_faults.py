"""Faults injected over the network (a TCP proxy between one worker and Kinesis or DynamoDB, on 127.0.0.1)
against the emulators, with a healthy second worker beside it. Each scenario asserts: every record
delivered, none lost, never two owners delivering at once, and the shard progressing again within its
bound after the fault ends. ``python -m bench.faults`` runs the same scenarios for the figures."""

from __future__ import annotations

import pytest

from consumer.config import RetrievalConfig
from tools.faults import SCENARIOS, Scenario, run_scenario

pytestmark = pytest.mark.integration

# While the faulty worker's lease stays valid (Kinesis faults: its heartbeats still reach DynamoDB), the
# shard must progress within 2 s of the fault's end; in every case within lease duration + 5 s. With fan-out,
# within 2 s of the first moment AWS lets it subscribe again (one SubscribeToShard a second per consumer and
# shard: the broken subscription's retry waits for that slot).
WHILE_VALID = 2.0
RESUBSCRIBE = RetrievalConfig().fanout_subscribe_interval


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_the_shard_heals_after_the_fault_with_nothing_lost(emulators, scenario: Scenario) -> None:
    result = run_scenario(emulators, scenario)
    assert result.produced > 0
    assert result.lost == 0, result
    assert result.epochs_in_order, result
    assert result.recovery_s is not None, result
    resubscribe = RESUBSCRIBE if scenario.retrieval == "fanout" else 0.0
    bound = WHILE_VALID + resubscribe if scenario.target == "kinesis" else result.bound_s
    assert result.recovery_s <= bound, result
