"""boto3 clients for the consumer: timeouts, how many attempts botocore makes under our own retries, and the
throttle retries of one-shot calls (the endpoint is configuration: ``AWS_ENDPOINT_URL`` works as usual).
What a failed call means is ``consumer.aws_errors.classify``'s to say."""

from __future__ import annotations

import logging
import os
import random
import threading
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import boto3
from botocore.config import Config
from botocore.exceptions import InvalidRegionError
from botocore.loaders import Loader
from botocore.utils import is_valid_endpoint_url, is_valid_ipv6_endpoint_url, parse_timestamp

from consumer.aws_errors import is_throttle_response
from consumer.errors import ConfigError
from consumer.logs import log_event
from consumer.retrieval.wire import LeanParserFactory
from consumer.settings.threads import MAX_THREADS

__all__ = [
    "PROCESSOR_CALLS",
    "WORKER_CALLS",
    "ThrottleRetries",
    "check_endpoint_url",
    "command_client",
    "heartbeat_config",
    "make_client",
    "region",
    "shared_client",
    "utc_timestamp",
]

logger = logging.getLogger(__name__)

# Our own retry policy (capped exponential backoff with jitter, and a give-up bound) decides; botocore's
# retries are kept short so that one call never blocks a thread for long, e.g. a heartbeat the coordinator
# waits for. DynamoDB answers in milliseconds; a fan-out subscription may sit a few seconds between events.
_BASE = Config(retries={"max_attempts": 2, "mode": "standard"}, max_pool_connections=64)
#: Clients that processors (and the raw sink) call from the processor threads, whose number the client cannot
#: know: a pool for the most there may be. Past its pool, urllib3 would open a connection for each further call
#: anyway and drop it with a warning; a pool keeps only the connections that were in use at once (its 4,096
#: slots cost ~10 ms to set up, once per host).
PROCESSOR_CALLS = Config(max_pool_connections=MAX_THREADS)
# The worker's own Kinesis and DynamoDB calls: one attempt each. Every caller has its retry policy (the shard
# machine's backoff, the coordinator resending a FAILED write, the heartbeat lane), and it alone decides:
# botocore retrying a throttle underneath it (sleeping up to seconds) would hide the throttle and hold the thread.
WORKER_CALLS = Config(retries={"total_max_attempts": 1, "mode": "standard"})
_TIMEOUTS = {"dynamodb": Config(connect_timeout=1, read_timeout=3)}
_DEFAULT_TIMEOUTS = Config(connect_timeout=2, read_timeout=10)


def region() -> str | None:
    """The region the consumer uses: the session's (``AWS_DEFAULT_REGION``, a profile), else ``AWS_REGION``."""
    return boto3.session.Session().region_name or os.environ.get("AWS_REGION") or None


def utc_timestamp(value: Any) -> datetime:
    """Epoch seconds, as the JSON protocols send them, as an aware UTC datetime. botocore's default looks up
    the local time zone (dateutil ``tzlocal``) for every value, which GetRecords pays once per record;
    anything but a number still goes to botocore's parser."""
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, UTC)
    parsed: datetime = parse_timestamp(value)
    return parsed


_TIMESTAMP_PARSERS = {"kinesis": utc_timestamp}  # services that return a timestamp per record


def heartbeat_config(window: float) -> Config:
    """The heartbeat lane's client: one attempt (our lane retries), timeouts a third of the owner's window
    (0.5 to 2 s), so that a slow or black-holed call leaves time for another before the window closes."""
    timeout = max(0.5, min(2.0, window / 3))
    return Config(
        connect_timeout=timeout, read_timeout=timeout, retries={"total_max_attempts": 1, "mode": "standard"}
    )


def make_client(
    service: str,
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
    session: boto3.session.Session | None = None,
    config: Config | None = None,
    endpoint_setting: str = "endpoint_url",
) -> Any:
    """A client with the consumer's timeouts and retries (credentials from ``session``, default chain).
    The region is ``region``, else the session's, else ``AWS_REGION`` (which botocore itself does not read);
    ``config`` overrides the timeouts and retries. An endpoint that is not a URL is a :class:`ConfigError`
    naming where it came from: ``endpoint_setting`` (default ``endpoint_url``) for ``endpoint_url``, else
    ``AWS_ENDPOINT_URL_<SERVICE>`` or ``AWS_ENDPOINT_URL``."""
    _check_endpoint(service, endpoint_url, endpoint_setting)
    override = config
    config = _BASE.merge(_TIMEOUTS.get(service, _DEFAULT_TIMEOUTS))
    if override is not None:
        config = config.merge(override)
    if service == "s3" and (endpoint_url or os.environ.get("AWS_ENDPOINT_URL")):
        config = config.merge(Config(s3={"addressing_style": "path"}))  # local endpoints have no bucket DNS
    if session is None:
        session = _own_session()
        if (parser := _TIMESTAMP_PARSERS.get(service)) is not None:  # this session makes only this client
            factory = LeanParserFactory()  # GetRecords decoded without botocore's per-field walk
            factory.set_parser_defaults(timestamp_parser=parser)
            session._session.register_component("response_parser_factory", factory)
    name = region or session.region_name or os.environ.get("AWS_REGION") or None
    try:
        return session.client(service, endpoint_url=endpoint_url, region_name=name, config=config)
    except InvalidRegionError:  # botocore's words name no setting ("AWS: Provided region_name ...")
        raise ConfigError(
            _region_setting(name, region), f"not an AWS region: {name!r} (a region name is like us-east-1)"
        ) from None
    except ValueError as exc:  # an endpoint we did not see (a profile's endpoint_url): botocore's words
        if not str(exc).startswith(("Invalid endpoint", "Invalid IPv6 URL")):
            raise
        raise ConfigError("endpoint_url", f"not a URL: {exc} (check the AWS config file)") from None


