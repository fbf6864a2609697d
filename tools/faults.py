"""Fault scenarios over the real network: one worker reaches Kinesis and DynamoDB through fault proxies, a
second one directly, a producer puts a record every 50 ms. :func:`run_scenario` breaks one endpoint of the
first worker for a while (or tightens its Kinesis limits: a throttle must not move the shard), heals it, and
measures records lost, delivered twice, two owners at once, and the seconds from the fault's end to progress."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

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
from tools.fleet.runner import poll
from tools.tcp_proxy import FaultProxy, address

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
_BOUND = LEASE.lease_duration + 5.0  # what the issue allows from a fault's end to progress


@dataclass(frozen=True)
class Scenario:
    """One fault of the faulty worker's Kinesis or DynamoDB."""

    name: str
    target: str  # "kinesis" or "dynamodb": which endpoint of the faulty worker breaks
    mode: str  # a FaultProxy.outage mode or a key of _LIMIT_FAULTS
    seconds: float  # how long the fault lasts
    delay: float = 0.0  # slow: how long each response is held (more than the client's read timeout)
    retrieval: Literal["polling", "fanout"] = (
        "polling"  # fanout:: SubscribeToShard through a FaultProxy(eventstream=True)
    )


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


@dataclass
class FaultResult:
    """What one run of a scenario measured."""

    scenario: str
    produced: int
    delivered: int  # distinct records delivered
    lost: int
    delivered_twice: int
    epochs_in_order: bool  # no delivery of an older ownership after one of a newer: never two owners
    recovery_s: float | None  # fault's end -> first delivery of a record put after it
    bound_s: float  # _BOUND (2 s while the lease stays valid)
    owners: list[str] = field(default_factory=list)  # which workers delivered


@dataclass
class _Journal(BaseProcessor):
    """Notes every delivery: (monotonic time, worker, sequence, epoch)."""

    rows: list[tuple[float, str, str, int]]
    worker: str

    def process_records(self, data: ProcessRecordsInput) -> None:
        now = time.monotonic()
        self.rows.extend([(now, self.worker, r.sequence_number, data.epoch) for r in data.records])  # at once


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
    session = boto3.session.Session(ACCESS_KEY_ID, SECRET_ACCESS_KEY, region_name=ep.region)
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
    ddb = make_client("dynamodb", endpoint_url=aws_url, session=session, config=WORKER_CALLS)
    return Worker(
        config,
        DynamoDBLeaseRepository(ddb, names["leases"], names["checkpoints"]),
        DynamoDBCheckpointStore(ddb, names["checkpoints"]),
        BotoKinesis(make_client("kinesis", endpoint_url=kinesis_url, session=session, config=WORKER_CALLS)),
    )


def _wait(cond: Any, timeout: float, what: str) -> None:
    if not poll(cond, timeout, 0.02):
        raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


def _delivered_after(
    since: float, puts: list[tuple[float, str]], rows: list[tuple[float, str, str, int]], what: str
) -> None:
    """Wait for a record put after ``since``, then for its delivery."""
    _wait(lambda: any(p > since for p, _ in puts), 5, f"a record put ({what})")
    after = {seq for p, seq in puts if p > since}
    _wait(lambda: any(seq in after for _, _, seq, _ in list(rows)), _BOUND + 10, what)


@contextlib.contextmanager
def _running(worker: Worker) -> Iterator[None]:
    t = threading.Thread(target=worker.run, daemon=True, name=f"worker-{worker.id}")
    t.start()
    try:
        yield
    finally:
        worker.request_shutdown()
        t.join(30)


