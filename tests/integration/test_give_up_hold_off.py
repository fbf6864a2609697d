"""A worker that cannot reach Kinesis gives its shards up and is not handed them back at once.

Two `python -m consumer run` workers on the emulators; one reaches Kinesis through a fault proxy that starts
refusing. Its shards give up (``CONSUMER_GIVE_UP_AFTER_SECONDS``) and the other worker takes them. Before,
the leader's next plan (a quarter of a second here) asked that worker to hand the faulty one its fair share
back, and each of those shards stalled again until it gave up once more; now nobody asks for it for three
lease durations (docs/protocol.md, the leader's plan, rule 4). Every record put meanwhile is delivered.
"""

from __future__ import annotations

import time

import pytest

from tools.tcp_proxy import FaultProxy, address

from .support import (
    LEASES,
    PROCESS_START,
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

SHARDS = 4
HOLD_OFF = 3 * LEASES.lease_duration


def test_a_worker_whose_kinesis_is_cut_gives_its_shards_up_and_gets_none_back_for_the_hold_off(
    emulators, kinesis_client, dynamodb_client, unique_name, tmp_path
) -> None:
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, SHARDS)
    journal = tmp_path / "journal.jsonl"
    logs = {w: journal.with_suffix(f".{w}.log") for w in ("a", "b")}
    started = lambda w: log_events(logs[w], "shard_started")  # noqa: E731
    delivered = lambda: {e["p"] for e in read_journal(journal) if e["k"] == "d"}  # noqa: E731
    with FaultProxy(address(emulators.kinesis_endpoint)) as proxy:
        a = spawn_worker(emulators, names, "a", journal)
        b = None
        try:
            wait_until(lambda: len(started("a")) == SHARDS, timeout=PROCESS_START, what="a runs every shard")
            b = spawn_worker(
                emulators,
                names,
                "b",
                journal,
                AWS_ENDPOINT_URL_KINESIS=proxy.url(),
                CONSUMER_GIVE_UP_AFTER_SECONDS="2",
            )
            wait_until(
                lambda: len(started("b")) == SHARDS // 2, timeout=PROCESS_START, what="b gets its share"
            )
            proxy.fault("refuse")
            wait_until(
                lambda: len(log_events(logs["b"], "shard_giving_up")) >= SHARDS // 2,
                timeout=30,
                what="b gives its shards up",
            )
            gave_up = time.monotonic()
            put_numbered(kinesis_client, names.stream, "during", 20)
            wait_until(lambda: len(delivered()) == 20, timeout=30, what="a delivers what b gave up")
            # The event: b is handed a shard again. Before, within a scan interval or two of its give-up.
            wait_until(
                lambda: len(started("b")) > SHARDS // 2, timeout=HOLD_OFF + 30, what="b gets a shard back"
            )
            back = time.monotonic() - gave_up
            proxy.heal()
            put_numbered(kinesis_client, names.stream, "after", 20)
            wait_until(lambda: len(delivered()) == 40, timeout=30, what="everything delivered")
        finally:
            for proc in (b, a):
                if proc is not None:
                    assert stop_process(proc) == 0
    assert back >= 0.8 * HOLD_OFF, f"b was handed a shard back {back:.1f} s after giving up"
