"""Start-up checks: everything a worker can check before it takes a lease, each failure one line to fix.

Order: AWS region and credentials; DynamoDB reachable and both tables present with the key schema the
consumer writes (hash key ``lease_key``, type S); every stream; the dead-letter queue; each stream's
processor constructed once (the shipped processors validate their settings in their constructors) and the
resources it declares (``required_resources()``: the raw sink's bucket, the copier's target stream).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import boto3

from consumer.aws import region
from consumer.aws_errors import aws_call
from consumer.config import PROCESSOR_CHECKPOINT_MODES, WorkerConfig
from consumer.errors import ConfigError, ConsumerError, MissingResourceError, ProcessorLoadError
from consumer.lifecycle.async_processor import inert_callback_problem
from consumer.loader import CALLBACKS
from consumer.logs import log_event
from consumer.resources import Resource
from consumer.table_checks import (
    CONFIG_NAMES,
    ENV_NAMES,
    LEASE_KEY,
    SettingNames,
    check_table_pair,
    check_table_roles,
    check_table_schema,
)

__all__ = [
    "CONFIG_NAMES",
    "ENV_NAMES",
    "LEASE_KEY",
    "AwsTarget",
    "Clients",
    "SettingNames",
    "check_credentials",
    "check_resource",
    "check_stream",
    "check_table_pair",
    "check_table_roles",
    "check_table_schema",
    "processor_resources",
    "run_preflight",
]

logger = logging.getLogger(__name__)

_ACTIVE_STREAM = {"ACTIVE", "UPDATING"}


@dataclass(frozen=True)
class Clients:
    """boto3 clients made lazily (a missing region fails when one is first needed, not at import)."""

    make: Callable[[str], Any]

    def __call__(self, service: str) -> Any:
        return self.make(service)


@dataclass(frozen=True)
class AwsTarget:
    """Whose credentials and which region the clients use: a boto3 session (default: a new one on the usual
    chain) and a region that overrides the session's."""

    session: boto3.session.Session | None = None
    region: str | None = None

    def resolved_region(self) -> str | None:
        """The region the clients will use (``region``, else the session's, else ``AWS_REGION``)."""
        if self.region:
            return self.region
        if self.session is not None:
            return self.session.region_name or region()
        return region()


def check_credentials(target: AwsTarget | None = None) -> None:
    """The region and credentials resolve (from variables, a profile, a role or the given session)."""
    target = target or AwsTarget()
    session = target.session or boto3.session.Session()
    if not target.resolved_region():
        raise ConfigError(
            "AWS_REGION", "no AWS region: set AWS_REGION or AWS_DEFAULT_REGION (or a profile's region)"
        )
    if session.get_credentials() is None:
        raise ConfigError(
            "AWS_ACCESS_KEY_ID",
            "no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, "
            "or run with a task or instance role",
        )


def check_stream(kinesis: Any, stream: str, setting: str) -> None:
    """The stream exists and is ACTIVE (or UPDATING); the error names ``setting``."""
    with aws_call("kinesis", f"describe stream {stream!r}", setting):
        try:
            summary = kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]
        except kinesis.exceptions.ResourceNotFoundException:
            raise MissingResourceError(
                f"{setting}: Kinesis stream {stream!r} does not exist (in this region and account). Create "
                f"it with `aws kinesis create-stream --stream-name {stream} --shard-count N` or deploy the "
                f"streaming stack, or fix {setting}."
            ) from None
    if summary.get("StreamStatus") not in _ACTIVE_STREAM:
        raise MissingResourceError(
            f"{setting}: Kinesis stream {stream!r} is {summary.get('StreamStatus')}, not ACTIVE"
        )


def _check_queue(sqs: Any, url: str, setting: str) -> None:
    if not url.startswith(("https://", "http://")):
        raise ConfigError(
            setting, f"must be an SQS queue URL (https://sqs.REGION.amazonaws.com/...), got {url!r}"
        )
    with aws_call("sqs", f"queue {url}", setting):
        try:
            sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
        except sqs.exceptions.QueueDoesNotExist:
            raise MissingResourceError(
                f"{setting}: SQS queue {url!r} does not exist; create it (the state stack does) or fix {setting}"
            ) from None


def _check_bucket(s3: Any, bucket: str, setting: str) -> None:
    with aws_call("s3", f"bucket {bucket!r}", setting):
        try:
            s3.head_bucket(Bucket=bucket)
        except s3.exceptions.ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in {"404", "NoSuchBucket", "NotFound"}:
                raise MissingResourceError(
                    f"{setting}: S3 bucket {bucket!r} does not exist; create it (the analytics stack does) "
                    f"or fix {setting}"
                ) from None
            raise


