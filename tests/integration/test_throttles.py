"""Every call site survives its throttle, over the network: the emulators' limits layer answers each call as AWS
does past its quota, and a worker built as the CLI builds it (``create_worker``: one botocore attempt per call,
the worker's own retry policies) slows down without stalling, skips and repeats nothing, never gives a shard up
or moves it, and counts the throttles per operation.

Kinesis limits are set per test by a limits proxy of the test's own in front of the session's Kinesis endpoint;
DynamoDB limits by tables created with a small provisioned capacity (the limits layer in moto applies a
provisioned table's own units, as AWS does)."""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import boto3
import pytest

from consumer import create_worker
from consumer.config import (
    CheckpointConfig,
    LeaseConfig,
    RetrievalConfig,
    ShutdownConfig,
    StreamSpec,
    WorkerConfig,
)
from consumer.lifecycle.processor import BaseProcessor, ProcessRecordsInput
from consumer.metrics.sink import InMemoryMetrics
from tests.integration.support import Names, create_stream, make_names
from tests.unit.helpers import wait_until
from tools.emulators.endpoints import client_kwargs
from tools.emulators.kinesis_proxy import KinesisLimitsProxy
from tools.emulators.limits import Limits
from tools.emulators.settings import ACCESS_KEY_ID, SECRET_ACCESS_KEY

LEASES = LeaseConfig(lease_duration=3.0, safety_margin=0.8, scan_interval=0.25, discovery_interval=1.0)


class Collector(BaseProcessor):
    """Every record delivered, with when; optionally holds the first batch of each shard for a while."""

    def __init__(self, seen: list[tuple[str, str, bytes, float]], lock: threading.Lock, hold: float = 0.0):
        self.seen, self.lock, self.hold = seen, lock, hold
        self.held = False

    def process_records(self, data: ProcessRecordsInput) -> None:
        if self.hold and not self.held:
            self.held = True
            time.sleep(self.hold)  # longer than an iterator lives: the one fetched ahead expires
        now = time.monotonic()
        with self.lock:
            self.seen.extend((r.shard_id, r.sequence_number, r.data, now) for r in data.records)


def _upstream(emulators: Any) -> tuple[str, int]:
    """The session's Kinesis endpoint (itself behind the default limits): the test's proxy goes in front."""
    host, _, port = emulators.kinesis_endpoint.removeprefix("http://").rpartition(":")
    return host, int(port)


@pytest.fixture
def limited_kinesis(emulators: Any) -> Iterator[Callable[[Limits], str]]:
    """Start a limits proxy with the given limits in front of kinesis-local; returns its endpoint."""
    proxies: list[KinesisLimitsProxy] = []

    def start(limits: Limits) -> str:
        proxy = KinesisLimitsProxy(_upstream(emulators), limits).start()
        proxies.append(proxy)
        return proxy.url()

    yield start
    for proxy in proxies:
        proxy.stop()


def _session(emulators: Any) -> boto3.session.Session:
    return boto3.session.Session(
        aws_access_key_id=ACCESS_KEY_ID, aws_secret_access_key=SECRET_ACCESS_KEY, region_name=emulators.region
    )


def _config(names: Names, factory: Callable[[], BaseProcessor], **retrieval: Any) -> WorkerConfig:
    return WorkerConfig(
        application="throttles",
        lease_table=names.lease_table,
        checkpoint_table=names.checkpoint_table,
        worker_id="w-throttled",
        streams=(StreamSpec(names.stream, factory),),
        lease=LEASES,
        retrieval=RetrievalConfig(**retrieval),  # the defaults' pacing, unless a test says otherwise
        checkpoint=CheckpointConfig(),
        shutdown=ShutdownConfig(deadline=10.0),
    )


