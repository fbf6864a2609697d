"""Slow calls cannot starve heartbeats (over the network, on the emulators): the coordinator's DynamoDB calls
black-holed by a proxy that holds every response, and discovery's ListShards held past its client's read timeout
for more than two discoveries, while the heartbeat lane's own client reaches DynamoDB: no shard suspends,
deliveries never pause, and a SIGTERM during a held ListShards finishes within its deadline.

Time is scaled down by SCALE from the production clients' (10 s Kinesis and 3 s DynamoDB read timeouts, a
30 s hold, 65 s of held discovery, a 10 s shutdown deadline): the held clients get read timeouts SCALE times
shorter (a client setting, ``make_client(config=...)``) and every duration of the sequence shrinks with them, so
each step still outlasts what it must (a hold, every attempt of a call, two discoveries, the shutdown deadline)
by the same ratio. The lease (3 s) and the heartbeat lane's client are not scaled: a pause of 3 s in delivery
and a single closed-window sample still fail the test."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import boto3
import pytest
from botocore.config import Config

from consumer.aws import heartbeat_config, make_client
from consumer.checkpoint.dynamodb import DynamoDBCheckpointStore
from consumer.config import RetrievalConfig, ShutdownConfig, StreamSpec, WorkerConfig
from consumer.leases.dynamodb import DynamoDBLeaseRepository
from consumer.lifecycle.processor import BaseProcessor, ProcessRecordsInput
from consumer.lifecycle.worker import Worker
from consumer.retrieval.kinesis import BotoKinesis
from tools.tcp_proxy import FaultProxy, address

from .support import LEASES, create_stream, make_names, wait_until

pytestmark = pytest.mark.integration

SCALE = 4.0  # every duration below is the production clients' divided by this
LIST_READ_TIMEOUT = 10.0 / SCALE  # the discovery client's read timeout (Kinesis clients: 10 s)
DDB_READ_TIMEOUT = 3.0 / SCALE  # the coordinator's DynamoDB client's read timeout (DynamoDB clients: 3 s)
HOLD = 30.0 / SCALE  # seconds every response through a held proxy waits (three read timeouts of ListShards)
# The coordinator's calls all held: longer than one call's three attempts (as 12 s was, for 3 s timeouts), and
# not scaled below two leases, so that a heartbeat waiting on the coordinator would let the window close.
COORDINATOR_HELD = max(12.0 / SCALE, 2 * LEASES.lease_duration)
# Seconds ListShards stays held: more than two discoveries' worth (each three read timeouts, botocore's backoff
# between them, then the discovery interval), so that the SIGTERM lands during a third one. (Unscaled it was 65 s;
# the discovery interval, 0.5 s, is not scaled, so 65 / SCALE would land at the very start of the third.)
HELD_FOR = 2 * (3 * LIST_READ_TIMEOUT + LEASES.discovery_interval) + 1.5 * LIST_READ_TIMEOUT
DEADLINE = 10.0 / SCALE  # the shutdown deadline: a third of one held discovery
PUT_EVERY = 0.1


class Timeline(BaseProcessor):
    """Notes when each record arrived, per shard."""

    def __init__(self, seen: list[tuple[float, str, bytes]]) -> None:
        self.seen = seen

    def process_records(self, data: ProcessRecordsInput) -> None:
        now = time.monotonic()
        self.seen.extend((now, r.shard_id, r.data) for r in data.records)


class DiscoveryThrough:
    """Kinesis for a worker: ListShards through one client (the held proxy), every read through another."""

    def __init__(self, reads: BotoKinesis, discovery: BotoKinesis) -> None:
        self._reads, self._discovery = reads, discovery

    def list_shards(self, stream: str) -> Any:
        return self._discovery.list_shards(stream)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reads, name)


@contextmanager
def producing(kinesis: Any, stream: str) -> Iterator[list[bytes]]:
    """Puts a record every 0.1 s (partition keys spread over both shards) until the block ends."""
    sent: list[bytes] = []
    stop = threading.Event()

    def run() -> None:
        n = 0
        while not stop.wait(PUT_EVERY):
            data = f"r{n}".encode()
            kinesis.put_record(StreamName=stream, Data=data, PartitionKey=f"k{n % 16}")
            sent.append(data)
            n += 1

    thread = threading.Thread(target=run, name="producer", daemon=True)
    thread.start()
    try:
        yield sent
    finally:
        stop.set()
        thread.join(5)


def _longest_pause(seen: list[tuple[float, str, bytes]], since: float, until: float) -> float:
    """The longest time within [since, until] during which some shard delivered nothing."""
    worst = 0.0
    for shard in {s for _, s, _ in seen}:
        times = [since, *sorted(t for t, s, _ in seen if s == shard and since <= t <= until), until]
        worst = max(worst, *(b - a for a, b in itertools.pairwise(times)))
    return worst


@contextmanager
def watching_validity(worker: Worker) -> Iterator[Callable[[], int]]:
    """Samples the worker's own validity every 20 ms; yields how many samples found it closed."""
    closed = [0]
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(0.02):
            if not worker.validity.valid():
                closed[0] += 1

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield lambda: closed[0]
    finally:
        stop.set()
        thread.join(2)


