"""Faults over the real network: one worker reaches Kinesis and DynamoDB through TCP fault proxies of our own
(loopback only), a second worker reaches them directly; a producer puts a record every 50 ms throughout.

``run_scenario`` injects one fault (an outage, resets, slow responses) for a while, heals it, and measures:
records lost, records delivered twice, whether two owners ever delivered at once (epochs in delivery order
never go back), and the seconds from the fault's end to the first delivery of a record put after it.

``LIMIT_SCENARIOS`` instead put the faulty worker's Kinesis behind a limits proxy of its own (AWS's quotas)
and tighten its limits for a while: GetRecords and GetShardIterator throttled, or iterators that expire
almost at once. A throttle must never move the shard: only the faulty worker delivers throughout.

``python -m bench.faults`` runs every scenario several times and writes reports/bench/faults.json and a
markdown table; tests/integration/test_faults.py runs each of ``SCENARIOS`` once and asserts on the result
(the limit scenarios are asserted by tests/integration/test_throttles.py).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import boto3

from consumer.aws import WORKER_CALLS, make_client
from consumer.checkpoint.dynamodb import DynamoDBCheckpointStore
from consumer.config import LeaseConfig, RetrievalConfig, ShutdownConfig, StreamSpec, WorkerConfig
from consumer.dynamo import create_tables
from consumer.leases.dynamodb import DynamoDBLeaseRepository
from consumer.lifecycle.processor import BaseProcessor, ProcessRecordsInput
from consumer.lifecycle.worker import Worker
from consumer.retrieval.kinesis import BotoKinesis
from tools.emulators import ACCESS_KEY_ID, SECRET_ACCESS_KEY, AwsEndpoints
from tools.emulators.kinesis_proxy import KinesisLimitsProxy
from tools.emulators.limits import Limits
from tools.tcp_proxy import FaultProxy

__all__ = ["LEASE", "LIMIT_SCENARIOS", "PUT_EVERY", "SCENARIOS", "FaultResult", "Scenario", "run_scenario"]

# Production-like timings scaled down so that a scenario takes seconds: a 4 s lease (validity 3 s), the
# default give-up bound (one lease duration) and the default polling cadence (0.25 s: 4 GetRecords/s).
LEASE = LeaseConfig(
    lease_duration=4.0,
    safety_margin=1.0,
    scan_interval=0.25,
    inbox_poll_interval=0.1,
    discovery_interval=2.0,
    idle_poll_interval=0.4,
    leader_check_interval=0.4,
)
PUT_EVERY = 0.05


@dataclass(frozen=True)
class Scenario:
    name: str
    target: str  # "kinesis" or "dynamodb": which endpoint of the faulty worker breaks
    mode: str  # a FaultProxy mode (tools.tcp_proxy.MODES) or a key of _LIMIT_FAULTS
    seconds: float  # how long the fault lasts
    delay: float = 0.0  # slow: how long each response is held (more than the client's read timeout)
    retrieval: str = "polling"  # or "fanout": SubscribeToShard through a FaultProxy(eventstream=True)


SCENARIOS = (
    Scenario("kinesis-outage-2s", "kinesis", "refuse", 2.0),
    Scenario("kinesis-outage-8s", "kinesis", "refuse", 8.0),
    Scenario("kinesis-resets-3s", "kinesis", "reset", 3.0),
    Scenario("kinesis-reset-mid-response-3s", "kinesis", "reset_mid_response", 3.0),
    Scenario("dynamodb-outage-2s", "dynamodb", "refuse", 2.0),
    Scenario("dynamodb-outage-8s", "dynamodb", "refuse", 8.0),
    Scenario("dynamodb-reset-mid-response-3s", "dynamodb", "reset_mid_response", 3.0),
    Scenario("dynamodb-slow-5s", "dynamodb", "slow", 5.0, delay=4.0),
    Scenario("fanout-kinesis-outage-8s", "kinesis", "refuse", 8.0, retrieval="fanout"),
    Scenario(
        "fanout-kinesis-reset-mid-response-3s", "kinesis", "reset_mid_response", 3.0, retrieval="fanout"
    ),
    Scenario("fanout-dynamodb-outage-8s", "dynamodb", "refuse", 8.0, retrieval="fanout"),
)


# The faulty worker's Kinesis limits while a limit fault lasts (AWS's own before and after).
_LIMIT_FAULTS = {
    "throttle": Limits(get_records_per_shard=1, get_shard_iterator_per_shard=1),
    "expire": Limits(iterator_ttl_seconds=0.1),
}
LIMIT_SCENARIOS = (
    Scenario("kinesis-throttled-8s", "kinesis", "throttle", 8.0),
    Scenario("kinesis-iterators-expiring-8s", "kinesis", "expire", 8.0),
)


@contextmanager
def _limited(proxy: KinesisLimitsProxy, mode: str) -> Iterator[None]:
    proxy.set_limits(_LIMIT_FAULTS[mode])
    try:
        yield
    finally:
        proxy.set_limits(Limits())


@dataclass
class FaultResult:
    scenario: str
    produced: int
    delivered: int  # distinct records delivered
    lost: int
    delivered_twice: int
    epochs_in_order: bool  # no delivery of an older ownership after one of a newer: never two owners
    recovery_s: float | None  # fault's end -> first delivery of a record put after it
    bound_s: float  # what the issue allows: lease duration + 5 s (2 s while the lease stays valid)
    owners: list[str] = field(default_factory=list)  # which workers delivered


class _Journal(BaseProcessor):
    """Every delivery: (monotonic time, worker, sequence, epoch)."""

    rows: list[tuple[float, str, str, int]]
    lock = threading.Lock()

    def __init__(self, rows: list[tuple[float, str, str, int]], worker: str) -> None:
        self.rows = rows
        self.worker = worker

    def process_records(self, data: ProcessRecordsInput) -> None:
        now = time.monotonic()
        with self.lock:
            self.rows.extend((now, self.worker, r.sequence_number, data.epoch) for r in data.records)


def _worker(
    wid: str,
    ep: AwsEndpoints,
    kinesis_url: str,
    aws_url: str,
    names: dict[str, str],
    rows: list[Any],
    retrieval: RetrievalConfig,
) -> Worker:
    """A worker with the project's own client configuration (timeouts, retries) at the given endpoints."""
    session = boto3.session.Session(
        aws_access_key_id=ACCESS_KEY_ID, aws_secret_access_key=SECRET_ACCESS_KEY, region_name=ep.region
    )
    ddb = make_client("dynamodb", endpoint_url=aws_url, session=session, config=WORKER_CALLS)
    config = WorkerConfig(
        application="faults",
        lease_table=names["leases"],
        checkpoint_table=names["checkpoints"],
        streams=(StreamSpec(names["stream"], lambda: _Journal(rows, wid)),),
        worker_id=wid,
        lease=LEASE,
        retrieval=retrieval,
        shutdown=ShutdownConfig(deadline=10.0),
    )
    return Worker(
        config,
        DynamoDBLeaseRepository(ddb, names["leases"], names["checkpoints"]),
        DynamoDBCheckpointStore(ddb, names["checkpoints"]),
        BotoKinesis(make_client("kinesis", endpoint_url=kinesis_url, session=session, config=WORKER_CALLS)),
    )