class Producer:
    """Writes ``rate`` records a second per stream (well within 1,000 per shard) until stopped."""

    def __init__(self, kinesis: Any, stream: str, rate: int, seconds: float) -> None:
        self.kinesis, self.stream, self.rate, self.seconds = kinesis, stream, rate, seconds
        self.sent: set[bytes] = set()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Producer:
        self._thread.start()
        return self

    def join(self) -> None:
        self._thread.join(self.seconds + 30)

    def _run(self) -> None:
        n, end = 0, time.monotonic() + self.seconds
        while time.monotonic() < end:
            batch = [f"r-{n + i}".encode() for i in range(self.rate // 5)]
            entries = [{"Data": d, "PartitionKey": d.decode()} for d in batch]
            while entries:
                out = self.kinesis.put_records(StreamName=self.stream, Records=entries)
                entries = [e for e, r in zip(entries, out["Records"], strict=True) if "ErrorCode" in r]
            self.sent.update(batch)
            n += len(batch)
            time.sleep(0.2)


def _leases(dynamodb: Any, table: str) -> dict[str, tuple[str, int]]:
    """shard -> (owner, epoch) as the lease table holds them."""
    out = {}
    for item in dynamodb.scan(TableName=table, ConsistentRead=True)["Items"]:
        if "owner" in item and "epoch" in item and "shardId" in item["lease_key"]["S"]:
            out[item["lease_key"]["S"].rsplit("#", 1)[-1]] = (item["owner"]["S"], int(item["epoch"]["N"]))
    return out


def _check_delivery(seen: list[tuple[str, str, bytes, float]], sent: set[bytes]) -> None:
    data = [d for _, _, d, _ in seen]
    assert set(data) == sent, f"missing {len(sent - set(data))}, unexpected {len(set(data) - sent)}"
    assert len(data) == len(set(data)), "a record was delivered twice"
    by_shard: dict[str, list[int]] = {}
    for shard, seq, _, _ in seen:
        by_shard.setdefault(shard, []).append(int(seq))
    for shard, seqs in by_shard.items():
        assert seqs == sorted(seqs), f"{shard} out of order"


def _run_until_delivered(worker: Any, producer: Producer, seen: list[Any], lock: threading.Lock) -> None:
    worker.start()
    try:
        producer.start()
        producer.join()
        wait_until(lambda: len(seen) >= len(producer.sent), timeout=60, what="every record delivered")
    finally:
        worker.stop(15)
        worker.join(15)


def test_getrecords_and_iterators_throttled_slow_the_owner_down_and_never_move_the_shard(
    emulators: Any,
    kinesis_client: Any,
    dynamodb_client: Any,
    unique_name: Any,
    limited_kinesis: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 2)
    # Half the calls the worker's default pace makes, and one iterator a second.
    endpoint = limited_kinesis(Limits(get_records_per_shard=2, get_shard_iterator_per_shard=1))
    seen: list[tuple[str, str, bytes, float]] = []
    lock = threading.Lock()
    metrics = InMemoryMetrics()
    worker = create_worker(
        _config(names, lambda: Collector(seen, lock)),
        session=_session(emulators),
        endpoints={"kinesis": endpoint, "dynamodb": emulators.aws_endpoint},
        metrics=metrics,
        metrics_interval=0.5,
    )
    leases_before: dict[str, tuple[str, int]] = {}
    producer = Producer(kinesis_client, names.stream, rate=200, seconds=6)
    caplog.set_level(logging.INFO)

    def started() -> bool:
        leases_before.update(_leases(dynamodb_client, names.lease_table))
        return len(leases_before) == 2

    worker.start()
    try:
        wait_until(started, timeout=30, what="both shards owned")
        producer.start()
        producer.join()
        wait_until(lambda: len(seen) >= len(producer.sent), timeout=60, what="every record delivered")
        leases_after = _leases(dynamodb_client, names.lease_table)
    finally:
        worker.stop(15)
        worker.join(15)

    _check_delivery(seen, producer.sent)
    assert metrics.total("Throttles.GetRecords") > 0
    events = [getattr(r, "event", "") for r in caplog.records]
    assert "shard_giving_up" not in events and "transient_failure" not in events
    # No shard moved: the epochs the worker first took are the ones it released at the end.
    assert leases_after == leases_before
    # No stall: while the producer wrote, deliveries never paused for long on any shard.
    for shard in {s for s, _, _, _ in seen}:
        times = [t for s, _, _, t in seen if s == shard]
        assert max(b - a for a, b in itertools.pairwise(times)) < 4.0


def test_an_expired_iterator_is_renewed_at_the_last_record_taken(
    emulators: Any,
    kinesis_client: Any,
    dynamodb_client: Any,
    unique_name: Any,
    limited_kinesis: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 1)
    endpoint = limited_kinesis(Limits(iterator_ttl_seconds=1.0))
    seen: list[tuple[str, str, bytes, float]] = []
    lock = threading.Lock()
    caplog.set_level(logging.INFO)
    worker = create_worker(
        _config(names, lambda: Collector(seen, lock, hold=2.5), max_records=50),
        session=_session(emulators),
        endpoints={"kinesis": endpoint, "dynamodb": emulators.aws_endpoint},
        metrics=InMemoryMetrics(),
    )
    producer = Producer(kinesis_client, names.stream, rate=100, seconds=4)
    _run_until_delivered(worker, producer, seen, lock)
    _check_delivery(seen, producer.sent)
    assert "iterator_expired" in [getattr(r, "event", "") for r in caplog.records]


def _spend_burst(emulators: Any, table: str) -> None:
    """Use up the table's burst capacity (AWS keeps 5 minutes of unused units) with 10 KB items (10 WCU each)
    until a write is refused: from then on the table takes its provisioned rate and no more."""
    client = emulators.client("dynamodb", retries={"total_max_attempts": 1})
    for i in range(200):
        try:
            client.put_item(
                TableName=table, Item={"lease_key": {"S": f"filler#{i}"}, "pad": {"S": "x" * 10_000}}
            )
        except client.exceptions.ProvisionedThroughputExceededException:
            return
    raise AssertionError("the provisioned table never throttled")


def test_checkpoint_writes_throttled_by_a_small_table_are_retried_and_land(
    emulators: Any,
    kinesis_client: Any,
    dynamodb_client: Any,
    unique_name: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    names = make_names(unique_name, dynamodb_client)
    dynamodb_client.update_table(
        TableName=names.checkpoint_table,
        BillingMode="PROVISIONED",
        ProvisionedThroughput={"ReadCapacityUnits": 50, "WriteCapacityUnits": 1},
    )
    _spend_burst(emulators, names.checkpoint_table)
    create_stream(kinesis_client, names.stream, 2)
    seen: list[tuple[str, str, bytes, float]] = []
    lock = threading.Lock()
    metrics = InMemoryMetrics()
    caplog.set_level(logging.INFO)
    worker = create_worker(
        _config(names, lambda: Collector(seen, lock), max_records=20),
        session=_session(emulators),
        endpoints={"kinesis": emulators.kinesis_endpoint, "dynamodb": emulators.aws_endpoint},
        metrics=metrics,
        metrics_interval=0.5,
    )
    # 200 records in batches of 20: about ten checkpoint writes, several a second, against one write unit a
    # second with no burst left (each write past the first of its second is throttled and retried; the time
    # the test takes is about one second per write).
    producer = Producer(kinesis_client, names.stream, rate=100, seconds=2)
    _run_until_delivered(worker, producer, seen, lock)
    _check_delivery(seen, producer.sent)
    throttled = {n: v for (n, _, _), v in metrics.values.items() if n.startswith("Throttles.")}
    assert sum(throttled.values()) > 0, throttled
    assert "shard_giving_up" not in [getattr(r, "event", "") for r in caplog.records]
    # Every shard's final checkpoint is at its last record.
    last = {}
    for shard, seq, _, _ in seen:
        last[shard] = max(last.get(shard, 0), int(seq))
    stored = {
        i["lease_key"]["S"].rsplit("#", 1)[-1]: int(i["sequence"]["S"])
        for i in dynamodb_client.scan(TableName=names.checkpoint_table, ConsistentRead=True)["Items"]
        if "sequence" in i and not i["lease_key"]["S"].startswith("filler#")
    }
    assert stored == last


def test_a_fleet_starting_at_once_is_throttled_on_its_checks_and_discovery_and_reads_everything(
    emulators: Any,
    kinesis_client: Any,
    dynamodb_client: Any,
    unique_name: Any,
    limited_kinesis: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 2)
    # One DescribeStreamSummary a second per account (AWS: 20) and one ListShards a second per stream (AWS:
    # 1,000): four workers checking their stream and discovering its shards at once are refused.
    endpoint = limited_kinesis(Limits(describe_stream_summary_per_account=1, list_shards_per_stream=1))
    seen: list[tuple[str, str, bytes, float]] = []
    lock = threading.Lock()
    caplog.set_level(logging.INFO)
    metrics = [InMemoryMetrics() for _ in range(4)]
    workers: list[Any] = [None] * 4

    def create(i: int) -> None:
        config = replace(_config(names, lambda: Collector(seen, lock)), worker_id=f"fleet-{i}")
        workers[i] = create_worker(
            config,
            session=_session(emulators),
            endpoints={"kinesis": endpoint, "dynamodb": emulators.aws_endpoint},
            metrics=metrics[i],
            metrics_interval=0.5,
        )

    threads = [threading.Thread(target=create, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(w is not None for w in workers), "a worker's start-up checks failed"
    producer = Producer(kinesis_client, names.stream, rate=100, seconds=4)
    # Another application lists the stream's shards through the same limits, every 50 ms: it takes the
    # stream's one call a second within 50 ms of its freeing, whenever that is, so the leader's discovery (every
    # second) meets the limit on most calls. (At 0.3 s the leader's own cadence, a second after its last
    # success, won the freed slot nearly every time: discovery was throttled only now and then.)
    kwargs = client_kwargs(endpoint, region=emulators.region, retries={"total_max_attempts": 1})
    other = boto3.session.Session().client("kinesis", **kwargs)
    done = threading.Event()

    def lister() -> None:
        while not done.wait(0.05):
            with contextlib.suppress(other.exceptions.LimitExceededException):
                other.list_shards(StreamName=names.stream)

    listing = threading.Thread(target=lister, daemon=True)
    for w in workers:
        w.start()
    try:
        listing.start()
        producer.start()
        producer.join()
        wait_until(lambda: len(seen) >= len(producer.sent), timeout=60, what="every record delivered")
        wait_until(
            lambda: sum(m.total("Throttles.ListShards") for m in metrics) > 0,
            timeout=30,
            what="discovery throttled",
        )
    finally:
        done.set()
        for w in workers:
            w.stop(15)
        for w in workers:
            w.join(15)
    data = [d for _, _, d, _ in seen]
    assert set(data) == producer.sent  # at least once across the fleet's start (leases may move as it forms)
    events = [getattr(r, "event", "") for r in caplog.records]
    assert "call_throttled" in events  # the checks met DescribeStreamSummary's limit and tried again
    assert "shard_giving_up" not in events and "worker_failed" not in events
