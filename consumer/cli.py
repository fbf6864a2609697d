"""The container entrypoint and operator commands: ``python -m consumer <command>``."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Sequence
from types import FrameType
from typing import Any

from consumer.admin.commands import add_admin_commands
from consumer.aws import make_client
from consumer.checkpoint.dynamodb import DynamoDBCheckpointStore
from consumer.config import WorkerConfig, worker_config_from_env
from consumer.dynamo import create_tables, translate_errors
from consumer.errors import ConfigError, ConsumerError
from consumer.leases.dynamodb import DynamoDBLeaseRepository
from consumer.lifecycle.worker import Worker
from consumer.loader import load_processor
from consumer.logs import configure_logging, log_event
from consumer.metrics.sink import EmfMetrics
from consumer.retrieval.kinesis import BotoKinesis
from consumer.sinks.dlq import SqsDeadLetterQueue

__all__ = ["build_worker", "main"]

logger = logging.getLogger("consumer.cli")

_FLAG_ENV = {
    "application": "CONSUMER_APPLICATION",
    "streams": "CONSUMER_STREAMS",
    "processor": "CONSUMER_PROCESSOR",
    "lease_table": "CONSUMER_LEASE_TABLE",
    "checkpoint_table": "CONSUMER_CHECKPOINT_TABLE",
    "dlq_url": "CONSUMER_DLQ_URL",
    "on_failure": "CONSUMER_ON_FAILURE",
    "worker_id": "CONSUMER_WORKER_ID",
}


def _require_tables(ddb: Any, config: WorkerConfig) -> None:
    for table in (config.lease_table, config.checkpoint_table):
        with translate_errors(table, "describe"):
            ddb.describe_table(TableName=table)


def build_worker(config: WorkerConfig, *, metrics_out: Any = None) -> Worker:
    """A worker on real clients (endpoints from the usual AWS_* variables, e.g. AWS_ENDPOINT_URL)."""
    ddb = make_client("dynamodb")
    _require_tables(ddb, config)
    dlq = None
    if config.processing.dlq_url:
        dlq = SqsDeadLetterQueue(make_client("sqs"), config.processing.dlq_url)
    return Worker(
        config,
        DynamoDBLeaseRepository(ddb, config.lease_table, config.checkpoint_table),
        DynamoDBCheckpointStore(ddb, config.checkpoint_table),
        BotoKinesis(make_client("kinesis")),
        dlq=dlq,
        metrics=EmfMetrics(config.application, config.worker_id, metrics_out),
        metrics_interval=float(os.environ.get("CONSUMER_METRICS_INTERVAL_SECONDS", "10")),
    )


def _run(args: argparse.Namespace) -> int:
    env = dict(os.environ)
    for flag, key in _FLAG_ENV.items():
        value = getattr(args, flag, None)
        if value:
            env[key] = value
    config = worker_config_from_env(env, load_processor)
    worker = build_worker(config)

    def stop(signum: int, _frame: FrameType | None) -> None:
        log_event(logger, "signal_received", signal=signal.Signals(signum).name)
        worker.request_shutdown()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    worker.run()
    return 0


def _create_tables(args: argparse.Namespace) -> int:
    for flag in ("lease_table", "checkpoint_table"):
        if not getattr(args, flag):
            raise ConfigError(
                f"--{flag.replace('_', '-')}", "is required (or set CONSUMER_" + flag.upper() + ")"
            )
    create_tables(make_client("dynamodb"), args.lease_table, args.checkpoint_table)
    print(f"tables ready: {args.lease_table}, {args.checkpoint_table}")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m consumer", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a worker (settings from CONSUMER_* variables; flags override)")
    for flag in _FLAG_ENV:
        run.add_argument(f"--{flag.replace('_', '-')}", dest=flag)
    run.set_defaults(func=_run)
    ct = sub.add_parser("create-tables", help="create the lease and checkpoint tables (local use)")
    ct.add_argument("--lease-table", default=os.environ.get("CONSUMER_LEASE_TABLE"), required=False)
    ct.add_argument("--checkpoint-table", default=os.environ.get("CONSUMER_CHECKPOINT_TABLE"), required=False)
    ct.set_defaults(func=_create_tables)
    add_admin_commands(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    configure_logging(os.environ.get("CONSUMER_LOG_LEVEL", "INFO"))
    args = parser().parse_args(argv)
    try:
        return int(args.func(args))
    except ConsumerError as exc:
        log_event(logger, "fatal", logging.ERROR, error=str(exc), error_type=type(exc).__name__)
        print(f"error: {exc}", file=sys.stderr)
        return 2
