"""Leadership faults over the real network, against the emulators with real boto3 clients.

Worker ``a`` reaches DynamoDB (lease and checkpoint tables) through a TCP fault proxy of our own
(``tools.tcp_proxy.FaultProxy``, loopback only); worker ``b`` reaches it directly; both read Kinesis
directly. ``a`` starts first and leads; ``b`` joins and takes its fair share; a producer puts a record
into each of the four shards in turn every 50 ms throughout. Then ``a``'s DynamoDB breaks:

* cut off (connections refused, or reset) for longer than a lease (the reset case until ``b`` has
  forgotten ``a``'s silent worker item): ``b`` claims leadership, takes every shard and delivers it; once
  the cut heals, ``a`` never plans again, rejoins as a member and gets its fair share back through
  planned hand-offs;
* stalled, responses held (``FaultProxy`` ``slow``, longer than a lease): ``a`` hears nothing back while
  its requests still land at once; ``b`` claims leadership, fencing ``a``; the heartbeats ``a`` keeps
  sending land and are refused by their condition; once it resumes, ``a`` steps down and rejoins;
* stalled, requests held (``FaultProxy.hold``, longer than a lease): writes ``a`` sent while it still
  led and owned its shards reach DynamoDB after ``b`` took over, and each is refused by its condition
  (heartbeat: generation; checkpoint: epoch).

Each case asserts on the lease table and on every delivery: no record lost, never two owners delivering a
shard at once (per shard, epochs in delivery order never go back, and one worker per ownership), records
delivered again only at the start of an ownership (the previous owner's unchecked records) and never after
a planned hand-off. Every wait is on an event (the table, the deliveries) with a deadline. The in-process
versions on in-memory tables are in tests/unit/test_leadership_fleet.py; ``tools/faults.py`` has the
one-shard fault scenarios.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, cast

import boto3
import pytest

from consumer.aws import heartbeat_config, make_client
from consumer.checkpoint.dynamodb import DynamoDBCheckpointStore
from consumer.config import LeaseConfig, RetrievalConfig, ShutdownConfig, StreamSpec, WorkerConfig
from consumer.dynamo import create_tables
from consumer.leases.dynamodb import DynamoDBLeaseRepository
from consumer.leases.model import Leader, Lease, WorkerItem
from consumer.leases.repository import LeaseRepository
from consumer.lifecycle.processor import BaseProcessor, ProcessRecordsInput
from consumer.lifecycle.worker import Worker
from consumer.retrieval.kinesis import BotoKinesis
from tools.emulators import ACCESS_KEY_ID, SECRET_ACCESS_KEY
from tools.faults import LEASE
from tools.tcp_proxy import Exchange, FaultProxy, address

pytestmark = pytest.mark.integration

SHARDS = 4
PUT_EVERY = 0.05  # one record every 50 ms, shards in turn: each shard gets one every 200 ms
CUT_AT_LEAST = LEASE.lease_duration + 1.0  # seconds: every fault lasts longer than a lease
# A stall: every DynamoDB response to a is held this long, more than a lease and more than the client's read
# timeout (3 s), so a hears nothing back while each request it sends lands at once.
STALL_DELAY = LEASE.lease_duration + 2.0
# Requests held: each reaches DynamoDB this long after a sent it, more than a lease and more than botocore's
# two attempts (a 3 s read timeout each), so that writes a sent while it still led land after b took over.
HOLD = 2.5 * LEASE.lease_duration
# The lease settings of every case but the one about forgetting: b never forgets a's silent worker item while
# the test runs, whatever the load, so a's reconciling read finds the item b fenced (a loaded machine can
# stretch a stall past the default 3 leases, and a forgotten item would hide the refused heartbeats).
REMEMBERED = replace(LEASE, forget_workers_after=120.0)
# The case about forgetting: a's silent worker item is forgotten as soon as the settings allow (two leases; the
# default is three), so that the cut, which lasts until then, is no longer than it must be.
FORGETFUL = replace(LEASE, forget_workers_after=2 * LEASE.lease_duration)
WAIT = 30.0  # the deadline of any one wait (a loaded 2-core machine; each normally takes a few seconds)
# The lease-table writes only a leader makes: a worker that no longer leads must never start one.
LEADER_WRITES = frozenset(
    {"claim_leader", "assign", "request_handoff", "clear_handoff", "forget_worker", "resign_leader"}
)


@dataclass(frozen=True)
class Delivery:
    worker: str
    shard: str
    seq: str
    epoch: int


@dataclass(frozen=True)
class Put:
    at: float  # monotonic time the put was sent
    shard: str
    seq: str


@dataclass(frozen=True)
class Call:
    """One call ``a`` made on its lease repository: when it started and ended, and how it ended."""

    started: float
    ended: float
    name: str
    outcome: str  # "ok" or the exception's class name
    args: tuple[Any, ...] = ()
    kwargs: tuple[tuple[str, Any], ...] = ()
    result: Any = None

    @property
    def reconcile(self) -> bool:
        """A strongly consistent read of the worker's own item: only ``Reconcile`` makes one (the inbox poll
        and the leader watch read eventually consistent)."""
        return self.name == "get_worker" and dict(self.kwargs).get("consistent", True) is True


class Journal:
    """Every delivery by every worker, in the order the processors were called (under one lock)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rows: list[Delivery] = []

    def add(self, rows: list[Delivery]) -> None:
        with self.lock:
            self.rows.extend(rows)

    def snapshot(self) -> list[Delivery]:
        with self.lock:
            return list(self.rows)


