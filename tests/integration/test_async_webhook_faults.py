"""The asyncio webhook example against an endpoint that fails over the network: a receiver that stops
reading cannot hold a shard past the timeout, and an outage (500s, connections closed without an answer, an
answer that never comes) is retried by the processor itself: no halt, no dead letter, no request per
record, every record once and in order."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pytest

from consumer.checkpoint.dynamodb import DynamoDBCheckpointStore
from consumer.config import ProcessingConfig, RetrievalConfig, ShutdownConfig, StreamSpec, WorkerConfig
from consumer.examples.async_webhook import AsyncWebhook, WebhookError, WebhookTarget
from consumer.leases.dynamodb import DynamoDBLeaseRepository
from consumer.lifecycle.processor import ProcessRecordsInput
from consumer.lifecycle.worker import Worker
from consumer.metrics.sink import InMemoryMetrics
from consumer.records import Record
from consumer.retrieval.kinesis import BotoKinesis

from .support import LEASES, create_stream, make_names, put_records, run_in_thread, wait_until
from .test_async_webhook import receiver

pytestmark = pytest.mark.integration


@contextmanager
def deaf_receiver() -> Iterator[int]:
    """Accepts connections and never reads from them (nor answers, nor closes): a receiver that hangs."""
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)

    threading.Thread(target=accept, name="deaf-receiver", daemon=True).start()
    try:
        yield server.getsockname()[1]
    finally:
        server.close()
        for conn in held:
            conn.close()


class _Guard:
    epoch = 1

    def is_valid(self) -> bool:
        return True

    def ensure_valid(self) -> None:
        return None


def test_a_receiver_that_stops_reading_a_large_batch_fails_the_attempt_within_the_timeout() -> None:
    # 4 records of 1 MB: more than the socket buffers hold, so the sender is left with unsent bytes.
    records = [
        Record("s", "shardId-000000000000", str(i), 0, "pk", b"x" * 1_000_000, datetime.now(UTC))
        for i in range(4)
    ]
    batch = ProcessRecordsInput(records, None, 1, 0, _Guard())  # type: ignore[arg-type]
    with deaf_receiver() as port:
        target = WebhookTarget(f"http://127.0.0.1:{port}/", timeout=1, retry_for=0)

        async def attempt() -> float:
            began = time.monotonic()
            with pytest.raises(WebhookError, match="TimeoutError"):
                await asyncio.wait_for(AsyncWebhook(target).process_records(batch), 20)
            return time.monotonic() - began

        took = asyncio.run(attempt())
    # The send times out after 1 s; closing the connection must not then wait for the deaf receiver.
    assert took < 5, f"the attempt took {took:.1f} s"


class Faults:
    """What the receiver does to each request in turn, then 200 for every later one."""

    def __init__(self, *plan: str) -> None:
        self.plan = list(plan)
        self.lock = threading.Lock()
        self.failed: list[tuple[str, float]] = []

    def next(self) -> str:
        with self.lock:
            fault = self.plan.pop(0) if self.plan else "ok"
            if fault != "ok":
                self.failed.append((fault, time.monotonic()))
            return fault


def test_an_outage_of_the_endpoint_is_retried_by_the_processor_without_a_halt_or_a_flood(
    emulators, kinesis_client, dynamodb_client, unique_name
) -> None:
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 1)
    payloads = [f"r{i}".encode() for i in range(30)]
    put_records(kinesis_client, names.stream, payloads)
    faults = Faults("500", "500", "close", "hang", "503", "close", "500")
    with receiver() as server:
        handle = server.RequestHandlerClass.do_POST

        def do_post(h: Any) -> None:
            fault = faults.next()
            if fault == "ok":
                return handle(h)
            h.rfile.read(int(h.headers["Content-Length"]))
            if fault == "close":
                h.close_connection = True
                h.connection.shutdown(socket.SHUT_RDWR)  # no answer at all
            elif fault == "hang":
                time.sleep(1.5)  # past the processor's 1 s timeout
                h.close_connection = True
            else:
                h.send_response(int(fault))
                h.send_header("Content-Length", "0")
                h.end_headers()

        server.RequestHandlerClass = type("Faulty", (server.RequestHandlerClass,), {"do_POST": do_post})
        target = WebhookTarget(server.url, timeout=1, retry_for=60, retry_base=0.05, retry_max=0.4)
        ddb = emulators.client("dynamodb")
        config = WorkerConfig(
            application="it",
            lease_table=names.lease_table,
            checkpoint_table=names.checkpoint_table,
            worker_id="w1",
            streams=(StreamSpec(names.stream, lambda: AsyncWebhook(target)),),
            lease=LEASES,
            retrieval=RetrievalConfig(idle_time_between_reads=0.05, max_records=10),
            processing=ProcessingConfig(),  # the defaults: 3 attempts, then halt
            shutdown=ShutdownConfig(deadline=10.0),
        )
        worker = Worker(
            config,
            DynamoDBLeaseRepository(ddb, names.lease_table, names.checkpoint_table),
            DynamoDBCheckpointStore(ddb, names.checkpoint_table),
            BotoKinesis(emulators.client("kinesis")),
            metrics=InMemoryMetrics(),
        )
        t = run_in_thread(worker)
        try:
            wait_until(lambda: server.total() >= len(payloads), timeout=60, what="every record accepted")
            assert not any(o.halted for o in worker.owned.values())
        finally:
            worker.request_shutdown()
            t.join(30)
        with server.lock:
            assert server.accepted == {"shardId-000000000000": payloads}  # once each, in order
    # One request per attempt of the batch: no request per record, and the attempts spread out (backoff).
    assert [f for f, _ in faults.failed] == ["500", "500", "close", "hang", "503", "close", "500"]
    gaps = [b - a for (_, a), (_, b) in zip(faults.failed, faults.failed[1:], strict=False)]
    assert all(gap >= 0.025 for gap in gaps), gaps
