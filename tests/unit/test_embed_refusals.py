"""What an embedding application gets wrong is refused at once, with one line naming what to fix.

- ``Worker.run()`` is guarded like ``start()``: a worker runs once, so ``run()`` after ``start()`` (running or
  stopped) or after an earlier ``run()`` raises ``WorkerStateError`` before it writes anything. Before, it
  registered the worker again: a ``LeaseConflictError`` while it ran, and after a stop a ``RuntimeError``
  traceback that left a ghost worker item in the lease table.
- The typed settings refuse NaN, infinities and negative numbers of seconds, as the variables do (before,
  ``checkpoint.auto_interval=nan`` wrote no checkpoint until the stop, and ``processing.backoff_max=nan`` retried
  a failing processor with no wait).
- ``create_worker`` arguments of the wrong kind are one ``ConfigError`` naming the argument, before any AWS
  client is made (before: a ``TypeError``/``AttributeError`` from deep inside, an endpoint URL read a character
  at a time as service names, or a metrics sink that failed only once the worker ran, leaving its item in the
  lease table).
"""

from __future__ import annotations

import dataclasses
import io
import math
import threading
import typing
from collections.abc import Iterator
from types import MappingProxyType
from typing import Any

import pytest

from consumer import (
    CheckpointConfig,
    ConfigError,
    LeaseConfig,
    ProcessingConfig,
    RetrievalConfig,
    ShutdownConfig,
    ThreadsConfig,
    Worker,
    WorkerStateError,
    create_worker,
)
from consumer.config import HealthConfig, RawSinkConfig, worker_config_from_env
from consumer.leases.memory import InMemoryTables
from consumer.leases.model import WorkerItem
from consumer.loader import load_processor
from consumer.metrics.sink import InMemoryMetrics
from consumer.retrieval.memory import InMemoryKinesis
from tests.unit.helpers import ORDERS_CONFIG as CONFIG
from tests.unit.helpers import Journal, Orders, make_worker, wait_until

NOWHERE = "http://127.0.0.1:9"  # nothing answers: a call that got this far would fail, not hang


ENV = {
    "CONSUMER_STREAMS": "orders",
    "CONSUMER_APPLICATION": "orders",
    "CONSUMER_LEASE_TABLE": "orders-leases",
    "CONSUMER_CHECKPOINT_TABLE": "orders-checkpoints",
    "AWS_REGION": "eu-west-1",
}


# -- run() is guarded like start() -------------------------------------------------------------------------


class CountingRepo:
    """The in-memory repository, counting the worker's registrations."""

    def __init__(self, repo: Any) -> None:
        self._repo = repo
        self.registered = 0

    def register_worker(self, worker: WorkerItem) -> None:
        self.registered += 1
        self._repo.register_worker(worker)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._repo, name)


@pytest.fixture
def fleet() -> Iterator[tuple[Worker, CountingRepo, InMemoryTables]]:
    """A worker on in-memory tables (one shard with a record), and its counting repository."""
    tables, kinesis = InMemoryTables(), InMemoryKinesis()
    kinesis.create_stream("s", 1)
    kinesis.put("s", "shardId-000000000000", b"r0")
    repos: list[CountingRepo] = []

    def wrap(repo: Any) -> CountingRepo:
        repos.append(CountingRepo(repo))
        return repos[-1]

    worker = make_worker("w", tables, kinesis, Journal(), wrap_repo=wrap)
    yield worker, repos[0], tables
    if worker.running:
        worker.stop(20)


def _refused(call: Any, words: str) -> WorkerStateError:
    with pytest.raises(WorkerStateError) as raised:
        call()
    message = str(raised.value)
    assert words in message and "create a new one to run again" in message, message
    assert "\n" not in message
    return raised.value


def test_run_while_started_is_refused_before_it_registers_again(
    fleet: tuple[Worker, CountingRepo, InMemoryTables],
) -> None:
    worker, repo, tables = fleet
    worker.start()
    wait_until(lambda: "w" in tables.workers, what="the worker's registration")
    _refused(worker.run, "worker w was already started")
    assert repo.registered == 1 and worker.running  # the running worker is untouched
    assert worker.stop(20)
    assert tables.workers == {}


def test_run_after_a_stop_is_refused_and_leaves_no_worker_item(
    fleet: tuple[Worker, CountingRepo, InMemoryTables],
) -> None:
    worker, repo, tables = fleet
    worker.start()
    wait_until(lambda: "w" in tables.workers, what="the worker's registration")
    assert worker.stop(20)
    _refused(worker.run, "worker w was already started")
    _refused(lambda: worker.run(handle_signals=True), "worker w was already started")
    assert repo.registered == 1
    assert tables.workers == {}  # before: a ghost item the leader counted as a member until it seemed dead