class Recorder(BaseProcessor):
    def __init__(self, journal: Journal, worker: str) -> None:
        self.journal = journal
        self.worker = worker

    def process_records(self, data: ProcessRecordsInput) -> None:
        self.journal.add(
            [Delivery(self.worker, r.shard_id, r.sequence_number, data.epoch) for r in data.records]
        )


class RecordedRepository:
    """A worker's DynamoDB lease repository unchanged, with every call it starts noted (the calls still go
    over the network through the proxy: nothing is faked)."""

    def __init__(self, inner: DynamoDBLeaseRepository) -> None:
        self._inner = inner
        self._lock = threading.Lock()
        self.calls: list[Call] = []
        self.started: list[tuple[float, str]] = []  # every call as it starts (it may not end for a while)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            started, kw = time.monotonic(), tuple(kwargs.items())
            with self._lock:
                self.started.append((started, name))
            try:
                out = attr(*args, **kwargs)
            except Exception as exc:
                self._note(Call(started, time.monotonic(), name, type(exc).__name__, args, kw))
                raise
            self._note(Call(started, time.monotonic(), name, "ok", args, kw, out))
            return out

        return call

    def sibling(self, inner: DynamoDBLeaseRepository) -> RecordedRepository:
        """Another repository (the heartbeat lane's own client) noted in this one's history."""
        other = RecordedRepository(inner)
        other._lock, other.calls, other.started = self._lock, self.calls, self.started
        return other

    def _note(self, call: Call) -> None:
        with self._lock:
            self.calls.append(call)

    def history(self) -> list[Call]:
        with self._lock:
            return list(self.calls)

    def starts(self, name: str, since: float) -> list[float]:
        with self._lock:
            return [t for t, n in self.started if n == name and t > since]


def kind(x: Exchange) -> str:
    """Which conditional write an exchange is, from its body: the worker's heartbeat or a checkpoint."""
    if b"heartbeat = heartbeat + :one" in x.request:
        return "heartbeat"
    if b"position_key <= :pk" in x.request:
        return "checkpoint"
    return "other"


def refused(x: Exchange) -> bool:
    return b"ConditionalCheckFailedException" in x.response


