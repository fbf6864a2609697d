"""Running a worker inside your own process: ``create_worker`` (also ``Worker.create``).

It builds the worker the CLI runs, on AWS clients made from your boto3 session (or a region and endpoints),
after the same start-up checks with the same one-line errors (``consumer.preflight``). It installs no signal
handler: ``worker.start(handle_signals=True)`` or ``worker.run(handle_signals=True)`` ask for them.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TextIO, TypedDict

from botocore.config import Config

from consumer.aws import WORKER_CALLS, ThrottleRetries, heartbeat_config, make_client
from consumer.aws_errors import PROVIDER_FAILURES, classify
from consumer.checkpoint.dynamodb import DynamoDBCheckpointStore
from consumer.config import (
    ProcessorFactory,
    WorkerConfig,
    check_processor_factory,
    env_float,
    worker_config_from_env,
)
from consumer.errors import ConfigError
from consumer.leases.dynamodb import DynamoDBLeaseRepository
from consumer.lifecycle.worker import Worker
from consumer.loader import checked_factory, load_processor
from consumer.metrics.sink import EmfMetrics, MetricsSink
from consumer.preflight import AwsTarget, Clients, run_preflight
from consumer.retrieval.kinesis import BotoKinesis
from consumer.sinks.dlq import SqsDeadLetterQueue

if TYPE_CHECKING:
    import boto3

__all__ = ["CreateOptions", "create_worker"]

logger = logging.getLogger(__name__)

_SERVICES = ("dynamodb", "kinesis", "sqs", "s3")
# What the worker calls on a metrics sink: the MetricsSink protocol's methods.
_METRICS_METHODS = tuple(sorted(n for n, v in vars(MetricsSink).items() if callable(v) and n[0] != "_"))
_WORKER_CALLS = ("kinesis", "dynamodb")  # the worker's own calls, under its retry policies


class CreateOptions(TypedDict, total=False):
    """``create_worker``'s keyword arguments, for ``Worker.create`` to pass on."""

    processor: ProcessorFactory | None
    env: Mapping[str, str] | None
    session: boto3.session.Session | None
    region: str | None
    endpoint_url: str | None
    endpoints: Mapping[str, str] | None
    checks: bool
    metrics: MetricsSink | None
    metrics_out: TextIO | None
    metrics_interval: float | None


def create_worker(
    config: WorkerConfig | None = None,
    *,
    processor: ProcessorFactory | None = None,
    env: Mapping[str, str] | None = None,
    session: boto3.session.Session | None = None,
    region: str | None = None,
    endpoint_url: str | None = None,
    endpoints: Mapping[str, str] | None = None,
    checks: bool = True,
    metrics: MetricsSink | None = None,
    metrics_out: TextIO | None = None,
    metrics_interval: float | None = None,
) -> Worker:
    """A worker on real AWS clients, checked and ready to ``start()`` (or ``run()``).

    - ``config``: a typed ``WorkerConfig``; without one, the ``CONSUMER_*`` variables of ``env`` (default:
      ``os.environ``) are read as ``python -m consumer run`` reads them, and ``processor`` (a class or
      factory) serves the streams that name none when ``CONSUMER_PROCESSOR`` is unset.
    - ``session``: the boto3 session whose credentials and region the clients use; ``region`` overrides
      its region; ``endpoint_url`` (every service) or ``endpoints`` (by service: ``dynamodb``, ``kinesis``,
      ``sqs``, ``s3``) point at other endpoints, e.g. local emulators. Without them, the usual AWS_* chain.
    - ``checks``: the CLI's start-up checks (region and credentials, both tables and their key schema, every
      stream, the dead-letter queue, each processor constructed once, checked to be a record processor, and
      its resources). A problem raises a ``ConsumerError`` whose message is the CLI's one line
      (``ConfigError``, ``MissingResourceError``, ``ProcessorLoadError``; ``UnreachableError`` for an endpoint
      that does not answer).
    - ``metrics``: where the worker's metrics go; default CloudWatch EMF documents written to
      ``metrics_out`` (default stdout) every ``metrics_interval`` seconds (default
      ``CONSUMER_METRICS_INTERVAL_SECONDS`` or 10).
    """
    _check_arguments(config, processor, session)
    _check_options(
        env=env,
        region=region,
        endpoint_url=endpoint_url,
        endpoints=endpoints,
        metrics=metrics,
        metrics_out=metrics_out,
        metrics_interval=metrics_interval,
    )
    source = dict(os.environ if env is None else env)
    # What errors name: the variables the settings came from, or (a typed config alone) the config.
    named_by = source if config is None or env is not None else {}
    if config is None:
        config = worker_config_from_env(source, load_processor, processor=_checked(processor))
    elif processor is not None:
        raise ConfigError(
            "processor", "give processors in config.streams (StreamSpec) or read the environment, not both"
        )
    interval = metrics_interval if metrics_interval is not None else _metrics_interval(source)
    if not (interval > 0 and math.isfinite(interval)):
        raise ConfigError("metrics_interval", f"must be a finite number of seconds > 0, got {interval:g}")

    target = AwsTarget(session=session, region=region)
    fanout = config.retrieval.mode == "fanout"
    pools = {
        "kinesis": config.threads.kinesis_connections(fanout),
        "dynamodb": config.threads.dynamodb_connections,
        "sqs": config.threads.processor_threads,  # dead letters are sent from the processor threads
    }
    clients = _Clients(target, endpoint_url, dict(endpoints or {}), pools)
    if checks:
        try:
            run_preflight(config, Clients(clients.checking), named_by, target)
        except PROVIDER_FAILURES as exc:  # one the checks did not name: the CLI's wording too
            raise classify(exc) from exc
    if metrics is None:
        metrics = EmfMetrics(
            config.application, config.worker_id, metrics_out, shard_dimension=_shard_dimension(source)
        )
    return _build(config, clients, metrics, interval)