def test_a_worker_run_with_run_runs_once(fleet: tuple[Worker, CountingRepo, InMemoryTables]) -> None:
    worker, repo, tables = fleet
    errors: list[BaseException] = []

    def run() -> None:
        try:
            worker.run()
        except BaseException as exc:  # the assertion is on the main thread
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    wait_until(lambda: "w" in tables.workers, what="the worker's registration")
    _refused(worker.run, "worker w was already run with run()")  # while it runs
    worker.request_shutdown()
    thread.join(20)
    assert not thread.is_alive() and errors == []
    _refused(worker.run, "worker w was already run with run()")  # once it has ended
    _refused(worker.start, "worker w was already run with run()")
    assert repo.registered == 1 and tables.workers == {} and not worker.running


def test_run_with_signals_off_the_main_thread_is_refused_and_the_worker_still_starts(
    fleet: tuple[Worker, CountingRepo, InMemoryTables],
) -> None:
    worker, repo, tables = fleet
    errors: list[BaseException] = []

    def run_off_main() -> None:
        try:
            worker.run(handle_signals=True)
        except BaseException as exc:  # the assertion is on the main thread
            errors.append(exc)

    thread = threading.Thread(target=run_off_main)
    thread.start()
    thread.join(20)
    assert len(errors) == 1 and isinstance(errors[0], WorkerStateError), errors
    assert "main thread" in str(errors[0]) and repo.registered == 0
    worker.start()
    wait_until(lambda: "w" in tables.workers, what="the worker's registration")
    assert worker.stop(20) and tables.workers == {}