class Rig:
    """Stream, tables, the fault proxy in front of ``a``'s DynamoDB, both workers, the producer and a
    watcher of the leader item; everything stopped on exit."""

    def __init__(
        self,
        ep: Any,
        unique_name: Callable[..., str],
        hold_requests: bool = False,
        lease: LeaseConfig = REMEMBERED,
    ) -> None:
        self.ep = ep
        self.lease = lease
        self.stream, self.lease_table, self.checkpoint_table = (
            unique_name("lf"),
            unique_name("lf-leases"),
            unique_name("lf-cps"),
        )
        ddb = ep.client("dynamodb")
        self.kinesis = ep.client("kinesis")
        create_tables(ddb, self.lease_table, self.checkpoint_table)
        self.kinesis.create_stream(StreamName=self.stream, ShardCount=SHARDS)
        self.observer = DynamoDBLeaseRepository(ddb, self.lease_table, self.checkpoint_table)
        self._checkpoints = DynamoDBCheckpointStore(ddb, self.checkpoint_table)
        self.journal = Journal()
        self.puts: list[Put] = []
        self.leaders: list[tuple[float, Leader | None]] = []  # the leader item each time it changed
        self._stop_producing = threading.Event()
        self._stop_watching = threading.Event()
        self._threads: list[threading.Thread] = []
        self._running: list[tuple[Worker, threading.Thread]] = []
        deadline = time.monotonic() + WAIT
        while not self._stream_active():
            assert time.monotonic() < deadline, f"stream {self.stream} not ACTIVE"
            time.sleep(0.05)
        shards = self.kinesis.list_shards(StreamName=self.stream)["Shards"]
        self.hash_keys = [s["HashKeyRange"]["StartingHashKey"] for s in shards]
        # a -> fault proxy (holding requests, noting every exchange, when asked) -> moto
        self.proxy = FaultProxy(address(ep.aws_endpoint), record=hold_requests).start()
        self.relay = self.proxy if hold_requests else None
        self.a, self.a_repo = self._worker("a", self.proxy.url())
        self.b, self.b_repo = self._worker("b", ep.aws_endpoint)
        self._spawn(self._produce, "producer")
        self._spawn(self._watch_leader, "leader-watcher")

    # -- set-up and tear-down -------------------------------------------------------------------
    def _worker(self, wid: str, dynamodb_url: str) -> tuple[Worker, RecordedRepository]:
        """A worker with the project's own client configuration (timeouts, retries) at ``dynamodb_url``."""
        session = boto3.session.Session(
            aws_access_key_id=ACCESS_KEY_ID,
            aws_secret_access_key=SECRET_ACCESS_KEY,
            region_name=self.ep.region,
        )
        ddb = make_client("dynamodb", endpoint_url=dynamodb_url, session=session)
        repo = RecordedRepository(DynamoDBLeaseRepository(ddb, self.lease_table, self.checkpoint_table))
        config = WorkerConfig(
            application="leader-faults",
            lease_table=self.lease_table,
            checkpoint_table=self.checkpoint_table,
            streams=(StreamSpec(self.stream, lambda: Recorder(self.journal, wid)),),
            worker_id=wid,
            lease=self.lease,
            retrieval=RetrievalConfig(),
            shutdown=ShutdownConfig(deadline=10.0),
        )
        kinesis = BotoKinesis(make_client("kinesis", endpoint_url=self.ep.kinesis_endpoint, session=session))
        checkpoints = DynamoDBCheckpointStore(ddb, self.checkpoint_table)
        # The heartbeat lane's own client, as create_worker makes it, at the same (faulty) endpoint.
        lane = make_client(
            "dynamodb",
            endpoint_url=dynamodb_url,
            session=session,
            config=heartbeat_config(self.lease.owner_validity),
        )
        heartbeats = repo.sibling(DynamoDBLeaseRepository(lane, self.lease_table, self.checkpoint_table))
        worker = Worker(
            config,
            cast(LeaseRepository, repo),
            checkpoints,
            kinesis,
            heartbeats=cast(LeaseRepository, heartbeats),
        )
        return worker, repo

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        t = threading.Thread(target=target, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def start(self, worker: Worker) -> None:
        t = threading.Thread(target=worker.run, name=f"worker-{worker.id}", daemon=True)
        t.start()
        self._running.append((worker, t))

    def close(self) -> None:
        self._stop_producing.set()
        for worker, _ in self._running:
            worker.request_shutdown()
        for _, t in self._running:
            t.join(30)
        self._stop_watching.set()
        for t in self._threads:
            t.join(10)
        self.proxy.stop()

    def __enter__(self) -> Rig:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _stream_active(self) -> bool:
        summary = self.kinesis.describe_stream_summary(StreamName=self.stream)["StreamDescriptionSummary"]
        return bool(summary["StreamStatus"] == "ACTIVE")

    def _produce(self) -> None:
        n = 0
        while not self._stop_producing.wait(PUT_EVERY):
            sent = time.monotonic()
            out = self.kinesis.put_record(
                StreamName=self.stream,
                Data=f"r{n}".encode(),
                PartitionKey=f"k{n}",
                ExplicitHashKey=self.hash_keys[n % SHARDS],
            )
            self.puts.append(Put(sent, out["ShardId"], out["SequenceNumber"]))
            n += 1

    def stop_producing(self) -> None:
        self._stop_producing.set()
        self._threads[0].join(10)

    def _watch_leader(self) -> None:
        while not self._stop_watching.wait(0.05):
            try:
                leader = self.observer.get_leader()
            except Exception:  # the observer goes straight to moto; a hiccup there is not the test's point
                continue
            if not self.leaders or self.leaders[-1][1] != leader:
                self.leaders.append((time.monotonic(), leader))

    # -- reading the state ------------------------------------------------------------------------
    def wait(self, cond: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{self.describe()}")
            time.sleep(0.05)

    def leader(self) -> Leader | None:
        return self.observer.get_leader()

    def leases(self) -> dict[str, Lease]:
        return {x.shard_id: x for x in self.observer.snapshot(consistent=True).leases}

    def worker_item(self, wid: str) -> WorkerItem | None:
        return self.observer.get_worker(wid)

    def owner_counts(self) -> dict[str | None, int]:
        return dict(Counter(x.owner for x in self.leases().values()))

    def leads(self, wid: str) -> bool:
        leader = self.leader()
        return leader is not None and leader.owner == wid

    def put_since(self, since: float) -> set[tuple[str, str]]:
        return {(p.shard, p.seq) for p in list(self.puts) if p.at > since}

    def owners_deliver(self, since: float, only: str | None = None) -> bool:
        """Every shard's owner in the table (``only``: which must be this worker) has delivered, under the
        table's epoch, a record put after ``since``."""
        fresh = self.put_since(since)
        leases = self.leases()
        if len(leases) < SHARDS or any(
            x.owner is None or (only and x.owner != only) for x in leases.values()
        ):
            return False
        done = {(d.shard, d.worker, d.epoch) for d in self.journal.snapshot() if (d.shard, d.seq) in fresh}
        return all((x.shard_id, x.owner, x.epoch) in done for x in leases.values())

    def workers_agree_with_table(self) -> bool:
        """Each worker holds exactly the leases the table gives it, at the table's epochs (no stale
        ownership left anywhere: no lease with two owners)."""
        table = {(x.key, x.epoch): x.owner for x in self.leases().values()}
        held = {(o.key, o.lease.epoch): w.id for w in (self.a, self.b) for o in w.owned.values()}
        return held == table

    def describe(self) -> str:
        try:
            leases = {s: (x.owner, x.epoch) for s, x in sorted(self.leases().items())}
            workers = {w: self.worker_item(w) for w in ("a", "b")}
        except Exception as exc:
            leases, workers = {"?": (repr(exc), -1)}, {}
        rows = self.journal.snapshot()
        per = Counter((d.shard, d.worker, d.epoch) for d in rows)
        return (
            f"leader history: {self.leaders}\nleases: {leases}\nworker items: {workers}\n"
            f"a holds {sorted((k, o.lease.epoch, o.phase.value) for k, o in self.a.owned.items())}, "
            f"leading={self.a.coordinator.leadership.leading}\n"
            f"b holds {sorted((k, o.lease.epoch, o.phase.value) for k, o in self.b.owned.items())}, "
            f"leading={self.b.coordinator.leadership.leading}\n"
            f"deliveries (shard, worker, epoch): {sorted(per.items())}\nproduced: {len(self.puts)}; "
            f"proxy: {self.proxy.mode} {self.proxy.stats}"
        )

    # -- the common steps -------------------------------------------------------------------------
    def lead_and_share(self) -> Leader:
        """``a`` starts and leads, ``b`` joins; returns the leader item once both deliver their share."""
        self.start(self.a)
        self.wait(lambda: self.leads("a"), "the leader item to name a")
        self.wait(lambda: self.owner_counts() == {"a": SHARDS}, "a to own every shard")
        self.start(self.b)
        self.wait(lambda: self.owner_counts() == {"a": 2, "b": 2}, "b to get its fair share")
        joined = time.monotonic()
        self.wait(lambda: self.owners_deliver(joined), "both workers to deliver their shards")
        leader = self.leader()
        assert leader is not None and leader.owner == "a", self.describe()
        return leader

    def heal_and_rejoin(self, replaced: Leader) -> float:
        """Heal the proxy (which also releases held requests); ``a`` must rejoin as a member and get its fair share back
        while ``b`` leads on. Returns when it healed."""
        self.proxy.heal()
        healed = time.monotonic()
        self.wait(lambda: _reconciled_since(self.a_repo, healed), "a to reconcile after the heal")
        self.wait(lambda: self.owner_counts() == {"a": 2, "b": 2}, "the fleet to share again")
        self.wait(lambda: self.owners_deliver(healed), "both workers to deliver their shards again")
        self.wait(self.workers_agree_with_table, "each worker to hold exactly its leases in the table")
        assert self.leader() == replaced, self.describe()
        return healed

    def finish(self) -> list[Delivery]:
        """Stop producing; every record put must be delivered, and every checkpoint carry its lease's epoch
        (no late write of an older owner moved one). Returns every delivery."""
        self.stop_producing()
        produced = self.put_since(float("-inf"))
        self.wait(
            lambda: produced <= {(d.shard, d.seq) for d in self.journal.snapshot()}, "every record delivered"
        )
        for shard, lease in self.leases().items():
            checkpoint = self._checkpoints.get(self.stream, shard)
            assert checkpoint is not None and checkpoint.epoch == lease.epoch, (shard, checkpoint, lease)
        return self.journal.snapshot()


def _reconciled_since(repo: RecordedRepository, since: float) -> bool:
    """The worker read its own item again (it was fenced), and the read's answer came back after ``since``.
    By its answer, not its start: a reconcile sent during a stall whose answer the heal lets through is the
    one the worker acts on (it then has no reason to read again)."""
    return any(c.reconcile and c.ended > since and c.outcome == "ok" for c in repo.history())


# -- what every case asserts on the deliveries ----------------------------------------------------------
def assert_one_owner_at_a_time(rows: list[Delivery]) -> None:
    """Per shard, epochs in delivery order never go back (no delivery under an older ownership after a
    newer one started), and each ownership (shard, epoch) was delivered by one worker only."""
    by_shard: dict[str, list[int]] = defaultdict(list)
    workers: dict[tuple[str, int], set[str]] = defaultdict(set)
    for d in rows:
        by_shard[d.shard].append(d.epoch)
        workers[(d.shard, d.epoch)].add(d.worker)
    backwards = {s: e for s, e in by_shard.items() if e != sorted(e)}
    assert not backwards, f"epochs went back (two owners at once): {backwards}"
    shared = {k: w for k, w in workers.items() if len(w) > 1}
    assert not shared, f"ownerships delivered by two workers: {shared}"


def redeliveries(rows: list[Delivery]) -> dict[tuple[str, int], int]:
    """Records delivered again, per ownership (shard, epoch). Asserts that each ownership delivered a
    record at most once and that what it delivered again is a prefix of what it delivered: the previous
    owner's records after its last checkpoint (at least once), never a record out of the middle."""
    out: dict[tuple[str, int], int] = {}
    shards = sorted({d.shard for d in rows})
    for shard in shards:
        seen: set[str] = set()
        epochs = list(dict.fromkeys(d.epoch for d in rows if d.shard == shard))
        for epoch in epochs:
            seqs = [d.seq for d in rows if d.shard == shard and d.epoch == epoch]
            assert len(seqs) == len(set(seqs)), f"{shard} epoch {epoch} delivered a record twice"
            again = [s in seen for s in seqs]
            n = again.index(False) if False in again else len(again)
            assert not any(again[n:]), f"{shard} epoch {epoch} delivered an old record after new ones"
            out[(shard, epoch)] = n
            seen.update(seqs)
    return out


def assert_exactly_once_after(rows: list[Delivery], fresh: set[tuple[str, str]]) -> None:
    """Records put after the heal move only in planned hand-offs: each is delivered exactly once."""
    counts = Counter((d.shard, d.seq) for d in rows if (d.shard, d.seq) in fresh)
    twice = {k: n for k, n in counts.items() if n > 1}
    assert not twice, f"records put after the heal delivered more than once: {twice}"
    assert set(counts) == fresh


def leader_writes(repo: RecordedRepository, since: float) -> list[Call]:
    return [c for c in repo.history() if c.name in LEADER_WRITES and c.started >= since]


# -- the cases ----------------------------------------------------------------------------------------
def await_takeover(
    rig: Rig, first: Leader, before: WorkerItem, since: float, held_by_a: set[str]
) -> tuple[Leader, WorkerItem, float, set[tuple[str, int]]]:
    """b claims leadership (a higher epoch, a's worker item fenced) and owns and delivers every shard.
    Returns the new leader, a's fenced item, when the claim was seen, and the ownerships b took from a."""
    rig.wait(lambda: rig.leads("b"), "b to claim leadership")
    claimed = time.monotonic()
    new, fenced = rig.leader(), rig.worker_item("a")
    assert new is not None and new.epoch > first.epoch, rig.describe()
    assert fenced is not None and fenced.generation > before.generation, (before, fenced)
    rig.wait(lambda: rig.owners_deliver(since, only="b"), "b to own and deliver every shard")
    taken = {(s, x.epoch) for s, x in rig.leases().items() if s in held_by_a}
    return new, fenced, claimed, taken


def assert_b_leads_a_stepped_down_nothing_lost(
    rig: Rig,
    rows: list[Delivery],
    leaders: tuple[Leader, Leader],
    since: float,
    taken: set[tuple[str, int]],
    healed: float,
) -> None:
    """One change of leader, a -> b, and b leads on: a never claimed, planned or assigned again after
    ``since``; never two owners at once; records came again only where b took a's shards without a hand-off
    (a's unchecked records), and the planned hand-offs (b joining, a rejoining) delivered nothing twice."""
    assert [x for _, x in rig.leaders if x is not None] == list(leaders), rig.leaders
    assert not leader_writes(rig.a_repo, since), leader_writes(rig.a_repo, since)
    assert not rig.a.coordinator.leadership.leading and not rig.a.coordinator.duties.active
    assert_one_owner_at_a_time(rows)
    again = {k for k, n in redeliveries(rows).items() if n}
    assert again <= taken, (again, taken)
    assert_exactly_once_after(rows, rig.put_since(healed))


@pytest.mark.parametrize(
    ("mode", "forgotten"), [("refuse", False), ("reset", True)], ids=["refused", "reset-until-forgotten"]
)
def test_a_leader_cut_off_from_dynamodb_is_replaced_and_rejoins_as_a_member(
    emulators: Any, unique_name: Callable[..., str], mode: str, forgotten: bool
) -> None:
    """``forgotten``: the cut lasts until the new leader deletes a's silent worker item, so that a joins
    again from scratch (registers) rather than with the item it had."""
    with Rig(emulators, unique_name, lease=FORGETFUL if forgotten else REMEMBERED) as rig:
        first = rig.lead_and_share()
        held_by_a = {s for s, x in rig.leases().items() if x.owner == "a"}
        before = rig.worker_item("a")
        assert before is not None
        with rig.proxy.outage(mode):
            cut = time.monotonic()
            rig.wait(lambda: rig.leads("b"), "b to claim leadership")
            new = rig.leader()
            assert new is not None and new.epoch > first.epoch, rig.describe()
            rig.wait(lambda: rig.owners_deliver(cut, only="b"), "b to own and deliver every shard")
            taken = {(s, x.epoch) for s, x in rig.leases().items() if s in held_by_a}
            # b may take over sooner than a lease after the cut (a's last heartbeat was earlier); the cut
            # itself lasts longer than a lease whatever happens.
            rig.wait(lambda: time.monotonic() - cut > CUT_AT_LEAST, "the cut to outlast a lease")
            if forgotten:
                rig.wait(
                    lambda: rig.worker_item("a") is None,
                    "b to forget a's worker item",
                    timeout=FORGETFUL.forget_workers_seconds + WAIT,
                )
        healed = rig.heal_and_rejoin(new)
        rows = rig.finish()

        # a is a member again: with its fenced item, or registered anew once b had forgotten it.
        back = rig.worker_item("a")
        assert back is not None and back.heartbeat > 0, back
        if forgotten:
            assert back.started_ms > before.started_ms, (before, back)
        else:
            assert back.started_ms == before.started_ms and back.generation > before.generation, (
                before,
                back,
            )
        assert_b_leads_a_stepped_down_nothing_lost(rig, rows, (first, new), cut, taken, healed)


def test_a_stalled_leader_is_fenced_and_its_late_requests_are_refused(
    emulators: Any, unique_name: Callable[..., str]
) -> None:
    with Rig(emulators, unique_name) as rig:
        first = rig.lead_and_share()
        held_by_a = {s for s, x in rig.leases().items() if x.owner == "a"}
        before = rig.worker_item("a")
        assert before is not None
        with rig.proxy.outage("slow", delay=STALL_DELAY):
            stalled = time.monotonic()
            # a's requests still land (its heartbeats too, for a while), but it hears nothing back: its
            # heartbeat window closes, its heartbeat stands still between its slow calls, and b claims.
            new, fenced, claimed, taken = await_takeover(rig, first, before, stalled, held_by_a)
            # The stalled leader keeps sending: wait until a heartbeat it sent after b's claim has landed
            # (slow holds only the responses; the request reaches DynamoDB at once).
            rig.wait(
                lambda: any(time.monotonic() - t > 1.5 for t in rig.a_repo.starts("heartbeat", claimed)),
                "a heartbeat of the stalled leader to land after the claim",
            )
            rig.wait(lambda: time.monotonic() - stalled > CUT_AT_LEAST, "the stall to outlast a lease")
        healed = rig.heal_and_rejoin(new)
        rows = rig.finish()

        # Every heartbeat a sent between b's claim and its own reconciliation landed and was refused by its
        # condition (its generation had moved): the reconciling read still shows the heartbeat b fenced.
        reconciled = next(c for c in rig.a_repo.history() if c.reconcile and c.started > claimed)
        assert isinstance(reconciled.result, WorkerItem), reconciled
        assert reconciled.result.heartbeat == fenced.heartbeat, (fenced, reconciled.result)
        assert rig.a_repo.starts("heartbeat", claimed)[0] < reconciled.started
        assert_b_leads_a_stepped_down_nothing_lost(rig, rows, (first, new), stalled, taken, healed)


def test_writes_a_stalled_leader_sent_before_the_takeover_land_after_it_and_are_refused(
    emulators: Any, unique_name: Callable[..., str]
) -> None:
    with Rig(emulators, unique_name, hold_requests=True) as rig:
        relay = rig.relay
        assert relay is not None
        first = rig.lead_and_share()
        held_by_a = {s for s, x in rig.leases().items() if x.owner == "a"}
        before = rig.worker_item("a")
        assert before is not None
        relay.hold(HOLD)
        stalled = time.monotonic()
        new, fenced, claimed, taken = await_takeover(rig, first, before, stalled, held_by_a)
        took = time.monotonic()

        def landed_late(sent_before: float) -> list[Exchange]:
            """a's heartbeats and checkpoints sent during the stall (before ``sent_before``) that reached
            DynamoDB after b owned every shard, with DynamoDB's answer."""
            return [
                x
                for x in relay.log()
                if kind(x) != "other"
                and stalled <= x.arrived < sent_before
                and x.forwarded is not None
                and x.forwarded > took
                and x.answered is not None
            ]

        rig.wait(
            lambda: bool(landed_late(claimed)),
            "a write a sent before b led to reach DynamoDB after b took its shards",
            timeout=HOLD + WAIT,
        )
        healed = rig.heal_and_rejoin(new)
        rows = rig.finish()

        # Every heartbeat and checkpoint a sent in the stall that landed after the takeover was refused by
        # its condition: its generation (the claim fenced it) or its epoch (b's takes moved the checkpoints').
        late = landed_late(healed)
        assert all(refused(x) for x in late), [
            (kind(x), round(x.arrived - stalled, 2), bytes(x.response[-160:])) for x in late if not refused(x)
        ]
        assert {kind(x) for x in landed_late(claimed)} <= {"heartbeat", "checkpoint"}
        reconciled = next(c for c in rig.a_repo.history() if c.reconcile and c.started > claimed)
        assert isinstance(reconciled.result, WorkerItem), reconciled
        assert reconciled.result.heartbeat == fenced.heartbeat, (fenced, reconciled.result)
        assert_b_leads_a_stepped_down_nothing_lost(rig, rows, (first, new), stalled, taken, healed)
