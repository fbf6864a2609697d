"""What an outage writes to the log, on made-up time: a bounded number of lines whatever the number of shards,
and still the first failure and the recovery of each shard, and of the heartbeat, scan and inbox poll.

Before, every shard logged ``transient_failure`` at each retry (about once a second each), the heartbeat
``heartbeat_failed`` every 0.5 s, the leader ``scan_failed`` and every worker ``inbox_poll_failed`` every
second."""

from __future__ import annotations

import logging

import pytest

from consumer.lifecycle import retry
from consumer.lifecycle.messages import HeartbeatResult, InboxRead, Outcome, Result, TableRead
from consumer.lifecycle.retry_digest import RetryDigest
from consumer.lifecycle.shard_machine import ShardMachine
from consumer.lifecycle.shard_messages import FetchFailed, NotStarted, SetupFailed, Started
from consumer.lifecycle.shard_model import Rules
from consumer.logs import REPEAT_EVERY
from tests.unit.coordinator_support import T0, alive, coordinator, lead

SHARDS = 50
OUTAGE = 30.0  # seconds of made-up time


def _told(caplog: pytest.LogCaptureFixture, event: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", "") == event]


def _rules(shard: str, digest: RetryDigest) -> Rules:
    return Rules(
        "s",
        shard,
        1,
        backoff_base=0.2,
        backoff_max=1.0,
        give_up_after=3600.0,
        auto_interval=1.0,
        flush_interval=1.0,
        max_pending=100,
        final_timeout=5.0,
        window=8.0,
        retries=digest,
    )


def test_shards_retrying_an_outage_log_each_first_failure_a_bounded_summary_and_each_recovery(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    digest = RetryDigest()
    machines = {f"sh{i}": ShardMachine(_rules(f"sh{i}", digest), T0) for i in range(SHARDS)}
    for m in machines.values():
        m.step(T0, [])  # asks for its setup
    now = T0
    while now < T0 + OUTAGE:  # every shard's setup fails, about once a second each (Kinesis unreachable)
        for m in machines.values():
            m.step(now, [SetupFailed(retry.Verdict.RETRY, "cannot reach Kinesis")])
            m.step(m.state.wake_at, [])  # its backoff over: it asks again
        now += 1.0
    first = _told(caplog, "transient_failure")
    assert sorted(r.shard for r in first) == sorted(machines)  # type: ignore[attr-defined]
    assert all(r.levelno == logging.WARNING and r.operation == "setup" for r in first)  # type: ignore[attr-defined]
    summaries = _told(caplog, "transient_failures")
    assert 1 <= len(summaries) <= OUTAGE / REPEAT_EVERY + 1, len(summaries)  # not SHARDS per second
    last = summaries[-1]
    assert last.shards == SHARDS and last.operations == {"setup": SHARDS}  # type: ignore[attr-defined]
    assert last.failing_s >= OUTAGE - REPEAT_EVERY - 1 and last.max_delay_s <= 1.0  # type: ignore[attr-defined]
    assert digest.retrying == SHARDS

    for m in machines.values():
        m.step(now, [Started(None, m.state.mode)])
    recovered = _told(caplog, "shard_recovered")
    assert sorted(r.shard for r in recovered) == sorted(machines)  # type: ignore[attr-defined]
    assert digest.retrying == 0
    assert len(_told(caplog, "transient_failure")) == SHARDS  # nothing more than the first of each


def test_a_new_episode_is_told_again_and_a_shard_that_ends_leaves_the_summary(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    digest = RetryDigest()
    m = ShardMachine(_rules("sh0", digest), T0)
    m.step(T0, [])
    m.step(T0, [SetupFailed(retry.Verdict.RETRY, "down")])
    m.step(T0 + 1, [])
    m.step(T0 + 1, [Started(None, m.state.mode)])
    m.step(T0 + 2, [])
    assert digest.retrying == 0
    other = ShardMachine(_rules("sh1", digest), T0)
    other.step(T0, [])
    other.step(T0, [SetupFailed(retry.Verdict.RETRY, "down")])
    assert digest.retrying == 1
    other.step(T0 + 1, [])
    other.step(T0 + 1, [NotStarted(Outcome.LOST)])  # its lease moved on meanwhile
    assert digest.retrying == 0  # it ended: no longer counted
    assert len(_told(caplog, "transient_failure")) == 2


def test_dynamodb_unreachable_tells_heartbeat_scan_and_inbox_failures_at_a_bounded_rate(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    c = coordinator()
    alive(c)
    lead(c)
    now, beats = T0 + 1.0, 0
    while now < T0 + OUTAGE:  # what the shell reports while DynamoDB refuses every call
        beats += 1
        c.step(now, [HeartbeatResult(now, Result.FAILED, error="cannot reach DynamoDB")])
        c.step(now, [TableRead(None, error="cannot reach DynamoDB")])
        c.step(now, [InboxRead(None, error="cannot reach DynamoDB")])
        now += 0.5
    bound = OUTAGE / REPEAT_EVERY + 1
    for event in ("heartbeat_failed", "scan_failed", "inbox_poll_failed"):
        told = _told(caplog, event)
        assert 1 <= len(told) <= bound, (event, len(told))  # not one per 0.5 s
        assert told[0].failures == 1 and told[-1].failures > len(told)  # type: ignore[attr-defined]
    c.step(now, [HeartbeatResult(now, Result.OK)])
    [back] = _told(caplog, "heartbeat_recovered")
    assert back.failures == beats  # type: ignore[attr-defined]


def test_a_fleet_wide_throttle_tells_the_first_and_then_a_bounded_count_of_every_throttle(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every shard throttled about twice a second for 30 s (another application reading the stream): before, a
    ``throttled`` line per shard per retry (3,000 here); now the first, then one ``throttles`` line at most every
    ``REPEAT_EVERY`` seconds that counts them all."""
    caplog.set_level(logging.INFO)
    digest = RetryDigest()
    machines = [ShardMachine(_rules(f"sh{i}", digest), T0) for i in range(SHARDS)]
    for m in machines:
        m.step(T0, [])
        m.step(T0, [Started(None, m.state.mode)])  # now fetching
    now, throttles = T0, 0
    while now < T0 + OUTAGE:
        for m in machines:
            m.step(now, [FetchFailed(retry.Verdict.BACK_OFF, "Rate exceeded for shard")])
            throttles += 1
            assert not m.finished  # a throttle never gives the shard up
            m.step(m.state.wake_at, [])  # its backoff over: it fetches again
        now += 0.5
    [first] = _told(caplog, "throttled")
    assert first.shard == "sh0" and first.operation == "fetch"  # type: ignore[attr-defined]
    summaries = _told(caplog, "throttles")
    assert 1 <= len(summaries) <= OUTAGE / REPEAT_EVERY + 1, len(summaries)
    assert all(r.levelno == logging.INFO for r in summaries)
    assert summaries[-1].shards == SHARDS and summaries[-1].operations == {"fetch": summaries[-1].throttles}  # type: ignore[attr-defined]
    # Nothing is lost from the count: the first line, the summaries, and those since the last line.
    told = 1 + sum(r.throttles for r in summaries)  # type: ignore[attr-defined]
    assert throttles - SHARDS * 2 * REPEAT_EVERY <= told <= throttles
