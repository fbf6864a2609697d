"""The fleet benchmark's analysis: the zero-cost floor (the gap a hand-off that took no time at all would show),
takeover times, and where a hand-off's gap goes."""

from __future__ import annotations

import pytest

from tools.fleet.analysis import PHASES, Delivery, analyze, handoff_phases, ownership_runs, zero_cost_gaps


def _run(worker: str, epoch: int, times: list[float], shard: str = "s0") -> list[Delivery]:
    return [Delivery(worker, shard, f"{worker}-{epoch}-{i}", epoch, t) for i, t in enumerate(times)]


def test_a_steady_cadence_is_its_own_floor() -> None:
    deliveries = _run("w1", 1, [i * 0.25 for i in range(41)])
    assert zero_cost_gaps(deliveries, samples=500) == pytest.approx([0.25] * 500)


def test_long_silences_weigh_by_their_length_as_random_hand_off_instants_would() -> None:
    # 9 silences of 0.1 s, then one of 0.9 s: half the time is spent in the long one.
    times = [i * 0.1 for i in range(10)] + [1.8]
    gaps = zero_cost_gaps(_run("w1", 1, times), samples=4000, seed=1)
    long_share = sum(g > 0.5 for g in gaps) / len(gaps)
    assert 0.45 < long_share < 0.55
    assert set(round(g, 6) for g in gaps) == {0.1, 0.9}


def test_the_hand_off_itself_is_not_part_of_the_floor() -> None:
    # w1 delivers every 0.2 s until 2.0, w2 from 5.0 on: the 3 s between them is a hand-off, not a silence.
    deliveries = _run("w1", 1, [i * 0.2 for i in range(11)]) + _run(
        "w2", 2, [5.0 + i * 0.2 for i in range(11)]
    )
    assert max(zero_cost_gaps(deliveries)) == pytest.approx(0.2)
    result = analyze([(d.shard, d.sequence) for d in deliveries], deliveries)
    assert result["handoff_gap_s"]["p50"] == pytest.approx(3.0)
    assert result["zero_cost_gap_s"]["p99"] == pytest.approx(0.2)


def test_a_shard_that_moved_just_before_the_signal_is_not_timed_as_a_takeover() -> None:
    # w1 owned s0 and s1; s1 moved to w2 at 9.5, just before w1's SIGTERM at 10.0 (its last delivery
    # was still w1's when the scenario looked at 9.4); s0 moves because of the signal, at 10.6.
    deliveries = (
        _run("w1", 1, [8.0, 9.0, 9.9], "s0")
        + _run("w3", 2, [10.6, 11.0], "s0")
        + _run("w1", 1, [8.0, 9.0], "s1")
        + _run("w2", 2, [9.5, 10.2], "s1")
        + _run("w3", 3, [25.0], "s1")  # the next cycle's move
    )
    result = analyze(
        [(d.shard, d.sequence) for d in deliveries], deliveries, {"w1": 10.0}, {"w1": ["s0", "s1"]}
    )
    assert result["signal_to_new_owner_first_record_s"]["n"] == 1
    assert result["signal_to_new_owner_first_record_s"]["max"] == pytest.approx(0.6)


def test_a_hand_off_gap_splits_into_its_phases_and_a_crash_takeover_is_not_timed() -> None:
    # s0 moves w1 (epoch 1) -> w2 (epoch 2) by hand-off; s1 moves w1 -> w3 after a crash (no transfer logged).
    deliveries = (
        _run("w1", 1, [0.0, 1.0])
        + _run("w2", 2, [1.9, 2.0])
        + _run("w1", 1, [0.0, 1.0], shard="s1")
        + _run("w3", 2, [9.0], shard="s1")
    )
    milestones = {
        ("drained", "s0", 1): 1.05,
        ("handed_over", "s0", 2): 1.15,
        ("received", "s0", 2): 1.45,
        ("init", "s0", 2): 1.5,
        ("received", "s1", 2): 8.5,
        ("init", "s1", 2): 8.6,
    }
    phases = handoff_phases(ownership_runs(deliveries), milestones)
    assert list(phases) == [("s0", 2)]
    assert phases[("s0", 2)] == pytest.approx(dict(zip(PHASES, [0.05, 0.1, 0.3, 0.05, 0.4], strict=True)))
    assert sum(phases[("s0", 2)].values()) == pytest.approx(1.9 - 1.0)