def check_resource(clients: Clients, resource: Resource) -> None:
    """A resource a processor declared exists: a stream, a bucket or a queue."""
    if resource.kind == "kinesis_stream":
        check_stream(clients("kinesis"), resource.name, resource.setting)
    elif resource.kind == "s3_bucket":
        _check_bucket(clients("s3"), resource.name, resource.setting)
    else:
        _check_queue(clients("sqs"), resource.name, resource.setting)


def processor_resources(processor: object) -> list[Resource]:
    """What the processor says it needs (``required_resources()``; nothing when it declares none)."""
    declared = getattr(processor, "required_resources", None)
    return list(declared()) if callable(declared) else []


def _processor_setting(env: Mapping[str, str], stream: str) -> str:
    """What set the stream's processor: its own ``CONSUMER_STREAMS`` entry, ``CONSUMER_PROCESSOR``, or (a
    typed ``WorkerConfig``, no variables) the ``StreamSpec``."""
    if "CONSUMER_STREAMS" not in env and "CONSUMER_PROCESSOR" not in env:
        return "StreamSpec.processor_factory"
    own = any(p.strip().startswith(f"{stream}=") for p in env.get("CONSUMER_STREAMS", "").split(","))
    return "CONSUMER_STREAMS" if own else "CONSUMER_PROCESSOR"


def _construct(config: WorkerConfig, env: Mapping[str, str]) -> list[tuple[str, object]]:
    """Each stream's processor, made once: its factory runs and returns a record processor."""
    made: list[tuple[str, object]] = []
    for spec in config.streams:
        setting = f"{_processor_setting(env, spec.name)} (stream {spec.name!r})"
        try:
            processor = spec.processor_factory()
        except ConfigError:
            raise  # names the processor's own variable
        except ConsumerError as exc:
            raise ProcessorLoadError(f"{setting}: {exc}") from exc
        # A factory not made by load_processor (Python API); also its sys.exit() or KeyboardInterrupt, which
        # would otherwise end the start-up check (and the embedding application) without naming it.
        except (Exception, SystemExit, KeyboardInterrupt) as exc:
            raise ProcessorLoadError(
                f"{setting}: constructing the processor failed: {type(exc).__name__}: {exc}"
            ) from exc
        # A factory of the Python API is not checked by the loader: what it returns must be a processor.
        if missing := [m for m in CALLBACKS if not callable(getattr(processor, m, None))]:
            raise ProcessorLoadError(
                f"{setting}: the factory returned a {type(processor).__name__!r}, not a record processor "
                f"(it lacks {', '.join(missing)}; subclass consumer.BaseProcessor)"
            )
        if (inert := inert_callback_problem(processor)) is not None:  # its calls would run none of their body
            raise ProcessorLoadError(f"{setting}: {inert}")
        mode = getattr(processor, "checkpoint_mode", None)
        if mode is not None and mode not in PROCESSOR_CHECKPOINT_MODES:  # a typo would run as auto
            raise ProcessorLoadError(
                f"{setting}: {type(processor).__name__}.checkpoint_mode must be one of "
                f"{', '.join(PROCESSOR_CHECKPOINT_MODES)}; got {mode!r}"
            )
        if callable(check := getattr(processor, "check_source_stream", None)):
            check(spec.name)  # e.g. a copier whose target is this very stream (a typed config's, too)
        made.append((spec.name, processor))
    return made


def run_preflight(
    config: WorkerConfig, clients: Clients, env: Mapping[str, str], target: AwsTarget | None = None
) -> None:
    """Run every start-up check; raise the first problem found (the worker warns about risky settings).
    ``env`` is the variables the settings were read from, to name them in errors (which variable set each
    processor, too); empty for a typed ``WorkerConfig`` given in code, whose fields the errors name then.
    ``target`` is whose credentials and region the clients use."""
    names = ENV_NAMES if env else CONFIG_NAMES
    check_credentials(target)
    ddb = clients("dynamodb")
    check_table_schema(ddb, config.lease_table, names.lease_table)
    check_table_schema(ddb, config.checkpoint_table, names.checkpoint_table)
    check_table_roles(ddb, config.lease_table, config.checkpoint_table, names)
    for spec in config.streams:
        check_stream(clients("kinesis"), spec.name, names.streams)
    if config.processing.dlq_url:
        _check_queue(clients("sqs"), config.processing.dlq_url, names.dlq_url)
    for _stream, processor in _construct(config, env):
        for resource in processor_resources(processor):
            check_resource(clients, resource)
    log_event(logger, "preflight_passed", streams=[s.name for s in config.streams])
