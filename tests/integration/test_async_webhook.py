"""The asyncio example processor over the network: two real workers (``python -m consumer run``) POST every
batch to a local HTTP receiver; failures are retried without a skip, a SIGTERM hands the shards over with
nothing sent twice, and a receiver that fences by epoch keeps an older owner's batch out."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from consumer.errors import LeaseLostError
from consumer.examples.async_webhook import AsyncWebhook, WebhookTarget
from consumer.lifecycle.processor import ProcessRecordsInput
from consumer.records import Record

from .support import create_stream, make_names, put_records, spawn_worker, stop_process, wait_until

pytestmark = pytest.mark.integration


class Receiver(ThreadingHTTPServer):
    """Keeps what it accepted per shard, in arrival order; refuses (409) an epoch older than one it saw;
    answers 503 to the first ``failures`` requests."""

    daemon_threads = True

    def __init__(self, failures: int = 0) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.accepted: dict[str, list[bytes]] = {}
        self.epochs: dict[str, int] = {}
        self.failures = failures
        self.refused = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/batches"

    def total(self) -> int:
        with self.lock:
            return sum(len(v) for v in self.accepted.values())


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        shard, epoch = self.headers["X-Kinesis-Shard"], int(self.headers["X-Kinesis-Epoch"])
        with self.server.lock:
            if self.server.failures > 0:
                self.server.failures -= 1
                status = 503
            elif epoch < self.server.epochs.get(shard, 0):
                self.server.refused += 1
                status = 409
            else:
                self.server.epochs[shard] = epoch
                lines = [json.loads(line) for line in body.splitlines()]
                assert {line["epoch"] for line in lines} == {epoch}
                self.server.accepted.setdefault(shard, []).extend(
                    base64.b64decode(line["data_base64"]) for line in lines
                )
                status = 200
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return


@contextmanager
def receiver(failures: int = 0) -> Iterator[Receiver]:
    server = Receiver(failures)
    thread = threading.Thread(target=server.serve_forever, name="webhook-receiver", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _by_shard(put: list[dict], data: list[bytes]) -> dict[str, list[bytes]]:
    out: dict[str, list[bytes]] = {}
    for r, d in zip(put, data, strict=True):
        out.setdefault(r["ShardId"], []).append(d)
    return out


def test_two_workers_post_every_batch_in_order_retry_failures_and_hand_off_without_resending(
    emulators, kinesis_client, dynamodb_client, unique_name, tmp_path
) -> None:
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 4)
    first = [f"a{i}".encode() for i in range(120)]
    expected = _by_shard(put_records(kinesis_client, names.stream, first), first)
    with receiver(failures=3) as server:
        env = {
            "CONSUMER_PROCESSOR": "consumer.examples.async_webhook:AsyncWebhook",
            "WEBHOOK_URL": server.url,
        }
        a = spawn_worker(emulators, names, "a", tmp_path / "a.jsonl", **env)
        b = spawn_worker(emulators, names, "b", tmp_path / "b.jsonl", **env)
        try:
            wait_until(lambda: server.total() >= len(first), timeout=60, what="the first records")
            assert stop_process(a) == 0  # a hands its shards to b
            more = [f"b{i}".encode() for i in range(40)]
            for shard, records in _by_shard(put_records(kinesis_client, names.stream, more), more).items():
                expected[shard] = expected.get(shard, []) + records
            wait_until(lambda: server.total() >= len(first) + len(more), timeout=60, what="the later records")
        finally:
            codes = [stop_process(p) for p in (a, b)]
        assert codes == [0, 0]
        with server.lock:
            # Every record once, in shard order, across the retried failures and the hand-off.
            assert server.accepted == expected
            assert server.failures == 0 and server.refused == 0


class _Guard:
    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def is_valid(self) -> bool:
        return True

    def ensure_valid(self) -> None:
        return None


def _batch(epoch: int) -> ProcessRecordsInput:
    from datetime import UTC, datetime

    record = Record("s", "shardId-000000000000", "1", 0, "pk", b"x", datetime.now(UTC))
    return ProcessRecordsInput(
        [record], checkpointer=None, epoch=epoch, millis_behind_latest=0, guard=_Guard(epoch)
    )  # type: ignore[arg-type]


def test_a_receiver_that_fences_by_epoch_makes_the_older_owner_lose_its_lease() -> None:
    with receiver() as server:
        processor = AsyncWebhook(WebhookTarget(server.url, timeout=5))
        asyncio.run(processor.process_records(_batch(3)))  # the new owner wrote
        with pytest.raises(LeaseLostError, match="refused epoch 2"):
            asyncio.run(processor.process_records(_batch(2)))  # a former owner's late batch
        assert server.refused == 1 and server.accepted == {"shardId-000000000000": [b"x"]}
