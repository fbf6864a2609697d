"""A worker run as the container runs it (``python -m consumer run``), cut off from DynamoDB over the network
(a ``FaultProxy`` between it and moto, on 127.0.0.1) for a little longer than its heartbeat window but less
than a lease duration: it suspends its shards, and once DynamoDB answers again it resumes within a couple of
seconds, at the same epoch, with nothing lost. And SIGTERM while DynamoDB is refused."""

from __future__ import annotations

import threading
import time

import pytest

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

LEASE = 6.0  # the owner's window is lease - margin = 4.8 s; a beat every 2.4 s
MARGIN = 1.2
RESUMED_WITHIN = 3.0  # seconds from DynamoDB answering again to the first record put after it delivered


def test_refused_dynamodb_past_the_window_resumes_soon_after_it_answers(
    emulators, kinesis_client, dynamodb_client, unique_name, tmp_path
) -> None:
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 1)
    journal = tmp_path / "journal.jsonl"
    log = journal.with_suffix(".w.log")
    put_at: dict[str, float] = {}
    stop = threading.Event()

    def produce() -> None:
        i = 0
        while not stop.is_set():
            payload = f"r{i}"
            put_at[payload] = time.time()
            kinesis_client.put_record(StreamName=names.stream, Data=payload.encode(), PartitionKey=payload)
            i += 1
            stop.wait(0.1)

    with FaultProxy(address(emulators.aws_endpoint)) as proxy:
        proc = spawn_worker(
            emulators,
            names,
            "w",
            journal,
            AWS_ENDPOINT_URL_DYNAMODB=proxy.url(),
            CONSUMER_LEASE_DURATION_SECONDS=str(LEASE),
            CONSUMER_SAFETY_MARGIN_SECONDS=str(MARGIN),
        )
        producer = threading.Thread(target=produce, daemon=True)
        producer.start()
        try:
            delivered = lambda: [e for e in read_journal(journal) if e["k"] == "d"]  # noqa: E731
            wait_until(lambda: len(delivered()) >= 5, timeout=30, what="the worker delivers")
            proxy.fault("refuse")
            wait_until(
                lambda: len(log_events(log, "heartbeat_window_closed")) >= 1,
                timeout=LEASE,
                what="the worker's heartbeat window closed",
            )
            proxy.heal()
            healed = time.time()
            wait_until(
                lambda: any(put_at.get(e["p"], 0.0) > healed for e in delivered()),
                timeout=3 * LEASE,
                what="a record put after the outage delivered",
            )
            resumed = min(e["t"] for e in delivered() if put_at.get(e["p"], 0.0) > healed) - healed
            stop.set()
            producer.join(5)
            wait_until(
                lambda: set(put_at) <= {e["p"] for e in delivered()},
                timeout=10,
                what="every record delivered",
            )
        finally:
            stop.set()
            assert stop_process(proc) == 0
    assert resumed < RESUMED_WITHIN, f"delivering again {resumed:.1f}s after DynamoDB answered again"
    assert {e["e"] for e in delivered()} == {1}  # nobody took the lease: the same ownership throughout


def test_sigterm_while_dynamodb_is_refused_exits_cleanly_and_the_next_worker_loses_nothing(
    emulators, kinesis_client, dynamodb_client, unique_name, tmp_path
) -> None:
    """It cannot release, resign or deregister: it says so (and never that it resigned), exits 0 within its
    shutdown deadline, and a worker started after it takes its leases once they expire, at the checkpoints."""
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 2)
    journal = tmp_path / "journal.jsonl"
    put_numbered(kinesis_client, names.stream, "a", 20)
    delivered = lambda: {e["p"] for e in read_journal(journal) if e["k"] == "d"}  # noqa: E731
    with FaultProxy(address(emulators.aws_endpoint)) as proxy:
        proc = spawn_worker(emulators, names, "cut", journal, AWS_ENDPOINT_URL_DYNAMODB=proxy.url())
        try:
            wait_until(lambda: len(delivered()) == 20, timeout=30, what="the first worker delivers")
            proxy.fault("refuse")
            began = time.monotonic()
            code = stop_process(proc, timeout=30)
            took = time.monotonic() - began
        finally:
            if proc.poll() is None:
                proc.kill()
    assert code == 0
    assert took < 10 + 5 + 3, f"shutdown took {took:.1f}s: more than its deadline and final checkpoint wait"
    log = journal.with_suffix(".cut.log")
    assert len(log_events(log, "leadership_resigned")) == 0  # it could not resign, and must not say it did
    assert len(log_events(log, "resign_failed")) == 1
    put_numbered(kinesis_client, names.stream, "b", 20)
    successor = spawn_worker(emulators, names, "next", journal)
    try:
        wait_until(lambda: len(delivered()) == 40, timeout=30, what="every record delivered")
    finally:
        assert stop_process(successor) == 0
