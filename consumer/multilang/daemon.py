"""``python -m consumer multilang app.properties``: a KCL MultiLangDaemon application on this consumer's fleet.

The properties file names the application, the stream and the child command; every other setting may still
come from the ``CONSUMER_*`` variables (a properties key wins over its variable). The lease and checkpoint
tables default to ``<applicationName>-fleet-leases`` and ``<applicationName>-fleet-checkpoints`` (never the
KCL's own table, which is named ``applicationName``); ``--lease-table``/``--checkpoint-table`` or the usual
variables name others.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
from collections.abc import Mapping
from pathlib import Path

from consumer.config import WorkerConfig, worker_config_from_env
from consumer.errors import ConfigError, ConsumerError
from consumer.health import attach_heartbeat
from consumer.loader import load_processor
from consumer.logs import log_event
from consumer.multilang.child import resolve_command
from consumer.multilang.processor import processor_factory
from consumer.multilang.properties import (
    KEYS,
    MultiLangSettings,
    parse_text,
    properties_text,
    read_properties,
)

__all__ = ["add_multilang_command", "multilang_config"]

logger = logging.getLogger(__name__)

# The CONSUMER_* variable each mapped key sets, so that an error names the key the operator wrote.
_VARIABLE_KEY = {
    "CONSUMER_APPLICATION": "applicationName",
    "CONSUMER_STREAMS": "streamName",
    "CONSUMER_WORKER_ID": "workerId",
    "CONSUMER_LEASE_DURATION_SECONDS": "failoverTimeMillis",
    "CONSUMER_DISCOVERY_INTERVAL_SECONDS": "shardSyncIntervalMillis",
    "CONSUMER_SCAN_INTERVAL_SECONDS": "leaseAssignmentIntervalMillis",
    "CONSUMER_MAX_RECORDS": "maxRecords",
    "CONSUMER_IDLE_TIME_SECONDS": "idleTimeBetweenReadsInMillis",
    "CONSUMER_INITIAL_POSITION": "initialPositionInStream",
    "CONSUMER_INITIAL_TIMESTAMP": "initialPositionInStreamExtended",
    "CONSUMER_RETRIEVAL": "retrievalMode",
    "lease.max_leases_per_worker": "maxLeasesForWorker",
}


def _variables(s: MultiLangSettings) -> dict[str, str]:
    out = {
        "CONSUMER_APPLICATION": s.application,
        "CONSUMER_STREAMS": s.stream,
        "CONSUMER_INITIAL_POSITION": s.initial_position,
    }
    if s.worker_id:
        out["CONSUMER_WORKER_ID"] = s.worker_id
    if s.initial_timestamp is not None:
        out["CONSUMER_INITIAL_TIMESTAMP"] = s.initial_timestamp.isoformat()
    seconds = {
        "CONSUMER_LEASE_DURATION_SECONDS": s.lease_duration,
        "CONSUMER_DISCOVERY_INTERVAL_SECONDS": s.discovery_interval,
        "CONSUMER_SCAN_INTERVAL_SECONDS": s.scan_interval,
        "CONSUMER_IDLE_TIME_SECONDS": s.idle_time_between_reads,
        "CONSUMER_METRICS_INTERVAL_SECONDS": s.metrics_interval,
    }
    out.update({k: repr(v) for k, v in seconds.items() if v is not None})
    if s.max_records is not None:
        out["CONSUMER_MAX_RECORDS"] = str(s.max_records)
    if s.retrieval_mode is not None:
        out["CONSUMER_RETRIEVAL"] = s.retrieval_mode
    return out


def multilang_config(
    settings: MultiLangSettings,
    env: Mapping[str, str],
    lease_table: str | None = None,
    checkpoint_table: str | None = None,
) -> tuple[WorkerConfig, dict[str, str]]:
    """The worker's settings: the properties over the ``CONSUMER_*`` variables of ``env``; errors name the key."""
    merged = {k: v for k, v in env.items() if k != "CONSUMER_PROCESSOR"}
    merged.update(_variables(settings))
    merged["CONSUMER_LEASE_TABLE"] = (
        lease_table or env.get("CONSUMER_LEASE_TABLE") or f"{settings.application}-fleet-leases"
    )
    merged["CONSUMER_CHECKPOINT_TABLE"] = (
        checkpoint_table
        or env.get("CONSUMER_CHECKPOINT_TABLE")
        or f"{settings.application}-fleet-checkpoints"
    )
    if settings.retrieval_mode == "fanout" and not env.get("CONSUMER_FANOUT_NAME"):
        merged["CONSUMER_FANOUT_NAME"] = settings.application  # the KCL's consumerName default
    try:
        config = worker_config_from_env(merged, load_processor, processor=processor_factory(settings))
        fitted = _fit_handoff(settings, config)
        if fitted is not settings:  # the children's bound changed: their factory with it
            config = worker_config_from_env(merged, load_processor, processor=processor_factory(fitted))
        if settings.max_leases_per_worker is not None:  # no CONSUMER_* variable: the typed setting
            config = dataclasses.replace(
                config,
                lease=dataclasses.replace(config.lease, max_leases_per_worker=settings.max_leases_per_worker),
            )
    except ConfigError as exc:
        key = _VARIABLE_KEY.get(exc.field)
        if key is None:
            raise
        raise ConfigError(f"{settings.source}: {key}", str(exc)[len(exc.field) + 2 :]) from None
    return config, merged