def _check_arguments(config: object, processor: object, session: object) -> None:
    """Arguments of the wrong kind, named (not an ``AttributeError`` from inside the checks)."""
    if config is not None and not isinstance(config, WorkerConfig):
        raise ConfigError(
            "config",
            f"must be a consumer.WorkerConfig (or None to read CONSUMER_*), got {type(config).__name__}",
        )
    if processor is not None:
        check_processor_factory("processor", processor)
    if session is not None and not callable(getattr(session, "client", None)):
        raise ConfigError(
            "session", f"must be a boto3.Session (give a region as region=...), got {type(session).__name__}"
        )


def _check_options(
    *,
    env: object,
    region: object,
    endpoint_url: object,
    endpoints: object,
    metrics: object,
    metrics_out: object,
    metrics_interval: object,
) -> None:
    """The other arguments of the wrong kind, named the same way (before: a ``TypeError`` or
    ``AttributeError`` from deep inside, or an endpoint URL read a character at a time as service names)."""
    if env is not None and not isinstance(env, Mapping):
        raise ConfigError("env", f"must be a mapping of variable names to values, got {_kind(env)}")
    for name, value in (("region", region), ("endpoint_url", endpoint_url)):
        if value is not None and not isinstance(value, str):
            raise ConfigError(name, f"must be a string or None, got {_kind(value)}")
    if endpoints is not None:
        _check_endpoints(endpoints)
    _check_metrics(metrics, metrics_out, metrics_interval)


def _check_endpoints(endpoints: object) -> None:
    if not isinstance(endpoints, Mapping):
        raise ConfigError(
            "endpoints",
            f"must be a mapping of service to endpoint URL (e.g. {{'kinesis': 'http://...'}}), "
            f"got {_kind(endpoints)}; one URL for every service is endpoint_url=...",
        )
    if unknown := sorted((s for s in endpoints if s not in _SERVICES), key=str):
        raise ConfigError("endpoints", f"unknown service {unknown[0]!r}; known: {', '.join(_SERVICES)}")
    for service, url in endpoints.items():
        if not isinstance(url, str):
            raise ConfigError(f"endpoints[{service!r}]", f"must be an endpoint URL string, got {_kind(url)}")


def _check_metrics(metrics: object, metrics_out: object, metrics_interval: object) -> None:
    """Refused here, not once the worker runs: a sink without ``flush`` failed the worker's thread after it
    had registered, and left its item in the lease table."""
    if metrics is not None and (
        missing := [m for m in _METRICS_METHODS if not callable(getattr(metrics, m, None))]
    ):
        raise ConfigError(
            "metrics",
            f"must be a metrics sink (consumer.metrics.sink.MetricsSink: {', '.join(_METRICS_METHODS)}); "
            f"got a {type(metrics).__name__!r}, which lacks {', '.join(missing)}",
        )
    if metrics_out is not None and not callable(getattr(metrics_out, "write", None)):
        raise ConfigError("metrics_out", f"must be a text stream (e.g. sys.stdout), got {_kind(metrics_out)}")
    if metrics_interval is not None and (
        isinstance(metrics_interval, bool) or not isinstance(metrics_interval, int | float)
    ):
        raise ConfigError("metrics_interval", f"must be a number of seconds, got {_kind(metrics_interval)}")


