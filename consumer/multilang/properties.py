"""A KCL MultiLangDaemon properties file, read into this consumer's settings.

Every key of the KCL's sample properties file (amazon-kclpy 3.2.0 ``samples/sample.properties``) has one
fate here: mapped to a setting of this consumer, ignored (harmless: it tunes something this consumer does
differently or not at all), or refused (honouring it would change behaviour). A missing required key, a
refused key or a bad value is one ``ConfigError`` naming the file and the key.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from consumer.errors import ConfigError
from consumer.multilang.java_properties import parse_text
from consumer.multilang.kcl_keys import BOOLEAN_KEYS, DEFAULTS_ACCEPTED, KEYS, Fate, kcl_boolean

__all__ = [
    "KEYS",
    "Fate",
    "MultiLangSettings",
    "parse_properties",
    "parse_text",
    "properties_text",
    "read_properties",
]


_RETRIEVAL_MODES = {"POLLING": "polling", "FANOUT": "fanout", "DEFAULT": None}
_ARN = re.compile(
    r"^arn:aws[a-z-]*:kinesis:(?P<region>[a-z0-9-]+):(?P<account>\d{12}):stream/(?P<name>[\w.-]+)$"
)


@dataclass(frozen=True)
class MultiLangSettings:
    """The application a properties file describes, in this consumer's terms (seconds, not milliseconds)."""

    source: str
    command: tuple[str, ...]
    workdir: Path
    application: str
    stream: str
    region: str | None = None
    worker_id: str | None = None
    initial_position: str = "LATEST"  # the KCL's default
    initial_timestamp: datetime | None = None
    lease_duration: float | None = None
    discovery_interval: float | None = None
    scan_interval: float | None = None
    max_records: int | None = None
    idle_time_between_reads: float | None = None
    backoff_base: float = 0.5  # KCL taskBackoffTimeMillis default 500
    metrics_interval: float | None = None
    response_timeout: float = 60.0
    shutdown_timeout: float = 30.0  # KCL gracefulLeaseHandoffTimeoutMillis default 30000
    shutdown_timeout_given: bool = False  # gracefulLeaseHandoffTimeoutMillis is in the file
    max_leases_per_worker: int | None = None
    retrieval_mode: str | None = None  # "polling" or "fanout"; None: this consumer's default
    endpoints: tuple[tuple[str, str], ...] = ()  # (service, URL): kinesisEndpoint, dynamoDBEndpoint
    ignored: tuple[tuple[str, str], ...] = field(default=())


def read_properties(path: Path) -> MultiLangSettings:
    """Read and map a properties file; ``ConfigError`` names the file and the key."""
    return parse_properties(parse_text(properties_text(path), str(path)), str(path), path.resolve().parent)


