"""What a worker run as the container runs it (``python -m consumer run``) writes to its log while Kinesis or
DynamoDB is unreachable (connections refused by a ``FaultProxy`` on 127.0.0.1): a bounded number of lines per
interval whatever the number of shards, and still each shard's first failure and its recovery.

Before, each shard logged ``transient_failure`` at every retry (about once a second each), the heartbeat
``heartbeat_failed`` every 0.5 s, ``scan_failed`` and ``inbox_poll_failed`` every poll: a 1,000-shard worker
wrote about 1,000 lines a second."""

from __future__ import annotations

import time

import pytest

from consumer.logs import REPEAT_EVERY
from tools.tcp_proxy import FaultProxy, address

from .support import (
    create_stream,
    log_events,
    make_names,
    put_numbered,
    read_journal,
    spawn_worker,
    stop_process,
    wait_until,
)

pytestmark = pytest.mark.integration

SHARDS = 6
OUTAGE = 8.0  # seconds; more than REPEAT_EVERY, far less than the give-up bound set below


def test_kinesis_refused_logs_each_shards_first_failure_a_bounded_summary_and_each_recovery(
    emulators, kinesis_client, dynamodb_client, unique_name, tmp_path
) -> None:
    names = make_names(unique_name, dynamodb_client)
    shards = create_stream(kinesis_client, names.stream, SHARDS)
    journal = tmp_path / "journal.jsonl"
    log = journal.with_suffix(".w.log")
    delivered = lambda: {e["p"] for e in read_journal(journal) if e["k"] == "d"}  # noqa: E731
    with FaultProxy(address(emulators.kinesis_endpoint)) as proxy:
        proc = spawn_worker(
            emulators,
            names,
            "w",
            journal,
            AWS_ENDPOINT_URL_KINESIS=proxy.url(),
            CONSUMER_GIVE_UP_AFTER_SECONDS="120",
        )
        try:
            wait_until(
                lambda: len(log_events(log, "shard_started")) == SHARDS, timeout=30, what="every shard"
            )
            proxy.fault("refuse")
            began = time.monotonic()
            wait_until(
                lambda: len(log_events(log, "transient_failure")) == SHARDS,
                timeout=15,
                what="each shard's failure",
            )
            wait_until(
                lambda: log_events(log, "transient_failures"), timeout=2 * REPEAT_EVERY, what="a summary"
            )
            wait_until(lambda: time.monotonic() - began >= OUTAGE, timeout=2 * OUTAGE, what="the outage")
            proxy.heal()
            lasted = time.monotonic() - began
            wait_until(
                lambda: len(log_events(log, "shard_recovered")) == SHARDS,
                timeout=30,
                what="each shard recovered",
            )
            put_numbered(kinesis_client, names.stream, "after", 5)
            wait_until(lambda: len(delivered()) == 5, timeout=30, what="records put after the outage")
        finally:
            assert stop_process(proc) == 0
    first = log_events(log, "transient_failure")
    assert sorted(e["shard"] for e in first) == sorted(shards)  # each shard's first failure, once
    assert all(e["level"] == "WARNING" and e["stream"] == names.stream and e["error"] for e in first), first
    summaries = log_events(log, "transient_failures")
    assert len(summaries) <= lasted / REPEAT_EVERY + 2, [s["ts"] for s in summaries]  # not SHARDS a second
    assert summaries[0]["shards"] == SHARDS and summaries[0]["streams"] == [names.stream], summaries[0]
    assert sum(summaries[0]["operations"].values()) == SHARDS and summaries[0]["max_delay_s"] > 0
    recovered = log_events(log, "shard_recovered")
    assert sorted(e["shard"] for e in recovered) == sorted(shards)
    assert all(e["failures"] >= 2 for e in recovered), recovered  # it retried quietly meanwhile
    discovery = log_events(log, "discovery_failed")  # the leader's ListShards, every second here
    assert 1 <= len(discovery) <= lasted / REPEAT_EVERY + 2, [e["ts"] for e in discovery]
    assert not log_events(log, "stream_gone")  # unreachable is not gone
    assert not log_events(log, "shard_giving_up")


def test_dynamodb_refused_logs_heartbeat_scan_and_inbox_failures_at_a_bounded_rate(
    emulators, kinesis_client, dynamodb_client, unique_name, tmp_path
) -> None:
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 2)
    journal = tmp_path / "journal.jsonl"
    log = journal.with_suffix(".w.log")
    with FaultProxy(address(emulators.aws_endpoint)) as proxy:
        proc = spawn_worker(
            emulators,
            names,
            "w",
            journal,
            AWS_ENDPOINT_URL_DYNAMODB=proxy.url(),
            CONSUMER_LEASE_DURATION_SECONDS="12",  # a heartbeat every 5 s, then every 0.5 s once one fails
            CONSUMER_SAFETY_MARGIN_SECONDS="2",
        )
        try:
            wait_until(lambda: len(log_events(log, "shard_started")) == 2, timeout=30, what="every shard")
            proxy.fault("refuse")
            began = time.monotonic()
            wait_until(
                lambda: all(
                    log_events(log, e) for e in ("heartbeat_failed", "scan_failed", "inbox_poll_failed")
                ),
                timeout=15,
                what="the first heartbeat, scan and inbox poll failures",
            )
            wait_until(lambda: time.monotonic() - began >= OUTAGE, timeout=2 * OUTAGE, what="the outage")
            proxy.heal()
            lasted = time.monotonic() - began
            wait_until(
                lambda: all(log_events(log, e) for e in ("heartbeat_recovered", "scan_recovered")),
                timeout=30,
                what="the heartbeat and scan recovered",
            )
        finally:
            assert stop_process(proc) == 0
    bound = lasted / REPEAT_EVERY + 2
    for event in ("heartbeat_failed", "scan_failed", "inbox_poll_failed", "own_read_failed"):
        told = log_events(log, event)
        if event == "own_read_failed" and not told:  # only while a read of its own leases was due
            continue
        assert 1 <= len(told) <= bound, (event, [e["ts"] for e in told])  # not one per retry
        assert told[0]["failures"] == 1 and told[0]["level"] == "WARNING", told[0]
    [beat] = log_events(log, "heartbeat_recovered")
    assert beat["failures"] >= (OUTAGE - 5.0) / 0.5 - 1, beat  # every retry counted, though not each told