def _wait(cond: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


@contextmanager
def _running(worker: Worker) -> Iterator[threading.Thread]:
    t = threading.Thread(target=worker.run, daemon=True, name=f"worker-{worker.id}")
    t.start()
    try:
        yield t
    finally:
        worker.request_shutdown()
        t.join(30)


def _port(url: str) -> tuple[str, int]:
    host, _, port = url.rsplit("/", 1)[-1].partition(":")
    return host, int(port)


def run_scenario(ep: AwsEndpoints, s: Scenario) -> FaultResult:
    """Run one fault scenario against the emulators at ``ep``; see the module docstring."""
    suffix = uuid.uuid4().hex[:8]
    names = {
        "stream": f"faults-{suffix}",
        "leases": f"faults-l-{suffix}",
        "checkpoints": f"faults-c-{suffix}",
    }
    kinesis, ddb = ep.client("kinesis"), ep.client("dynamodb")
    create_tables(ddb, names["leases"], names["checkpoints"])
    kinesis.create_stream(StreamName=names["stream"], ShardCount=1)
    _wait(
        lambda: (
            kinesis.describe_stream_summary(StreamName=names["stream"])["StreamDescriptionSummary"][
                "StreamStatus"
            ]
            == "ACTIVE"
        ),
        30,
        "the stream",
    )
    rows: list[tuple[float, str, str, int]] = []
    puts: list[tuple[float, str]] = []
    stop = threading.Event()

    def produce() -> None:
        n = 0
        while not stop.wait(PUT_EVERY):
            out = kinesis.put_record(StreamName=names["stream"], Data=f"r{n}".encode(), PartitionKey="k")
            puts.append((time.monotonic(), out["SequenceNumber"]))
            n += 1

    retrieval = RetrievalConfig()
    shim = FaultProxy(_port(ep.kinesis_endpoint), eventstream=True).start()  # boto3 needs it for fan-out only
    kinesis_url = ep.kinesis_endpoint
    if s.retrieval == "fanout":
        retrieval = RetrievalConfig(mode="fanout", fanout_consumer_name=f"faults-{suffix}")
        kinesis_url = shim.url()
    k_proxy = FaultProxy(_port(kinesis_url)).start()
    d_proxy = FaultProxy(_port(ep.aws_endpoint)).start()
    proxy = k_proxy if s.target == "kinesis" else d_proxy
    limits = KinesisLimitsProxy(_port(kinesis_url), Limits()).start() if s.mode in _LIMIT_FAULTS else None
    faulty_kinesis = limits.url() if limits is not None else k_proxy.url()
    faulty = _worker("faulty", ep, faulty_kinesis, d_proxy.url(), names, rows, retrieval)
    healthy = _worker("healthy", ep, kinesis_url, ep.aws_endpoint, names, rows, retrieval)
    producer = threading.Thread(target=produce, daemon=True)
    healed: float | None = None
    try:
        with _running(faulty):
            _wait(lambda: bool(faulty.owned), 30, "the faulty worker to own the shard")
            with _running(healthy):
                producer.start()
                _wait(lambda: len(rows) >= 10, 30, "deliveries before the fault")
                fault = _limited(limits, s.mode) if limits else proxy.outage(s.mode, delay=s.delay or 30.0)
                with fault:
                    time.sleep(s.seconds)  # the fault's length is the point of the scenario
                healed = time.monotonic()
                bound = LEASE.lease_duration + 5.0
                _wait(lambda: any(p > healed for p, _ in puts), 5, "a record put after the fault")
                after = {seq for p, seq in puts if p > healed}
                _wait(lambda: any(seq in after for _, _, seq, _ in list(rows)), bound + 10, "progress")
                # keep producing past the recovery: a record put after it must flow too
                recovered = time.monotonic()
                _wait(lambda: any(p > recovered for p, _ in puts), 5, "a record put after the recovery")
                later = {seq for p, seq in puts if p > recovered}
                _wait(lambda: any(seq in later for _, _, seq, _ in list(rows)), bound + 10, "records flowing")
                stop.set()
                producer.join(5)
                produced = {seq for _, seq in puts}
                _wait(lambda: produced <= {r[2] for r in list(rows)}, bound + 10, "every record delivered")
    except TimeoutError:
        pass  # reported below as lost records or no recovery
    finally:
        stop.set()
        k_proxy.stop()
        d_proxy.stop()
        if limits is not None:
            limits.stop()
        shim.stop()
    return _result(s, rows, puts, healed)


def _result(
    s: Scenario, rows: list[tuple[float, str, str, int]], puts: list[tuple[float, str]], healed: float | None
) -> FaultResult:
    produced = {seq for _, seq in puts}
    seen: dict[str, int] = {}
    for _, _, seq, _ in rows:
        seen[seq] = seen.get(seq, 0) + 1
    epochs = [epoch for _, _, _, epoch in rows]
    recovery = None
    if healed is not None:
        after = {seq for p, seq in puts if p > healed}
        firsts = [t for t, _, seq, _ in rows if seq in after]
        recovery = round(min(firsts) - healed, 3) if firsts else None
    return FaultResult(
        scenario=s.name,
        produced=len(produced),
        delivered=len(produced & set(seen)),
        lost=len(produced - set(seen)),
        delivered_twice=sum(1 for n in seen.values() if n > 1),
        epochs_in_order=epochs == sorted(epochs),
        recovery_s=recovery,
        bound_s=LEASE.lease_duration + 5.0,
        owners=sorted({w for _, w, _, _ in rows}),
    )