def properties_text(path: Path) -> str:
    """The file's text: UTF-8, else ISO-8859-1 (what Java's ``Properties.load``, and so the KCL, reads by
    default); ``ConfigError`` naming the file when it cannot be read."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(str(path), f"cannot read the properties file ({exc.strerror or exc})") from None
    if data.startswith(
        (b"\xff\xfe", b"\xfe\xff")
    ):  # saved as UTF-16 by an editor: its byte-order mark says so
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError:
            raise ConfigError(str(path), "is neither UTF-8, ISO-8859-1 nor valid UTF-16") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return data.decode("iso-8859-1")


def _millis(props: Mapping[str, str], key: str, source: str) -> float | None:
    raw = props.get(key, "")
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(
            f"{source}: {key}", f"must be a whole number of milliseconds, got {raw!r}"
        ) from None
    if value <= 0:
        raise ConfigError(f"{source}: {key}", f"must be > 0 milliseconds, got {value}")
    return value / 1000.0


def _ignored(props: Mapping[str, str], source: str) -> tuple[tuple[str, str], ...]:
    """The keys ignored (with why); a refused or unknown key raises."""
    ignored: list[tuple[str, str]] = []
    for key, value in props.items():
        fate = KEYS.get(key)
        if fate is None:
            raise ConfigError(
                f"{source}: {key}",
                "unknown setting (refused: a MultiLangDaemon key this daemon does not know)",
            )
        if not value or fate.kind == "mapped":
            continue
        accepted = DEFAULTS_ACCEPTED.get(key, (props.get("regionName", ""),))
        given = value
        if key in BOOLEAN_KEYS:  # the KCL reads True, FALSE, yes, off, ... too
            normal = kcl_boolean(value)
            if normal is None:
                raise ConfigError(
                    f"{source}: {key}", f"must be true or false (as the KCL reads a boolean), got {value!r}"
                )
            given = normal
        if fate.kind == "refused" or (fate.kind == "refused-unless-default" and given not in accepted):
            raise ConfigError(f"{source}: {key}", f"{value!r} is refused: {fate.why}")
        ignored.append((key, fate.why))
    return tuple(ignored)


def _initial(props: Mapping[str, str], source: str) -> tuple[str, datetime | None]:
    position = (props.get("initialPositionInStream") or "LATEST").upper()
    if position not in ("TRIM_HORIZON", "LATEST", "AT_TIMESTAMP"):
        raise ConfigError(
            f"{source}: initialPositionInStream",
            f"must be TRIM_HORIZON, LATEST or AT_TIMESTAMP; got {position!r}",
        )
    raw = props.get("initialPositionInStreamExtended")
    if not raw:
        if position == "AT_TIMESTAMP":
            raise ConfigError(
                f"{source}: initialPositionInStreamExtended", "is required with AT_TIMESTAMP (epoch seconds)"
            )
        return position, None
    if props.get("initialPositionInStream") and position != "AT_TIMESTAMP":
        raise ConfigError(
            f"{source}: initialPositionInStreamExtended",
            f"is set with initialPositionInStream = {position} (the KCL applies whichever of the two it reads "
            "last): remove one, or set initialPositionInStream = AT_TIMESTAMP",
        )
    try:
        return "AT_TIMESTAMP", datetime.fromtimestamp(float(raw), UTC)
    except (ValueError, OverflowError):
        raise ConfigError(
            f"{source}: initialPositionInStreamExtended", f"must be epoch seconds, got {raw!r}"
        ) from None


def _number(props: Mapping[str, str], key: str, source: str, kind: type[int] | type[float]) -> float | None:
    raw = props.get(key)
    if not raw:
        return None
    what = "a whole number" if kind is int else "a number"
    try:
        value = kind(raw)
    except ValueError:
        raise ConfigError(f"{source}: {key}", f"must be {what}, got {raw!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise ConfigError(f"{source}: {key}", f"must be {what} > 0, got {raw}")
    return value


def parse_properties(props: Mapping[str, str], source: str, workdir: Path) -> MultiLangSettings:
    """Map parsed properties (key -> value) to ``MultiLangSettings``; empty values count as unset."""
    ignored = _ignored(props, source)

    def required(key: str) -> str:
        if not props.get(key):
            raise ConfigError(f"{source}: {key}", "is required")
        return props[key]

    executable = required("executableName")
    try:  # split as a shell would (quotes group words), where the KCL splits on spaces alone
        command = tuple(shlex.split(executable))
    except ValueError as exc:
        raise ConfigError(
            f"{source}: executableName",
            f'cannot be split into words ({exc}): quote a path with a \' or " in it, e.g. "/home/o\'brien/app.py"',
        ) from None
    region = props.get("regionName") or None
    stream = _stream(props, source, region)
    position, timestamp = _initial(props, source)
    max_records = _number(props, "maxRecords", source, int)
    max_leases = _number(props, "maxLeasesForWorker", source, int)
    return MultiLangSettings(
        source=source,
        command=command,
        workdir=workdir,
        application=required("applicationName"),
        stream=stream,
        region=region,
        worker_id=props.get("workerId") or props.get("workerIdentifier") or None,
        initial_position=position,
        initial_timestamp=timestamp,
        lease_duration=_millis(props, "failoverTimeMillis", source),
        discovery_interval=_millis(props, "shardSyncIntervalMillis", source),
        scan_interval=_millis(props, "leaseAssignmentIntervalMillis", source),
        max_records=int(max_records) if max_records is not None else None,
        idle_time_between_reads=_millis(props, "idleTimeBetweenReadsInMillis", source),
        backoff_base=_millis(props, "taskBackoffTimeMillis", source) or 0.5,
        metrics_interval=_millis(props, "metricsBufferTimeMillis", source),
        response_timeout=_number(props, "timeoutInSeconds", source, float) or 60.0,
        shutdown_timeout=_millis(props, "gracefulLeaseHandoffTimeoutMillis", source) or 30.0,
        shutdown_timeout_given=bool(props.get("gracefulLeaseHandoffTimeoutMillis")),
        max_leases_per_worker=int(max_leases) if max_leases is not None else None,
        retrieval_mode=_retrieval_mode(props, source),
        endpoints=_endpoints(props, source),
        ignored=ignored,
    )


def _retrieval_mode(props: Mapping[str, str], source: str) -> str | None:
    raw = props.get("retrievalMode")
    if not raw:
        return None
    if raw.upper() not in _RETRIEVAL_MODES:
        raise ConfigError(f"{source}: retrievalMode", f"must be POLLING, FANOUT or DEFAULT; got {raw!r}")
    return _RETRIEVAL_MODES[raw.upper()]


def _endpoints(props: Mapping[str, str], source: str) -> tuple[tuple[str, str], ...]:
    out = []
    for key, service in (("kinesisEndpoint", "kinesis"), ("dynamoDBEndpoint", "dynamodb")):
        if url := props.get(key):
            if not re.match(r"^https?://[^/\s]+", url):
                raise ConfigError(
                    f"{source}: {key}", f"not a URL: {url!r} (an endpoint is http(s)://host[:port])"
                )
            out.append((service, url))
    return tuple(out)


def _stream(props: Mapping[str, str], source: str, region: str | None) -> str:
    if arn := props.get("streamArn"):
        match = _ARN.match(arn)
        if match is None:
            raise ConfigError(f"{source}: streamArn", f"not a Kinesis stream ARN: {arn!r}")
        if region and match.group("region") != region:
            raise ConfigError(
                f"{source}: streamArn",
                f"is in region {match.group('region')} but regionName is {region}: make them agree",
            )
        return match.group("name")
    if name := props.get("streamName"):
        return name
    raise ConfigError(f"{source}: streamName", "is required (or streamArn)")