# -- numbers of seconds in the typed settings are finite ---------------------------------------------------


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: CheckpointConfig(auto_interval=math.nan),
            "checkpoint.auto_interval: must be a finite number >= 0, got nan",
        ),
        (
            lambda: CheckpointConfig(auto_interval=math.inf),
            "checkpoint.auto_interval: must be a finite number >= 0, got inf",
        ),
        (
            lambda: CheckpointConfig(auto_interval=-1),
            "checkpoint.auto_interval: must be a finite number >= 0, got -1",
        ),
        (
            lambda: RetrievalConfig(idle_time_between_reads=math.nan),
            "retrieval.idle_time_between_reads: must be a finite number >= 0, got nan",
        ),
        (
            lambda: RetrievalConfig(idle_time_between_reads=math.inf),
            "retrieval.idle_time_between_reads: must be a finite number >= 0, got inf",
        ),
        (
            lambda: RetrievalConfig(backoff_max=math.nan),
            "retrieval.backoff_max: must be a finite number > 0, got nan",
        ),
        (
            lambda: RetrievalConfig(backoff_max=math.inf),
            "retrieval.backoff_max: must be a finite number > 0, got inf",
        ),
        (
            lambda: RetrievalConfig(fanout_subscribe_interval=math.nan),
            "retrieval.fanout_subscribe_interval: must be a finite number >= 0, got nan",
        ),
        (
            lambda: ProcessingConfig(backoff_max=math.nan),
            "processing.backoff_max: must be a finite number > 0, got nan",
        ),
        (
            lambda: ProcessingConfig(backoff_max=math.inf),
            "processing.backoff_max: must be a finite number > 0, got inf",
        ),
        (
            lambda: ProcessingConfig(backoff_max=0),
            "processing.backoff_max: must be a finite number > 0, got 0",
        ),
        (
            lambda: ProcessingConfig(backoff_max=-1),
            "processing.backoff_max: must be a finite number > 0, got -1",
        ),
        (
            lambda: ProcessingConfig(backoff_base=1.0, backoff_max=0.5),
            "processing.backoff_max: must be >= processing.backoff_base",
        ),
    ],
)
def test_a_number_of_seconds_that_is_not_finite_or_is_negative_is_refused_naming_the_field(
    make: Any, message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        make()
    assert str(caught.value) == message


# Every settings section and what each needs besides the field under test.
_SECTIONS: dict[str, tuple[type, dict[str, Any]]] = {
    "lease": (LeaseConfig, {}),
    "retrieval": (RetrievalConfig, {}),
    "checkpoint": (CheckpointConfig, {}),
    "processing": (ProcessingConfig, {}),
    "shutdown": (ShutdownConfig, {}),
    "health": (HealthConfig, {}),
    "threads": (ThreadsConfig, {}),
    "raw_sink": (RawSinkConfig, {"bucket": "orders-raw"}),
}


def _float_fields() -> list[tuple[str, str]]:
    """``(section, field)`` of every field annotated as a number (optional or not) in every section."""
    found = []
    for section, (cls, _) in _SECTIONS.items():
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if float in (hints[f.name], *typing.get_args(hints[f.name])):
                found.append((section, f.name))
    return found


@pytest.mark.parametrize(("section", "name"), _float_fields())
def test_every_number_field_of_every_section_refuses_nan_infinities_and_negatives(
    section: str, name: str
) -> None:
    cls, needs = _SECTIONS[section]
    for bad in (math.nan, math.inf, -math.inf, -1.0):
        with pytest.raises(ConfigError) as caught:
            cls(**needs, **{name: bad})
        assert caught.value.field == f"{section}.{name}", (bad, str(caught.value))


def test_the_fields_audited_include_the_ones_that_let_nan_through() -> None:
    assert {
        ("checkpoint", "auto_interval"),
        ("retrieval", "idle_time_between_reads"),
        ("retrieval", "backoff_max"),
        ("processing", "backoff_max"),
    } <= set(_float_fields())


def test_the_environment_still_names_the_variable() -> None:
    env = {**ENV, "CONSUMER_IDLE_TIME_SECONDS": "-1"}
    with pytest.raises(ConfigError) as caught:
        worker_config_from_env(env, load_processor, processor=Orders)
    assert str(caught.value) == "CONSUMER_IDLE_TIME_SECONDS: must be a finite number >= 0, got -1.0"


def test_zero_is_still_a_valid_interval() -> None:
    assert CheckpointConfig(auto_interval=0).auto_interval == 0
    assert (
        RetrievalConfig(idle_time_between_reads=0, fanout_subscribe_interval=0).idle_time_between_reads == 0
    )
    assert ProcessingConfig(backoff_base=0.5, backoff_max=0.5).backoff_max == 0.5


# -- create_worker's arguments of the wrong kind -----------------------------------------------------------


@pytest.fixture
def no_aws_client(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any AWS client made fails the test: a refusal must come before the first one (no call, no item)."""

    def refuse(service: str, **_: Any) -> Any:
        raise AssertionError(f"a {service} client was made before the argument was refused")

    monkeypatch.setattr("consumer.embed.make_client", refuse)


class AddOnly:
    """Half a metrics sink: the worker would fail at its first flush, once registered."""

    def add(self, name: str, value: float, stream: str, shard: str | None = None) -> None:
        return None


@pytest.mark.parametrize(
    ("config", "options", "message"),
    [
        (CONFIG, {"metrics_interval": "10"}, "metrics_interval: must be a number of seconds, got str '10'"),
        (CONFIG, {"metrics_interval": True}, "metrics_interval: must be a number of seconds, got bool True"),
        (
            CONFIG,
            {"metrics_interval": math.inf},
            "metrics_interval: must be a finite number of seconds > 0, got inf",
        ),
        (
            CONFIG,
            {"endpoints": NOWHERE},
            "endpoints: must be a mapping of service to endpoint URL (e.g. {'kinesis': 'http://...'}), got str "
            "'http://127.0.0.1:9'; one URL for every service is endpoint_url=...",
        ),
        (
            CONFIG,
            {"endpoints": {"kinesis": 9}},
            "endpoints['kinesis']: must be an endpoint URL string, got int 9",
        ),
        (
            CONFIG,
            {"endpoints": {1: NOWHERE}},
            "endpoints: unknown service 1; known: dynamodb, kinesis, sqs, s3",
        ),
        (CONFIG, {"endpoint_url": 123}, "endpoint_url: must be a string or None, got int 123"),
        (CONFIG, {"endpoint_url": NOWHERE, "region": 123}, "region: must be a string or None, got int 123"),
        (
            CONFIG,
            {"endpoint_url": NOWHERE, "metrics": object()},
            "metrics: must be a metrics sink (consumer.metrics.sink.MetricsSink: add, flush); got a 'object', "
            "which lacks add, flush",
        ),
        (
            CONFIG,
            {"endpoint_url": NOWHERE, "metrics": AddOnly()},
            "metrics: must be a metrics sink (consumer.metrics.sink.MetricsSink: add, flush); got a 'AddOnly', "
            "which lacks flush",
        ),
        (
            CONFIG,
            {"endpoint_url": NOWHERE, "metrics_out": "metrics.log"},
            "metrics_out: must be a text stream (e.g. sys.stdout), got str 'metrics.log'",
        ),
        (
            None,
            {"endpoint_url": NOWHERE, "env": "CONSUMER_STREAMS=orders"},
            "env: must be a mapping of variable names to values, got str 'CONSUMER_STREAMS=orders'",
        ),
        (
            None,
            {"endpoint_url": NOWHERE, "env": ENV, "processor": Orders, "metrics_interval": "10"},
            "metrics_interval: must be a number of seconds, got str '10'",
        ),
    ],
)
@pytest.mark.usefixtures("no_aws_client")
def test_an_argument_of_the_wrong_kind_is_one_config_error_naming_it_before_any_aws_client(
    config: Any, options: dict[str, Any], message: str
) -> None:
    for create in (create_worker, Worker.create):
        with pytest.raises(ConfigError) as caught:
            create(config, **options)
        assert str(caught.value) == message


def test_arguments_of_the_right_kind_are_accepted() -> None:
    """Any mapping of endpoints, an int interval, a sink of your own and a text stream."""
    worker = create_worker(
        CONFIG,
        region="eu-west-1",
        endpoints=MappingProxyType({"kinesis": NOWHERE, "dynamodb": NOWHERE}),
        checks=False,
        metrics=InMemoryMetrics(),
        metrics_interval=5,
    )
    assert isinstance(worker, Worker) and not worker.running
    assert isinstance(
        create_worker(
            CONFIG, endpoint_url=NOWHERE, region="eu-west-1", checks=False, metrics_out=io.StringIO()
        ),
        Worker,
    )