def test_held_coordinator_calls_and_listshards_starve_no_heartbeat(
    emulators, kinesis_client, dynamodb_client, unique_name
) -> None:
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 2)
    env = emulators.env()
    session = boto3.session.Session(
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        region_name=emulators.region,
    )
    seen: list[tuple[float, str, bytes]] = []
    config = WorkerConfig(
        application="slow-calls",
        lease_table=names.lease_table,
        checkpoint_table=names.checkpoint_table,
        worker_id="w1",
        streams=(StreamSpec(names.stream, lambda: Timeline(seen)),),
        lease=LEASES,
        retrieval=RetrievalConfig(idle_time_between_reads=0.2, max_records=500),
        shutdown=ShutdownConfig(deadline=DEADLINE, final_checkpoint_timeout=DEADLINE / 2),
    )
    with (
        FaultProxy(address(emulators.aws_endpoint)) as ddb_proxy,
        FaultProxy(address(emulators.kinesis_endpoint)) as list_proxy,
    ):
        direct_ddb = make_client("dynamodb", endpoint_url=emulators.aws_endpoint, session=session)
        held_ddb = make_client(
            "dynamodb",
            endpoint_url=ddb_proxy.url(),
            session=session,
            config=Config(read_timeout=DDB_READ_TIMEOUT),
        )
        heartbeat_ddb = make_client(
            "dynamodb",
            endpoint_url=emulators.aws_endpoint,
            session=session,
            config=heartbeat_config(LEASES.owner_validity),
        )
        kinesis = DiscoveryThrough(
            BotoKinesis(make_client("kinesis", endpoint_url=emulators.kinesis_endpoint, session=session)),
            BotoKinesis(
                make_client(
                    "kinesis",
                    endpoint_url=list_proxy.url(),
                    session=session,
                    config=Config(read_timeout=LIST_READ_TIMEOUT),
                )
            ),
        )
        worker = Worker(
            config,
            DynamoDBLeaseRepository(held_ddb, names.lease_table, names.checkpoint_table),
            DynamoDBCheckpointStore(direct_ddb, names.checkpoint_table),
            kinesis,  # type: ignore[arg-type]
            heartbeats=DynamoDBLeaseRepository(heartbeat_ddb, names.lease_table, names.checkpoint_table),
        )
        thread = threading.Thread(target=worker.run, name="worker", daemon=True)
        with producing(kinesis_client, names.stream):
            thread.start()
            wait_until(lambda: len(worker.owned) == 2 and len({s for _, s, _ in seen}) == 2, timeout=30)
            # 1. The coordinator's DynamoDB calls (inbox reads, scans, leader checks) held past every timeout.
            begin = time.monotonic()
            with watching_validity(worker) as closed:
                ddb_proxy.fault("slow", delay=HOLD)
                list_proxy.fault("slow", delay=HOLD)  # 2. and every ListShards held as well, from now on
                wait_until(
                    lambda: time.monotonic() - begin > COORDINATOR_HELD,
                    timeout=COORDINATOR_HELD + 8,
                    what="the coordinator's calls held",
                )
                ddb_proxy.heal()
                # 3. ListShards alone stays held, HOLD at a time (one discovery, its client's three attempts
                # past their read timeout, then the next one), for over two discoveries; deliveries go on.
                wait_until(
                    lambda: time.monotonic() - begin > HELD_FOR,
                    timeout=HELD_FOR,
                    what="two discoveries' worth of held calls",
                )
                assert closed() == 0, "the worker's window closed: a slow call starved its heartbeats"
            # Deliveries go on: no shard waits anywhere near a held call (HOLD); a loaded machine may add a second.
            assert _longest_pause(seen, begin, time.monotonic()) < 3.0
            assert len(worker.owned) == 2
            # 4. SIGTERM with a ListShards still held: the shutdown finishes within its deadline.
            stopped_at = time.monotonic()
            worker.request_shutdown()
            thread.join(config.shutdown.deadline + 5)
            took = time.monotonic() - stopped_at
        list_proxy.heal()
    assert not thread.is_alive()
    assert took < config.shutdown.deadline, f"shutdown took {took:.1f} s"
