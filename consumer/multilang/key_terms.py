"""A ``multilang`` error in the properties file's terms: the KCL key the operator wrote, not the variable behind it.

A properties key sets a ``CONSUMER_*`` variable (``failoverTimeMillis`` sets ``CONSUMER_LEASE_DURATION_SECONDS``,
in seconds); an error from the worker's settings or its start-up checks names that variable or a config field.
These functions name each such setting as the operator set it: its key and its number in the key's unit, the
variable when the operator set that, or a default.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping

from consumer.env_vars import ENV_VARS
from consumer.errors import ConfigError, ConsumerError
from consumer.multilang.properties import MultiLangSettings

__all__ = ["in_file_terms", "in_key_terms", "millis", "variables"]

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


def variables(s: MultiLangSettings) -> dict[str, str]:
    """The ``CONSUMER_*`` variables that the properties file's mapped keys set."""
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


def millis(seconds: str) -> str:
    """Seconds (as text) in milliseconds, as a KCL key's value is written."""
    value = round(float(seconds) * 1000, 3)
    return f"{value:.0f}" if value.is_integer() else f"{value:g}"


def in_key_terms(exc: ConfigError, settings: MultiLangSettings, env: Mapping[str, str]) -> ConfigError:
    """``exc`` in the properties file's terms. Each setting it names (a ``CONSUMER_*`` variable or a config
    field) is named as the operator set it: by its KCL key when the file sets it, its number in the key's unit
    (``failoverTimeMillis (1000 ms)``); as the variable when the operator set that; else as a default (by its
    key when a key sets it). An error about a default that names one key of the file (a cross-check such as
    ``CONSUMER_LEADER_CHECK_SECONDS`` against ``failoverTimeMillis``) is that key's error."""
    in_file = set(variables(settings))
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
            text = f"{text[: got.start()]}{got.group(0)[0]} got {millis(got.group(1))} ms"
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
        value = f" ({millis(number)} ms)" if ms and number else f" ({number})" if number else ""
        return f"{key}{value}", key
    if env.get(variable, "").strip() or not variable.isupper():  # the operator's variable, or no setting's
        return (f"{variable} ({number})" if number else variable), None
    if key is not None:  # a key the file leaves out: this consumer's default
        value = f"{millis(number)} ms, " if ms and number else f"{number}, " if number else ""
        return f"{key} (not set: {value}the default)", None
    unit = " s" if variable.endswith("_SECONDS") else ""
    return (f"{variable} ({number}{unit}, its default)" if number else f"{variable} (its default)"), None


def in_file_terms(
    exc: ConsumerError, settings: MultiLangSettings, env: Mapping[str, str], args: argparse.Namespace
) -> ConsumerError:
    """A start-up check's error with the variables it names put in the operator's terms: the properties key
    behind the stream, the flag or ``applicationName`` behind a table name, the key behind a setting (a variable
    the operator set stays)."""
    exc = _labelled(exc, settings, env, args)
    return in_key_terms(exc, settings, env) if isinstance(exc, ConfigError) else exc


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
