"""Fast versions of the fleet benchmark's scenarios, as tests: real worker processes on the emulators. Each
step waits on its event (the fleet formed, a hand-off finished), bounded, and holds no extra window."""

from __future__ import annotations

import pytest

from tests.support.fleet_scenarios import rolling_restart, scale_in, scale_out
from tools.fleet.runner import FleetSettings
from tools.fleet.scenarios import Timing, run_scenario

pytestmark = pytest.mark.integration

FAST = FleetSettings(  # idle time between reads: the consumer's (4 GetRecords/s per shard, within AWS's 5)
    shards=4,
    lease_duration=3.0,
    rate=40.0,
    scan_interval=0.5,
    inbox_poll_interval=0.1,
    metrics_interval=2.0,
)
TIMING = Timing(warmup=0.0, settle=0.0, steady_window=0.0, poll=0.1)


@pytest.mark.parametrize(
    ("scenario", "steps"),
    [("scale_out_2_to_4", scale_out), ("scale_in_4_to_2", scale_in), ("rolling_restart", rolling_restart)],
)
def test_planned_transitions_lose_nothing_and_deliver_nothing_twice(
    emulators, tmp_path, scenario, steps
) -> None:
    r = run_scenario(scenario, emulators, tmp_path, FAST, TIMING, steps)
    assert not r["timeouts"], r["timeouts"]
    assert r["drained"] and r["produced"] > 100
    assert r["lost"] == 0
    assert r["delivered_more_than_once"] == 0
    assert r["concurrent_owner_overlaps"] == 0
    assert r["moved_shards"] >= 2  # something was handed over
    assert all(code == 0 for code in r.get("exit_codes", {}).values())
    assert (tmp_path / f"{scenario}.png").stat().st_size > 10_000


def test_zombie_delivers_nothing_under_its_old_epoch_and_is_fenced(emulators, tmp_path) -> None:
    r = run_scenario("zombie_sigstop", emulators, tmp_path, FAST, TIMING)
    assert r["lost"] == 0
    assert r["concurrent_owner_overlaps"] == 0  # a single owner at any time
    assert r["zombie_shards_before_pause"] >= 1
    assert r["zombie_deliveries_under_old_epochs_after_pause"] == 0
    assert r["zombie_late_checkpoint_rejected"] is True
    assert not r["timeouts"], r["timeouts"]  # taken over while paused, told of its lost leases once resumed


@pytest.mark.parametrize("scenario", ["crash_sigkill", "crash_leader_sigkill"])
def test_crash_failover_within_lease_duration_plus_two_seconds(emulators, tmp_path, scenario) -> None:
    r = run_scenario(scenario, emulators, tmp_path, FAST, TIMING)
    assert r["lost"] == 0
    assert r["concurrent_owner_overlaps"] == 0
    assert not r.get("timeouts")
    takeover = r["signal_to_new_owner_first_record_s"]
    assert takeover["n"] >= 1
    assert takeover["max"] <= FAST.lease_duration + 2 + FAST.scan_interval