def run_scenario(ep: AwsEndpoints, s: Scenario) -> FaultResult:
    """Run one fault scenario against the emulators at ``ep``; see the module docstring."""
    suffix = uuid.uuid4().hex[:8]
    names = {name: f"faults-{name}-{suffix}" for name in ("stream", "leases", "checkpoints")}
    kinesis = ep.client("kinesis")
    create_tables(ep.client("dynamodb"), names["leases"], names["checkpoints"])
    kinesis.create_stream(StreamName=names["stream"], ShardCount=1)
    kinesis.get_waiter("stream_exists").wait(StreamName=names["stream"], WaiterConfig={"Delay": 0.2})
    rows: list[tuple[float, str, str, int]] = []
    puts: list[tuple[float, str]] = []
    stop = threading.Event()

    def produce() -> None:
        n = 0
        while not stop.wait(PUT_EVERY):
            out = kinesis.put_record(StreamName=names["stream"], Data=f"r{n}".encode(), PartitionKey="k")
            puts.append((time.monotonic(), out["SequenceNumber"]))
            n += 1

    fanout = s.retrieval == "fanout"
    retrieval = RetrievalConfig(mode=s.retrieval, fanout_consumer_name=names["stream"])
    producer = threading.Thread(target=produce, daemon=True)
    healed: float | None = None
    # a timeout ends the run: it shows as records lost or no recovery
    with contextlib.ExitStack() as running, contextlib.suppress(TimeoutError):
        # kinesis-local's event streams lack the initial-response event boto3 needs: the shim inserts it
        shim = FaultProxy(address(ep.kinesis_endpoint), eventstream=True) if fanout else None
        kinesis_url = running.enter_context(shim).url() if shim is not None else ep.kinesis_endpoint
        k_proxy = running.enter_context(FaultProxy(address(kinesis_url)))
        d_proxy = running.enter_context(FaultProxy(address(ep.aws_endpoint)))
        limits = KinesisLimitsProxy(address(kinesis_url), Limits()) if s.mode in _LIMIT_FAULTS else None
        faulty_kinesis = running.enter_context(limits).url() if limits is not None else k_proxy.url()
        running.callback(stop.set)
        faulty = _worker("faulty", ep, faulty_kinesis, d_proxy.url(), names, rows, retrieval)
        running.enter_context(_running(faulty))
        _wait(lambda: bool(faulty.owned), 30, "the faulty worker to own the shard")
        healthy = _worker("healthy", ep, kinesis_url, ep.aws_endpoint, names, rows, retrieval)
        running.enter_context(_running(healthy))
        producer.start()
        _wait(lambda: len(rows) >= 10, 30, "deliveries before the fault")
        if limits is None:
            with (k_proxy if s.target == "kinesis" else d_proxy).outage(s.mode, delay=s.delay or 30.0):
                time.sleep(s.seconds)  # the fault's length is the point of the scenario
        else:
            limits.set_limits(_LIMIT_FAULTS[s.mode])
            during = limits.limiter
            time.sleep(s.seconds)
            limits.set_limits(Limits())
            if not during.refusals:  # the faulty worker was never throttled: the run would prove nothing
                raise RuntimeError(f"{s.name}: the limits layer refused no call during the fault")
        healed = time.monotonic()
        _delivered_after(healed, puts, rows, "progress after the fault")
        # keep producing past the recovery: a record put after it must flow too
        _delivered_after(time.monotonic(), puts, rows, "records flowing after the recovery")
        stop.set()
        producer.join(5)
        produced = {seq for _, seq in puts}
        _wait(lambda: produced <= {r[2] for r in list(rows)}, _BOUND + 10, "every record delivered")
    return _result(s, rows, puts, healed)


def _result(
    s: Scenario, rows: list[tuple[float, str, str, int]], puts: list[tuple[float, str]], healed: float | None
) -> FaultResult:
    produced = {seq for _, seq in puts}
    seen = Counter(seq for _, _, seq, _ in rows)
    epochs = [epoch for _, _, _, epoch in rows]
    recovery = None
    if healed is not None:
        after = {seq for p, seq in puts if p > healed}
        first = min((t for t, _, seq, _ in rows if seq in after), default=None)
        recovery = None if first is None else round(first - healed, 3)
    return FaultResult(
        scenario=s.name,
        produced=len(produced),
        delivered=len(produced & set(seen)),
        lost=len(produced - set(seen)),
        delivered_twice=sum(1 for n in seen.values() if n > 1),
        epochs_in_order=epochs == sorted(epochs),
        recovery_s=recovery,
        bound_s=_BOUND,
        owners=sorted({w for _, w, _, _ in rows}),
    )
