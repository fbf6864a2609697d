"""The one classifier of provider errors: every botocore failure becomes this package's error, and its
``retriable`` flag alone decides whether the caller tries again; anything else (a bug of ours) is left as it
is and is never retried.

| the provider said | error | retriable |
|---|---|---|
| a throttle code (``THROTTLE_CODES``; Kinesis also ``ResourceInUseException``), a throttled transaction | ``ThrottledError`` | yes, never counted towards giving up |
| a 5xx, ``RETRIABLE_CODES``, a transaction cancelled by another under way, a damaged answer | ``TransientError`` | yes |
| connection refused, reset or closed, a timeout | ``UnreachableError`` | yes |
| not found | ``MissingResourceError`` | no |
| no region, no or rejected credentials, a profile that is not in the config files | ``ConfigError`` | no |
| access denied, a validation error, any other refusal; botocore rejecting the parameters | ``RefusedError`` | no |

Each message says what was being done and, for the command line, which setting names the resource.
Exit codes (docs/operations.md): 2 for a setting, a missing or wrong resource, or refused input; 4 when an
AWS endpoint cannot be reached (the network, the endpoint variable, or the service being down).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeAlias

from botocore.exceptions import (
    BotoCoreError,
    ChecksumError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    HTTPClientError,
    IncompleteReadError,
    NoCredentialsError,
    NoRegionError,
    PartialCredentialsError,
    ProfileNotFound,
)
from botocore.exceptions import (
    ConnectionError as BotoConnectionError,
)
from urllib3.exceptions import HTTPError as Urllib3HTTPError

from consumer.errors import (
    EXIT_INVALID,
    EXIT_NOT_CONFIRMED,
    EXIT_UNREACHABLE,
    ConfigError,
    ConsumerError,
    MissingResourceError,
    RefusedError,
    ThrottledError,
    TransientError,
    UnreachableError,
)

__all__ = [
    "EXIT_INVALID",
    "EXIT_NOT_CONFIRMED",
    "EXIT_UNREACHABLE",
    "PROVIDER_FAILURES",
    "RETRIABLE_CODES",
    "THROTTLE_CODES",
    "ProviderFailure",
    "UnreachableError",
    "aws_call",
    "classify",
    "endpoint_variables",
    "is_throttle_code",
    "is_throttle_response",
]

THROTTLE_CODES = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "Throttling",
        "RequestLimitExceeded",
        "LimitExceededException",
        "KMSThrottlingException",
        "SlowDown",  # S3
    }
)
# Per service: codes that mean "slow down" there only. Kinesis: a subscription for this consumer and shard
# is still open (retry shortly).
_SERVICE_THROTTLES = {"kinesis": frozenset({"ResourceInUseException"})}
RETRIABLE_CODES = THROTTLE_CODES | frozenset(
    {
        "InternalFailure",
        "InternalFailureException",
        "InternalServerError",
        "PriorRequestNotComplete",
        "RequestTimeout",
        "RequestTimeoutException",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "ReplicatedWriteConflictException",
        "TransactionConflict",
        "TransactionConflictException",  # a write to an item a transaction is changing (e.g. a heartbeat)
        "TransactionInProgressException",
    }
)
# Why DynamoDB cancelled a transaction, beyond a failed condition (which the lease code reads as a conflict).
_THROTTLED_REASONS = frozenset({"ThrottlingError", "ProvisionedThroughputExceeded"})
_CONFLICT_REASONS = frozenset({"TransactionConflict"})

_NOT_FOUND = {
    "ResourceNotFoundException",
    "NoSuchBucket",
    "NotFound",
    "404",
    "AWS.SimpleQueueService.NonExistentQueue",
    "QueueDoesNotExist",
}
_CREDENTIALS = {
    "UnrecognizedClientException",
    "InvalidClientTokenId",
    "InvalidSignatureException",
    "SignatureDoesNotMatch",
    "ExpiredTokenException",
    "ExpiredToken",
    "InvalidAccessKeyId",
}
_DENIED = {"AccessDeniedException", "AccessDenied", "403"}
_NAMES = {"dynamodb": "DynamoDB", "kinesis": "Kinesis", "sqs": "SQS", "s3": "S3", "aws": "AWS"}
# Transport failures: the request may never have arrived, or its answer was lost on the way back.
_TRANSPORT = (BotoConnectionError, HTTPClientError, Urllib3HTTPError, ConnectionResetError)
# Everything a provider call can fail with that is not a bug of ours: what ``classify`` takes.
PROVIDER_FAILURES = (BotoCoreError, ClientError, Urllib3HTTPError, ConnectionResetError)
ProviderFailure: TypeAlias = BotoCoreError | ClientError | Urllib3HTTPError | ConnectionResetError


def endpoint_variables(service: str) -> str:
    """The variables that choose ``service``'s endpoint."""
    if service == "aws":
        return "AWS_ENDPOINT_URL (or AWS_ENDPOINT_URL_<SERVICE>)"
    return f"AWS_ENDPOINT_URL_{service.upper()} or AWS_ENDPOINT_URL"


def _credentials_message() -> str:
    return (
        "no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, "
        "or run with a task or instance role"
    )


