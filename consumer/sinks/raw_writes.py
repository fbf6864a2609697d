"""The raw S3 sink's side of S3: its own client, bounded by the typed config's timeouts, and what a failed
write means (``retried``: ``consumer.lifecycle.retry.verdict``, plus the refusals an operator fixes while the
worker runs)."""

from __future__ import annotations

import os
import threading
from typing import Any

from botocore.config import Config
from botocore.exceptions import ClientError

from consumer.aws import PROCESSOR_CALLS, make_client
from consumer.errors import ConsumerError, MissingResourceError, RefusedError
from consumer.lifecycle import retry
from consumer.settings.raw_sink import RawSinkConfig

__all__ = ["WRITE_FAILURES", "RawSinkFailedError", "own_client", "retried"]

_DENIED = frozenset({"AccessDenied", "AccessDeniedException", "403"})  # S3's codes for a refused permission
#: The metric counting each failed PUT (per stream, and per shard unless the worker keeps only streams).
WRITE_FAILURES = "RawWriteFailures"


class RawSinkFailedError(ConsumerError):
    """The raw sink stopped writing after a failure that retrying cannot fix (a bug, or a PUT that S3 refuses
    as made); raised by its next ``process_records`` so that the worker halts the shard. Its records stay
    unwritten and not done: the shard's next owner (after the fix is deployed) reads them again."""


def retried(exc: BaseException) -> bool:
    """Whether a failed write is tried again: what ``retry.verdict`` retries (a throttle, a 5xx, the network),
    and a missing bucket or denied access, which the operator fixes while the worker waits (create the bucket,
    fix the role's policy). Anything else (a bug of ours, a request S3 refuses as made) is not."""
    if retry.verdict(exc) is not retry.Verdict.SURFACE:
        return True
    if isinstance(exc, MissingResourceError):
        return True
    cause = exc.__cause__
    return (
        isinstance(exc, RefusedError)
        and isinstance(cause, ClientError)
        and str(cause.response.get("Error", {}).get("Code", "")) in _DENIED
    )


_clients: dict[tuple[object, ...], Any] = {}
#: What ``make_client`` reads from the environment for S3: the region and the endpoints.
_CLIENT_ENV = ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE")
_clients_lock = threading.Lock()


def own_client(settings: RawSinkConfig) -> Any:
    """The process's S3 client for the settings' timeouts (shared by the shards: boto3 clients are thread-safe
    and cost 10-30 ms of CPU to make). One attempt per PUT: a PUT that times out or fails returns to the sink,
    whose backoff tries it again, instead of holding the shard's lane for botocore's own retries."""
    # the environment the client was made from too: a process (a test run) may point at another endpoint later
    where = tuple(os.environ.get(v, "") for v in _CLIENT_ENV)
    key = (settings.connect_timeout, settings.read_timeout, *where)
    with _clients_lock:
        if key not in _clients:
            _clients[key] = make_client(
                "s3",
                config=PROCESSOR_CALLS.merge(
                    Config(
                        connect_timeout=settings.connect_timeout,
                        read_timeout=settings.read_timeout,
                        retries={"total_max_attempts": 1, "mode": "standard"},
                    )
                ),
            )
        return _clients[key]
