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
from dataclasses import dataclass
from pathlib import Path

from consumer.config import WorkerConfig, env_float, field_default, worker_config_from_env
from consumer.errors import ConfigError, ConsumerError
from consumer.health import attach_heartbeat
from consumer.loader import load_processor
from consumer.logs import log_event
from consumer.multilang.child import resolve_command
from consumer.multilang.key_terms import in_file_terms, in_key_terms, millis, variables
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


@dataclass(frozen=True)
class _Cap:
    """A key whose value was cut to what this consumer allows (a warning at start, a note in ``--check``)."""

    key: str
    given: float
    used: float
    why: str


def multilang_config(
    settings: MultiLangSettings,
    env: Mapping[str, str],
    lease_table: str | None = None,
    checkpoint_table: str | None = None,
) -> tuple[WorkerConfig, dict[str, str]]:
    """The worker's settings: the properties over the ``CONSUMER_*`` variables of ``env``; errors name the key.
    A value cut to what this consumer allows is one ``multilang_setting_capped`` warning."""
    config, merged, caps = _build(settings, env, lease_table, checkpoint_table)
    for cap in caps:
        log_event(
            logger,
            "multilang_setting_capped",
            logging.WARNING,
            key=cap.key,
            given_s=cap.given,
            used_s=cap.used,
            why=cap.why,
        )
    return config, merged


def _build(
    settings: MultiLangSettings,
    env: Mapping[str, str],
    lease_table: str | None,
    checkpoint_table: str | None,
) -> tuple[WorkerConfig, dict[str, str], list[_Cap]]:
    """What ``multilang`` starts with, and what ``--check`` shows: the config, its variables, the keys cut."""
    caps: list[_Cap] = []
    settings = _fit_scan(settings, env, caps)
    merged = {k: v for k, v in env.items() if k != "CONSUMER_PROCESSOR"}
    merged.update(variables(settings))
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
        fitted = _fit_handoff(settings, config, caps)
        if fitted is not settings:  # the children's bound changed: their factory with it
            config = worker_config_from_env(merged, load_processor, processor=processor_factory(fitted))
        if settings.max_leases_per_worker is not None:  # no CONSUMER_* variable: the typed setting
            config = dataclasses.replace(
                config,
                lease=dataclasses.replace(config.lease, max_leases_per_worker=settings.max_leases_per_worker),
            )
    except ConfigError as exc:
        raise in_key_terms(exc, settings, env) from None
    return config, merged, caps


def _fit_scan(settings: MultiLangSettings, env: Mapping[str, str], caps: list[_Cap]) -> MultiLangSettings:
    """``leaseAssignmentIntervalMillis`` paces the KCL leader's lease assignment (KCL 3.x; its default is
    2 x failoverTimeMillis). Here it is the leader's scan of the lease table, which must come more often than a
    lease duration (the leader times a silent owner from the scan that first showed it): a value of a lease
    duration or more is cut to half the lease duration, with one warning, rather than refused."""
    if settings.scan_interval is None:
        return settings
    lease = settings.lease_duration
    if lease is None:
        try:
            lease = env_float(env, "CONSUMER_LEASE_DURATION_SECONDS", field_default("lease.lease_duration"))
        except ConfigError:  # the build below names it
            return settings
    if settings.scan_interval < lease or not lease > 0:
        return settings
    used = lease / 2
    caps.append(
        _Cap(
            "leaseAssignmentIntervalMillis",
            settings.scan_interval,
            used,
            "the leader scans the lease table more often than a lease duration "
            f"(failoverTimeMillis, {lease:g}s): half of it is used",
        )
    )
    return dataclasses.replace(settings, scan_interval=used)


def _fit_handoff(settings: MultiLangSettings, config: WorkerConfig, caps: list[_Cap]) -> MultiLangSettings:
    """The child's time to answer ``shutdownRequested`` fits in the worker's shutdown deadline, less the final
    checkpoint's time (``CONSUMER_SHUTDOWN_DEADLINE_SECONDS`` is bounded by the container's stop timeout):
    a child still busy past it would hold the stop past that deadline, its checkpoint refused and its lease
    left to expire. A ``gracefulLeaseHandoffTimeoutMillis`` longer than that is cut, with one warning."""
    room = config.shutdown.deadline - config.shutdown.final_checkpoint_timeout
    room = room if room > 0 else config.shutdown.deadline / 2
    if settings.shutdown_timeout <= room:
        return settings
    if settings.shutdown_timeout_given:
        caps.append(
            _Cap(
                "gracefulLeaseHandoffTimeoutMillis",
                settings.shutdown_timeout,
                room,
                "a child answers shutdownRequested within the worker's shutdown deadline "
                f"({config.shutdown.deadline:g}s, CONSUMER_SHUTDOWN_DEADLINE_SECONDS) less its final checkpoint "
                f"timeout ({config.shutdown.final_checkpoint_timeout:g}s)",
            )
        )
    return dataclasses.replace(settings, shutdown_timeout=room)


def _check(settings: MultiLangSettings, path: Path, args: argparse.Namespace) -> int:
    """``--check``: the config the start would build (a value the start refuses is refused here the same way,
    without contacting AWS), then each key of the file and what becomes of it."""
    _, _, caps = _build(settings, os.environ, args.lease_table, args.checkpoint_table)
    cut = {cap.key: cap for cap in caps}
    for key, value in parse_text(properties_text(path), str(path)).items():  # keys as the KCL reads them
        fate = KEYS[key]
        what = f"-> {fate.target}" if fate.kind == "mapped" else f"ignored: {fate.why}"
        if (cap := cut.get(key)) is not None:
            what += f"; cut to {millis(repr(cap.used))} ms: {cap.why}"
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
        return _check(settings, path, args)
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
        raise in_file_terms(exc, settings, os.environ, args) from None
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