def _setup_error(exc: ProviderFailure) -> ConfigError | None:
    """No region, no credentials, or a profile that is in neither config file (``AWS_PROFILE``, or
    ``AWS_DEFAULT_PROFILE`` when only that is set); None for anything else."""
    if isinstance(exc, NoRegionError):
        return ConfigError(
            "AWS_REGION", "no AWS region: set AWS_REGION or AWS_DEFAULT_REGION (or a profile's region)"
        )
    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        return ConfigError("AWS_ACCESS_KEY_ID", _credentials_message())
    if not isinstance(exc, ProfileNotFound):
        return None
    only_default = os.environ.get("AWS_DEFAULT_PROFILE") and not os.environ.get("AWS_PROFILE")
    setting = "AWS_DEFAULT_PROFILE" if only_default else "AWS_PROFILE"
    profile = exc.kwargs.get("profile", "")
    return ConfigError(
        setting,
        f"no profile {profile!r} in the AWS config files (AWS_CONFIG_FILE, AWS_SHARED_CREDENTIALS_FILE; "
        f"default ~/.aws/config and ~/.aws/credentials): fix {setting} or unset it",
    )


def classify(exc: ProviderFailure, service: str = "aws", what: str = "", setting: str = "") -> ConsumerError:
    """This package's error for a provider failure (see the module's table); catch ``PROVIDER_FAILURES``
    only, so that a bug of ours is never mistaken for one.

    ``what`` says what was being done (``describe table 'x'``), ``setting`` the variable or flag naming the
    resource, so the message says what to change. Raise the result ``from exc``."""
    label = _NAMES.get(service, service)
    doing = f" ({what})" if what else ""
    if (setup := _setup_error(exc)) is not None:
        return setup
    if isinstance(exc, _TRANSPORT) or (
        isinstance(exc, BotoCoreError) and "timeout" in type(exc).__name__.lower()
    ):
        url = getattr(exc, "kwargs", {}).get("endpoint_url", "")
        at = f" at {url}" if url else ""
        return UnreachableError(
            f"cannot reach {label}{at}{doing}: {type(exc).__name__}; check {endpoint_variables(service)} "
            "(unset for AWS; or endpoint_url= / endpoints= given in code), AWS_REGION and the network",
            unsent=isinstance(exc, EndpointConnectionError | ConnectTimeoutError),  # no connection made
        )
    if isinstance(exc, ClientError):
        return _refusal(exc, service, label, doing, setting)
    if isinstance(exc, ChecksumError | IncompleteReadError):  # the answer was damaged on its way back
        return TransientError(f"{label}{doing}: {type(exc).__name__}: {exc}")
    return RefusedError(f"{label}{doing}: {exc}")  # botocore refused to send it (ParamValidationError)


def _refusal(exc: ClientError, service: str, label: str, doing: str, setting: str) -> ConsumerError:
    """The service answered, and said no."""
    error = exc.response.get("Error", {})
    code, message = str(error.get("Code", "")), str(error.get("Message", ""))
    prefix = f"{setting}: " if setting else ""
    if (passing := _passing(exc, service, f"{prefix}{label}", doing)) is not None:
        return passing
    if code in _NOT_FOUND:
        return MissingResourceError(
            f"{prefix}{label}{doing}: not found ({code}); check {setting or 'the name'}"
        )
    if code in _CREDENTIALS:
        return ConfigError("AWS_ACCESS_KEY_ID", f"{label} rejected the credentials{doing}: {code}: {message}")
    if code in _DENIED:
        return RefusedError(
            f"{prefix}{label} denied access{doing}: {message or code}; check the role's policy"
        )
    return RefusedError(f"{prefix}{label} refused{doing}: {code}: {message}")


def is_throttle_response(response: Mapping[str, Any], service: str = "aws") -> bool:
    """Whether a provider's error answer (botocore's parsed response, ``ClientError.response``) says "slow
    down": a throttle code (``THROTTLE_CODES``, or ``service``'s own, e.g. Kinesis's
    ``ResourceInUseException``), or a transaction cancelled by throttling. The one reading of a throttle:
    ``classify`` makes it a ``ThrottledError``, and the one-shot calls' retries
    (``consumer.aws.ThrottleRetries``) try it again."""
    code = str((response.get("Error") or {}).get("Code", ""))
    if is_throttle_code(code, service):
        return True
    return code == "TransactionCanceledException" and bool(_reasons(response) & _THROTTLED_REASONS)


def is_throttle_code(code: str, service: str = "aws") -> bool:
    """Whether an error code alone (e.g. a PutRecords record's ``ErrorCode``) means "slow down" in
    ``service``: one of ``THROTTLE_CODES``, or the service's own."""
    return code in THROTTLE_CODES or code in _SERVICE_THROTTLES.get(service, ())


def _reasons(response: Mapping[str, Any]) -> set[str]:
    """Why DynamoDB cancelled a transaction: one code per item."""
    return {str(r.get("Code")) for r in response.get("CancellationReasons") or ()}


def _passing(exc: ClientError, service: str, who: str, doing: str) -> TransientError | None:
    """A refusal that may pass when the same call is made again: a throttle, the service failing (5xx), a
    transaction cancelled by throttling or by another transaction."""
    error = exc.response.get("Error", {})
    code, message = str(error.get("Code", "")), str(error.get("Message", ""))
    transaction = code == "TransactionCanceledException"
    if is_throttle_response(exc.response, service):
        return ThrottledError(f"{who} throttled{doing}: {'transaction throttled' if transaction else code}")
    if transaction:
        conflict = _reasons(exc.response) & _CONFLICT_REASONS
        return TransientError(f"{who} failed{doing}: TransactionConflict") if conflict else None
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
    if code in RETRIABLE_CODES or status >= 500:
        return TransientError(f"{who} failed{doing}: {code or status}: {message}")
    return None


@contextmanager
def aws_call(service: str, what: str, setting: str = "") -> Iterator[None]:
    """Translate botocore errors raised inside into this package's errors (keeping the cause)."""
    try:
        yield
    except PROVIDER_FAILURES as exc:
        raise classify(exc, service, what, setting) from exc