def _fit_handoff(settings: MultiLangSettings, config: WorkerConfig) -> MultiLangSettings:
    """The child's time to answer ``shutdownRequested`` fits in the worker's shutdown deadline, less the final
    checkpoint's time (``CONSUMER_SHUTDOWN_DEADLINE_SECONDS`` is bounded by the container's stop timeout):
    a child still busy past it would hold the stop past that deadline, its checkpoint refused and its lease
    left to expire. A ``gracefulLeaseHandoffTimeoutMillis`` longer than that is cut, with one warning."""
    room = config.shutdown.deadline - config.shutdown.final_checkpoint_timeout
    room = room if room > 0 else config.shutdown.deadline / 2
    if settings.shutdown_timeout <= room:
        return settings
    if settings.shutdown_timeout_given:
        log_event(
            logger,
            "multilang_setting_capped",
            logging.WARNING,
            key="gracefulLeaseHandoffTimeoutMillis",
            given_s=settings.shutdown_timeout,
            used_s=room,
            why="a child answers shutdownRequested within the worker's shutdown deadline "
            f"({config.shutdown.deadline:g}s, CONSUMER_SHUTDOWN_DEADLINE_SECONDS) less its final checkpoint "
            f"timeout ({config.shutdown.final_checkpoint_timeout:g}s)",
        )
    return dataclasses.replace(settings, shutdown_timeout=room)


def _in_file_terms(
    exc: ConsumerError, settings: MultiLangSettings, env: Mapping[str, str], args: argparse.Namespace
) -> ConsumerError:
    """A start-up check's error with the variables it names put in the operator's terms: the properties key
    behind the stream, the flag or ``applicationName`` behind a table name (a variable the operator set stays)."""
    labels = {"CONSUMER_STREAMS": f"{settings.source}: streamName (or streamArn)"}
    for variable, flag, given in (
        ("CONSUMER_LEASE_TABLE", "--lease-table", args.lease_table),
        ("CONSUMER_CHECKPOINT_TABLE", "--checkpoint-table", args.checkpoint_table),
    ):
        if given:
            labels[variable] = flag
        elif not env.get(variable):
            labels[variable] = (
                f"{settings.source}: applicationName (it names the default {flag[2:]}; or {flag})"
            )
    text = str(exc)
    for variable, label in labels.items():
        text = text.replace(variable, label)
    if text == str(exc):
        return exc
    if isinstance(exc, ConfigError):
        field = labels.get(exc.field, exc.field)
        return ConfigError(field, text[len(field) + 2 :] if text.startswith(f"{field}: ") else text)
    try:
        return type(exc)(text)
    except TypeError:  # an error type with more to it than a message: as it was
        return exc


def _check(settings: MultiLangSettings, path: Path) -> int:
    """``--check``: each key of the file and what becomes of it."""
    for key, value in parse_text(properties_text(path), str(path)).items():  # keys as the KCL reads them
        fate = KEYS[key]
        what = f"-> {fate.target}" if fate.kind == "mapped" else f"ignored: {fate.why}"
        print(f"{key} = {value}  {what}")
    print(f"stream {settings.stream}, child {' '.join(settings.command)} (in {settings.workdir})")
    return 0


def _run(args: argparse.Namespace) -> int:
    path = Path(args.properties)
    settings = read_properties(path)
    try:  # a typo here would otherwise fail every shard's child, one at a time, for as long as the daemon runs
        resolve_command(settings.command, settings.workdir, os.environ.get("PATH"))
    except ValueError as exc:
        raise ConfigError(f"{settings.source}: executableName", str(exc)) from None
    if args.check:
        return _check(settings, path)
    for key, why in settings.ignored:
        log_event(logger, "multilang_setting_ignored", logging.WARNING, key=key, why=why)
    config, env = multilang_config(settings, os.environ, args.lease_table, args.checkpoint_table)
    # With boto3 and the worker: imported when the command runs, not for every ``python -m consumer``.
    from consumer.embed import create_worker

    try:
        worker = create_worker(
            config, env=env, region=settings.region, endpoints=dict(settings.endpoints) or None
        )
    except ConsumerError as exc:
        raise _in_file_terms(exc, settings, os.environ, args) from None
    attach_heartbeat(worker, config.health)
    log_event(
        logger,
        "multilang_started",
        application=settings.application,
        stream=settings.stream,
        command=list(settings.command),
        worker=config.worker_id,
    )
    worker.run(handle_signals=True)
    return 0


def add_multilang_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``multilang`` on the CLI."""
    p = sub.add_parser(
        "multilang",
        help="run a KCL MultiLangDaemon application (its .properties file) on this consumer; no JVM",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("properties", help="the MultiLangDaemon properties file (e.g. sample.properties)")
    p.add_argument("--lease-table", help="default: $CONSUMER_LEASE_TABLE or <applicationName>-fleet-leases")
    p.add_argument(
        "--checkpoint-table",
        help="default: $CONSUMER_CHECKPOINT_TABLE or <applicationName>-fleet-checkpoints",
    )
    p.add_argument("--check", action="store_true", help="print what becomes of each key, then exit")
    p.set_defaults(func=_run)