def _kind(value: object) -> str:
    """``str '10'``: a wrong value's type and value, as the settings' own errors show them."""
    return f"{type(value).__name__} {value!r}"


def _checked(processor: ProcessorFactory | None) -> ProcessorFactory | None:
    if processor is None:
        return None
    name = getattr(processor, "__qualname__", type(processor).__name__)
    return checked_factory(f"{getattr(processor, '__module__', '?')}:{name}", processor)


def _shard_dimension(env: Mapping[str, str]) -> bool:
    """``CONSUMER_METRICS_DIMENSIONS``: ``shard`` (the default) publishes each metric per stream and per shard;
    ``stream`` per stream only, whose count of CloudWatch custom metrics does not grow with the shards."""
    value = env.get("CONSUMER_METRICS_DIMENSIONS", "shard").strip().lower()
    if value not in ("shard", "stream"):
        raise ConfigError("CONSUMER_METRICS_DIMENSIONS", f"must be shard or stream, got {value!r}")
    return value == "shard"


def _metrics_interval(env: Mapping[str, str]) -> float:
    value = env_float(env, "CONSUMER_METRICS_INTERVAL_SECONDS", 10.0)
    if not value > 0:
        raise ConfigError("CONSUMER_METRICS_INTERVAL_SECONDS", f"must be > 0 seconds, got {value:g}")
    return value


class _Clients:
    """One client per service, made on first use with the caller's session, region and endpoints (and the
    heartbeat lane's own DynamoDB client, with its short timeouts)."""

    def __init__(
        self,
        target: AwsTarget,
        endpoint_url: str | None,
        endpoints: dict[str, str],
        pools: dict[str, int] | None = None,
    ) -> None:
        """``pools``: each worker client's ``max_pool_connections`` (they follow the runner's pools)."""
        self._pools = pools or {}
        self._target = target
        self._endpoint_url = endpoint_url
        self._endpoints = endpoints
        self._made: dict[str, Any] = {}

    def __call__(self, service: str) -> Any:
        if service not in self._made:
            config = WORKER_CALLS if service in _WORKER_CALLS else None
            if (size := self._pools.get(service)) is not None:  # the pool can never be full
                config = (config or Config()).merge(Config(max_pool_connections=size))
            self._made[service] = self._make(service, config)
        return self._made[service]

    def checking(self, service: str) -> Any:
        """A client for the start-up checks: one-shot calls, whose throttles botocore tries again."""
        key = f"checks:{service}"
        if key not in self._made:
            client = self._make(service, WORKER_CALLS)
            client.meta.events.register("needs-retry", ThrottleRetries())
            self._made[key] = client
        return self._made[key]

    def heartbeat_client(self, window: float) -> Any:
        """A DynamoDB client for the heartbeat lane alone."""
        return self._make("dynamodb", heartbeat_config(window))

    def _make(self, service: str, config: Config | None) -> Any:
        return make_client(
            service,
            endpoint_url=self._endpoints.get(service, self._endpoint_url),
            region=self._target.region,
            session=self._target.session,
            config=config,
        )


def _build(config: WorkerConfig, clients: _Clients, metrics: MetricsSink, interval: float) -> Worker:
    ddb = clients("dynamodb")
    dlq = None
    if config.processing.dlq_url:
        dlq = SqsDeadLetterQueue(clients("sqs"), config.processing.dlq_url)
    return Worker(
        config,
        DynamoDBLeaseRepository(ddb, config.lease_table, config.checkpoint_table),
        DynamoDBCheckpointStore(ddb, config.checkpoint_table),
        BotoKinesis(clients("kinesis")),
        dlq=dlq,
        metrics=metrics,
        metrics_interval=interval,
        heartbeats=DynamoDBLeaseRepository(
            clients.heartbeat_client(config.lease.owner_validity), config.lease_table, config.checkpoint_table
        ),
    )
