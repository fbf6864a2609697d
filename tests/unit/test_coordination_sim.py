"""The fleet simulator on small fleets: the real coordinator reaches fair share with one consumer per shard,
and its bill is exact and repeatable."""

from __future__ import annotations

import math

from tools.coordination.billing import item_size, write_units
from tools.coordination.metered import stored_item
from tools.coordination.scenarios import ShapeRun, run_shape
from tools.coordination.sim import LEASE_TABLE, FleetSim


def test_start_steady_and_scale_out_keep_one_consumer_per_shard() -> None:
    out = run_shape(ShapeRun(8, 2, steady_seconds=20.0, settle_seconds=8.0))
    assert out["status"] == "simulated"
    assert out["violation_count"] == 0, out["violations"]
    assert out["start"]["fair_share_after_s"] < 10
    assert out["scale_out"]["fair_share_after_s"] < 10
    assert out["scale_out"]["max_moves_per_moved_shard"] == 1
    assert out["steady"]["coordination_dollars_per_month"] > 0
    assert out == run_shape(ShapeRun(8, 2, steady_seconds=20.0, settle_seconds=8.0)) | {
        "wall_seconds": out["wall_seconds"]
    }  # the same seed, the same run


def test_rebalance_of_64_on_8_plus_4_moves_each_shard_once() -> None:
    out = run_shape(ShapeRun(64, 8, steady_seconds=0, added=4, added_spread=0, after_added=15))
    assert out["violation_count"] == 0 and "steady" not in out
    assert out["scale_out"]["fair_share_after_s"] < 5 and out["scale_out"]["workers_after"] == 12
    assert set(out["scale_out"]["moves_per_moved_shard"]) == {1}


def test_the_bill_of_each_request_matches_the_items_it_touched() -> None:
    sim = FleetSim(8)
    sim.add_worker("w1", 0.0)
    assert sim.run_until(30.0, stop=lambda: sim.fair(["w1"]))
    sim.run_until(sim.clock.now + 5.0)
    repo = sim.tables  # the simulator's own metered repository: its calls are billed too
    before = sim.ledger.totals()
    table = repo.snapshot()
    scanned = sim.ledger.totals()[(LEASE_TABLE, "Scan")]
    done = before.get((LEASE_TABLE, "Scan"))
    # Hand-computed: one strongly consistent Scan page of the whole table costs its bytes in 4 KB units.
    items = [*table.leases, *table.workers, sim.tables.tables.leader]
    assert scanned.read_units - (done.read_units if done else 0) == math.ceil(
        sum(item_size(stored_item(i)) for i in items) / 4096
    )
    before = sim.ledger.totals()
    worker = table.workers[0]
    repo.wake(worker.worker_id)
    after = sim.ledger.totals()[(LEASE_TABLE, "UpdateItem")]
    assert after.write_units - before[(LEASE_TABLE, "UpdateItem")].write_units == write_units(
        item_size(stored_item(worker))
    )
