"""Provider errors at the command-line boundary: one line naming what to fix, and the exit code.

Exit codes (docs/operations.md): 2 for a setting, a missing or wrong resource, or refused input; 4 when an
AWS endpoint cannot be reached (the network, the endpoint variable, or the service being down).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    EndpointConnectionError,
    HTTPClientError,
    NoCredentialsError,
    NoRegionError,
    PartialCredentialsError,
)
from botocore.exceptions import (
    ConnectionError as BotoConnectionError,
)

from consumer.errors import ConfigError, ConsumerError, MissingResourceError

__all__ = [
    "EXIT_INVALID",
    "EXIT_NOT_CONFIRMED",
    "EXIT_UNREACHABLE",
    "UnreachableError",
    "aws_call",
    "endpoint_variables",
    "explain",
]

EXIT_INVALID = 2
EXIT_NOT_CONFIRMED = 3
EXIT_UNREACHABLE = 4

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
_NAMES = {"dynamodb": "DynamoDB", "kinesis": "Kinesis", "sqs": "SQS", "s3": "S3", "aws": "AWS"}


class UnreachableError(ConsumerError):
    """An AWS endpoint did not answer (connection refused, timed out, closed)."""

    retriable = True


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


def explain(
    exc: BaseException, service: str = "aws", what: str = "", setting: str = ""
) -> ConsumerError | None:
    """This package's error for a botocore error (None for anything else).

    ``what`` says what was being done (``describe table 'x'``), ``setting`` the variable or flag naming the
    resource, so the message says what to change."""
    label = _NAMES.get(service, service)
    doing = f" ({what})" if what else ""
    if isinstance(exc, NoRegionError):
        return ConfigError(
            "AWS_REGION", "no AWS region: set AWS_REGION (or AWS_DEFAULT_REGION, or a profile's)"
        )
    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        return ConfigError("AWS_ACCESS_KEY_ID", _credentials_message())
    if isinstance(exc, EndpointConnectionError | BotoConnectionError | HTTPClientError):
        url = getattr(exc, "kwargs", {}).get("endpoint_url", "")
        at = f" at {url}" if url else ""
        return UnreachableError(
            f"cannot reach {label}{at}{doing}: check {endpoint_variables(service)} (unset for AWS), "
            "AWS_REGION and the network"
        )
    if isinstance(exc, ClientError):
        return _explain_refusal(exc, label, doing, setting)
    if isinstance(exc, BotoCoreError):
        return ConsumerError(f"{label}{doing}: {exc}")
    return None


def _explain_refusal(exc: ClientError, label: str, doing: str, setting: str) -> ConsumerError:
    """The service answered, and said no."""
    code = str(exc.response.get("Error", {}).get("Code", ""))
    message = str(exc.response.get("Error", {}).get("Message", ""))
    prefix = f"{setting}: " if setting else ""
    if code in _NOT_FOUND:
        return MissingResourceError(
            f"{prefix}{label}{doing}: not found ({code}); check {setting or 'the name'}"
        )
    if code in _CREDENTIALS:
        return ConfigError("AWS_ACCESS_KEY_ID", f"{label} rejected the credentials{doing}: {code}: {message}")
    if code in {"AccessDeniedException", "AccessDenied", "403"}:
        return ConsumerError(
            f"{prefix}{label} denied access{doing}: {message or code}; check the role's policy"
        )
    return ConsumerError(f"{prefix}{label} refused{doing}: {code}: {message}")


@contextmanager
def aws_call(service: str, what: str, setting: str = "") -> Iterator[None]:
    """Translate botocore errors raised inside into this package's errors (keeping the cause)."""
    try:
        yield
    except (BotoCoreError, ClientError) as exc:
        translated = explain(exc, service, what, setting)
        if translated is None:
            raise
        raise translated from exc
