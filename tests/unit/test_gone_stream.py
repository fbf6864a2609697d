"""A stream Kinesis says is gone, stepped on made-up time (the coordinator as leader, no I/O): its leases are
assigned to nobody, the other stream's are, it is told once, discovery keeps looking for it, and it is
planned for again once a discovery lists it. Only Kinesis saying ResourceNotFoundException for the stream
(``Discovered.missing``) makes it gone: a discovery that failed otherwise (a timeout, a throttle) changes
nothing."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from consumer.config import ShutdownConfig, StreamSpec, WorkerConfig
from consumer.leases.model import Lease
from consumer.leases.repository import TableSnapshot
from consumer.lifecycle.coordinator import Coordinator
from consumer.lifecycle.messages import (
    Discover,
    Discovered,
    Heartbeat,
    HeartbeatResult,
    ReadTable,
    Result,
    TableRead,
    WriteKind,
)
from tests.unit.coordinator_support import LEASES, T0, alive, lead, of, worker, writes

LEASES_ST = tuple(Lease(stream, f"sh{i}") for stream in ("s", "t") for i in range(2))


def _leader() -> Coordinator:
    config = WorkerConfig(
        application="app",
        lease_table="l",
        checkpoint_table="c",
        streams=(StreamSpec("s", lambda: None), StreamSpec("t", lambda: None)),  # type: ignore[arg-type,return-value]
        worker_id="a",
        lease=LEASES,
        shutdown=ShutdownConfig(deadline=20.0, final_checkpoint_timeout=5.0),
    )
    c = Coordinator(config, T0)
    alive(c)
    lead(c)
    return c


def _table() -> TableRead:
    both = frozenset({"s", "t"})
    return TableRead(
        TableSnapshot(LEASES_ST, (replace(worker("a"), streams=both), replace(worker("b"), streams=both)))
    )


def _assigned_streams(c: Coordinator, now: float) -> set[str]:
    c.step(now, [HeartbeatResult(now, Result.OK)])  # our window open: the leader plans
    return {w.lease.stream for w in writes(c.step(now, [_table()]), WriteKind.ASSIGN)}


def _told(caplog: pytest.LogCaptureFixture, event: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", "") == event]


def test_a_gone_stream_is_planned_for_by_nobody_told_once_and_planned_for_again_when_listed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    c = _leader()
    acts = c.step(T0 + 1.5, [_table()])
    assert {w.lease.stream for w in writes(acts, WriteKind.ASSIGN)} == {"s", "t"}  # before: both planned
    [discover] = of(acts, Discover)
    assert discover.streams == ("s", "t")

    acts = c.step(T0 + 1.6, [Discovered(False, missing=frozenset({"t"}), listed=frozenset({"s"}))])
    assert of(acts, ReadTable)  # plan again at once, without it
    assert _assigned_streams(c, T0 + 1.6) == {"s"}
    [gone] = _told(caplog, "stream_gone")
    assert gone.levelno == logging.WARNING and gone.stream == "t"  # type: ignore[attr-defined]
    assert "CONSUMER_STREAMS" in gone.fix and "recreate" in gone.fix  # type: ignore[attr-defined]

    # Said once; discovery keeps asking for it at its interval; a discovery that failed otherwise (neither
    # missing nor listed: unreachable, throttled) leaves it gone.
    now = T0 + 1.6 + LEASES.discovery_interval
    [discover] = of(c.step(now, [HeartbeatResult(now, Result.OK)]), Discover)
    assert "t" in discover.streams
    c.step(now, [Discovered(False, missing=frozenset({"t"}), listed=frozenset({"s"}))])
    now += LEASES.discovery_interval
    c.step(now, [Discovered(False)])
    assert _assigned_streams(c, now) == {"s"}
    assert len(_told(caplog, "stream_gone")) == 1

    acts = c.step(now + 0.1, [Discovered(True, listed=frozenset({"s", "t"}))])
    assert of(acts, ReadTable)
    assert _assigned_streams(c, now + 0.1) == {"s", "t"}
    [back] = _told(caplog, "stream_back")
    assert back.stream == "t"  # type: ignore[attr-defined]


def test_a_failed_discovery_that_is_not_a_missing_stream_changes_nothing() -> None:
    c = _leader()
    c.step(T0 + 1.5, [_table()])
    c.step(T0 + 1.6, [Discovered(False)])  # e.g. Kinesis unreachable: nothing listed, nothing missing
    assert c.duties.fleet.gone == frozenset()
    assert _assigned_streams(c, T0 + 1.6) == {"s", "t"}


def _next_beat(c: Coordinator, now: float) -> tuple[Heartbeat, float]:
    """Step ``c`` on made-up time from ``now`` until it sends a heartbeat; that heartbeat lands."""
    for _ in range(1000):
        now += 0.05
        beats = of(c.step(now, []), Heartbeat)
        if beats:
            c.step(now, [HeartbeatResult(now, Result.OK)])
            return beats[0], now
    raise AssertionError("no heartbeat")


def test_the_leaders_heartbeat_carries_the_gone_streams_until_they_are_back() -> None:
    c = _leader()
    c.step(T0 + 1.5, [_table()])
    beat, now = _next_beat(c, T0 + 1.5)
    assert beat.gone == frozenset()
    [beat] = of(
        c.step(now, [Discovered(False, missing=frozenset({"t"}), listed=frozenset({"s"}))]), Heartbeat
    )
    assert beat.gone == frozenset({"t"})  # published for `status` at once, not at the next beat
    c.step(now, [HeartbeatResult(now, Result.OK)])
    beat, now = _next_beat(c, now)
    assert beat.gone == frozenset({"t"})  # and every beat after: a lost write is made good by the next
    [beat] = of(c.step(now, [Discovered(True, listed=frozenset({"s", "t"}))]), Heartbeat)
    assert beat.gone == frozenset()  # back: removed at once (status showed it gone while it was read)
    c.step(now, [HeartbeatResult(now, Result.OK)])

    c.step(now, [Discovered(False, missing=frozenset({"t"}), listed=frozenset({"s"}))])
    c.duties.end()  # we lead no more (fenced, or resigned): what we found is the next leader's to find
    beat, now = _next_beat(c, now)
    assert beat.gone == frozenset()