def _region_setting(name: str | None, given: str | None) -> str:
    """What set the region ``name`` a client is made for: ``region`` given in code, else the variable that
    holds it; a profile's region is named as ``AWS_DEFAULT_REGION``, the variable that overrides it."""
    if given:
        return "region"
    for variable in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        if os.environ.get(variable) == name:
            return variable
    return "AWS_DEFAULT_REGION"


def check_endpoint_url(url: str, setting: str) -> None:
    """``url`` is an endpoint botocore accepts (``http(s)://host[:port]``), else a :class:`ConfigError`
    naming ``setting``."""
    try:
        parts = urlsplit(url)
        scheme = parts.scheme
        _ = parts.port  # read only here: a port out of range or not a number (botocore checks the host only)
        valid = bool(is_valid_endpoint_url(url) or is_valid_ipv6_endpoint_url(url))
    except ValueError:  # urlsplit's own refusal, e.g. an unclosed IPv6 bracket or a bad port
        valid, scheme = False, ""
    if not valid or scheme not in ("http", "https"):
        raise ConfigError(
            setting, f"not a URL: {url!r} (an endpoint is http(s)://host[:port], e.g. http://localhost:4566)"
        )


def _check_endpoint(service: str, endpoint_url: str | None, setting: str) -> None:
    """The endpoint the client will use, checked before botocore refuses it with a bare ``ValueError``."""
    if endpoint_url is not None:
        check_endpoint_url(endpoint_url, setting)
        return
    if os.environ.get("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "").strip().lower() == "true":
        return
    for variable in (f"AWS_ENDPOINT_URL_{service.upper()}", "AWS_ENDPOINT_URL"):
        if value := os.environ.get(variable):  # the first one set is the one botocore uses
            check_endpoint_url(value, variable)
            return


_loader: list[Loader] = []  # the process's one, once a session of ours has made it
_loader_lock = threading.Lock()


def _own_session() -> boto3.session.Session:
    """A session of the consumer's own (the default credential chain), each client's, so that one client's
    parser settings stay its own. They share the process's one botocore data loader: each session otherwise
    reads and parses the service models and endpoints.json again, 60-140 ms of CPU per client made
    (botocore shares the loader between the clients of one session the same way)."""
    session = boto3.session.Session()
    with _loader_lock:
        if not _loader:
            _loader.append(session._session.get_component("data_loader"))  # the first session's, as it is
        else:
            session._session.register_component("data_loader", _loader[0])
    return session


_shared: dict[str, Any] = {}
_shared_lock = threading.Lock()


def shared_client(service: str) -> Any:
    """One client per service per process (boto3 clients are thread-safe; creating one still costs 10-30 ms
    of CPU with the shared data loader, and a pool of connections, which a processor created per shard on
    every hand-off should not pay). Processors call it from up to ``threads.processor_threads`` threads, so
    its pool holds :data:`PROCESSOR_CALLS`' connections."""
    with _shared_lock:
        if service not in _shared:
            _shared[service] = make_client(service, config=PROCESSOR_CALLS)
        return _shared[service]


class ThrottleRetries:
    """A botocore ``needs-retry`` handler for one-shot calls (operator commands, a worker's start-up checks),
    which have no retry policy of ours above them: a call ``consumer.aws_errors`` reads as throttled
    (``is_throttle_response``: a throttle code, the service's own, a transaction cancelled by throttling) is
    tried again after a jittered exponential backoff (``base`` doubling up to ``cap`` seconds), up to ``attempts`` tries in all (18-36 s at the defaults:
    a table that a running fleet keeps at its limit still lets an operator's command through); any other
    failure is not retried here, so that an endpoint that cannot be reached is reported at once."""

    def __init__(self, attempts: int = 12, base: float = 0.2, cap: float = 5.0) -> None:
        self.attempts, self.base, self.cap = attempts, base, cap

    def __call__(
        self, response: Any = None, attempts: int = 1, operation: Any = None, **_: Any
    ) -> float | None:
        if response is None or attempts >= self.attempts:
            return None
        service = getattr(getattr(operation, "service_model", None), "service_name", None) or "aws"
        if not is_throttle_response(response[1], service):  # what a throttle is: the classifier's to say
            return None
        delay: float = random.uniform(0.5, 1.0) * min(self.cap, self.base * 2 ** (attempts - 1))
        name = getattr(operation, "name", "unknown")
        log_event(
            logger,
            "call_throttled",
            logging.WARNING,
            operation=name,
            attempt=attempts,
            delay_s=round(delay, 3),
        )
        return delay


def command_client(service: str, **kwargs: Any) -> Any:
    """``make_client`` for one-shot calls: one attempt per failure, throttles tried again (``ThrottleRetries``)."""
    client = make_client(service, config=WORKER_CALLS, **kwargs)
    client.meta.events.register("needs-retry", ThrottleRetries())
    return client
