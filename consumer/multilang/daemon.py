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
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from consumer.config import WorkerConfig, env_float, field_default, worker_config_from_env
from consumer.env_vars import ENV_VARS
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
    "CONSUMER_METRICS_INTERVAL_SECONDS": "metricsBufferTimeMillis",
    "lease.max_leases_per_worker": "maxLeasesForWorker",
}
# The keys in milliseconds: their variables, and so the errors' numbers, are in seconds.
_MILLIS_KEYS = frozenset(
    {
        "failoverTimeMillis",
        "shardSyncIntervalMillis",
        "leaseAssignmentIntervalMillis",
        "idleTimeBetweenReadsInMillis",
        "metricsBufferTimeMillis",
    }
)
# Each setting's variable by its config field ("lease.lease_duration"), as an error of a typed setting names it.
_FIELD_VARIABLE = {v.field: v.name for v in ENV_VARS if "." in v.field}
_NUMBER = r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?"
_NAMES = re.compile(
    r"(?<![\w.])("
    + "|".join(
        re.escape(n)
        for n in sorted({*_VARIABLE_KEY, *_FIELD_VARIABLE, *_FIELD_VARIABLE.values()}, key=len)[::-1]
    )
    + rf")(?![\w])(?: \(({_NUMBER})\))?"
)
_GOT = re.compile(rf"[;,] got ({_NUMBER})$")


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
        fitted = _fit_handoff(settings, config, caps)
        if fitted is not settings:  # the children's bound changed: their factory with it
            config = worker_config_from_env(merged, load_processor, processor=processor_factory(fitted))
        if settings.max_leases_per_worker is not None:  # no CONSUMER_* variable: the typed setting
            config = dataclasses.replace(
                config,
                lease=dataclasses.replace(config.lease, max_leases_per_worker=settings.max_leases_per_worker),
            )
    except ConfigError as exc:
        raise _in_key_terms(exc, settings, env) from None
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


def _millis(seconds: str) -> str:
    value = round(float(seconds) * 1000, 3)
    return f"{value:.0f}" if value.is_integer() else f"{value:g}"


def _in_key_terms(exc: ConfigError, settings: MultiLangSettings, env: Mapping[str, str]) -> ConfigError:
    """``exc`` in the properties file's terms. Each setting it names (a ``CONSUMER_*`` variable or a config
    field) is named as the operator set it: by its KCL key when the file sets it, its number in the key's unit
    (``failoverTimeMillis (1000 ms)``); as the variable when the operator set that; else as a default (by its
    key when a key sets it). An error about a default that names one key of the file (a cross-check such as
    ``CONSUMER_LEADER_CHECK_SECONDS`` against ``failoverTimeMillis``) is that key's error."""
    in_file = set(_variables(settings))
    if settings.max_leases_per_worker is not None:
        in_file.add("lease.max_leases_per_worker")
    named: list[str] = []

    def name(match: re.Match[str]) -> str:
        text, key = _term(match.group(1), match.group(2), in_file, env)
        named.extend([key] if key else [])
        return text

    message = str(exc)[len(exc.field) + 2 :] if str(exc).startswith(f"{exc.field}: ") else str(exc)
    text = _NAMES.sub(name, message)
    got = _GOT.search(text)
    field_text, field_key = _term(exc.field, got.group(1) if got else None, in_file, env)
    if field_key is not None:  # a key of the file: the error is its own
        if field_key in _MILLIS_KEYS and got:
            text = f"{text[: got.start()]}{got.group(0)[0]} got {_millis(got.group(1))} ms"
        return ConfigError(f"{settings.source}: {field_key}", text)
    variable = _FIELD_VARIABLE.get(exc.field, exc.field)
    if variable.isupper() and not env.get(variable, "").strip() and len(set(named)) == 1:
        # A default against the file's key: the key is what to change (or the default's own setting).
        key = named[0]
        rest = text[: got.start()] if got else text
        knob = _VARIABLE_KEY.get(variable, variable)
        return ConfigError(f"{settings.source}: {key}", f"{field_text} {rest}: change {key}, or set {knob}")
    if text == message:
        return exc
    return ConfigError(variable if variable.isupper() else exc.field, text)


def _term(name: str, number: str | None, in_file: set[str], env: Mapping[str, str]) -> tuple[str, str | None]:
    """How an error names a setting (a variable or a config field) and its ``number`` (seconds): the text, and
    the key when the file sets it."""
    variable = _FIELD_VARIABLE.get(name, name)
    key = _VARIABLE_KEY.get(variable) or _VARIABLE_KEY.get(name)
    ms = key in _MILLIS_KEYS and number is not None
    if key is not None and (variable in in_file or name in in_file):
        value = f" ({_millis(number)} ms)" if ms and number else f" ({number})" if number else ""
        return f"{key}{value}", key
    if env.get(variable, "").strip() or not variable.isupper():  # the operator's variable, or no setting's
        return (f"{variable} ({number})" if number else variable), None
    if key is not None:  # a key the file leaves out: this consumer's default
        value = f"{_millis(number)} ms, " if ms and number else f"{number}, " if number else ""
        return f"{key} (not set: {value}the default)", None
    unit = " s" if variable.endswith("_SECONDS") else ""
    return (f"{variable} ({number}{unit}, its default)" if number else f"{variable} (its default)"), None


def _in_file_terms(
    exc: ConsumerError, settings: MultiLangSettings, env: Mapping[str, str], args: argparse.Namespace
) -> ConsumerError:
    """A start-up check's error with the variables it names put in the operator's terms: the properties key
    behind the stream, the flag or ``applicationName`` behind a table name, the key behind a setting (a variable
    the operator set stays)."""
    exc = _labelled(exc, settings, env, args)
    return _in_key_terms(exc, settings, env) if isinstance(exc, ConfigError) else exc


def _labelled(
    exc: ConsumerError, settings: MultiLangSettings, env: Mapping[str, str], args: argparse.Namespace
) -> ConsumerError:
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


def _check(settings: MultiLangSettings, path: Path, args: argparse.Namespace) -> int:
    """``--check``: the config the start would build (a value the start refuses is refused here the same way,
    without contacting AWS), then each key of the file and what becomes of it."""
    _, _, caps = _build(settings, os.environ, args.lease_table, args.checkpoint_table)
    cut = {cap.key: cap for cap in caps}
    for key, value in parse_text(properties_text(path), str(path)).items():  # keys as the KCL reads them
        fate = KEYS[key]
        what = f"-> {fate.target}" if fate.kind == "mapped" else f"ignored: {fate.why}"
        if (cap := cut.get(key)) is not None:
            what += f"; cut to {_millis(repr(cap.used))} ms: {cap.why}"
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
