"""The consumer's exceptions: one root, a ``retriable`` flag, provider errors translated at the boundary."""

from __future__ import annotations

__all__ = [
    "EXIT_INVALID",
    "EXIT_NOT_CONFIRMED",
    "EXIT_UNREACHABLE",
    "CheckpointRejectedError",
    "ConfigError",
    "ConsumerError",
    "LeaseConflictError",
    "LeaseLostError",
    "MissingResourceError",
    "ProcessorLoadError",
    "RefusedError",
    "ThrottledError",
    "TransientError",
    "UnreachableError",
    "WorkerFencedError",
    "is_retriable",
]

#: The CLI's exit codes: a setting, a missing or wrong resource, or refused input; a replay that was not
#: confirmed; an AWS endpoint that cannot be reached.
EXIT_INVALID = 2
EXIT_NOT_CONFIRMED = 3
EXIT_UNREACHABLE = 4


class ConsumerError(Exception):
    """Root of every error this package raises on purpose."""

    retriable: bool = False


class ConfigError(ConsumerError, ValueError):
    """A setting is invalid; the message names the field and the allowed values."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class WorkerStateError(ConsumerError, RuntimeError):
    """A worker was used out of order: started twice, stopped or joined before it was started, or asked to
    handle signals off the main thread. The worker is left as it was."""


class MissingResourceError(ConsumerError):
    """A stream, table or queue does not exist; the message says which and how to create it."""


class ProcessorLoadError(ConsumerError):
    """The record processor named by import path could not be loaded."""


class TransientError(ConsumerError):
    """A provider call failed in a way that may pass when retried: connection refused or reset, a timeout,
    a 5xx, throttling. The caller retries in place with backoff (one policy: ``consumer.lifecycle.retry``)."""

    retriable = True


class ProcessorSetupError(TransientError):
    """The processor's factory or ``initialize`` raised when a shard started (its database unreachable, say).
    Retried in place with the shard's backoff, like a failure that may pass, and the lease handed to another
    worker after ``CONSUMER_GIVE_UP_AFTER_SECONDS`` of it: never a lease moving several times a second."""


class ThrottledError(TransientError):
    """A provider refused a call for now because a rate or throughput limit was reached. It slows the caller
    down and is retried; it is never an outage, so it does not count towards giving a shard up. ``operation``:
    the provider operation, when no botocore error behind it says so (e.g. BatchGetItem's unprocessed keys)."""

    def __init__(self, message: str, *, operation: str = "") -> None:
        super().__init__(message)
        self.operation = operation


class UnreachableError(TransientError):
    """An AWS endpoint did not answer (connection refused, reset or closed, timed out). ``unsent`` is True
    when no connection was made, so the request provably never reached the service (it cannot have been
    applied); False when it may have been (a reset or a timeout after it was sent)."""

    def __init__(self, message: str, *, unsent: bool = False) -> None:
        super().__init__(message)
        self.unsent = unsent


class RefusedError(ConsumerError):
    """A provider refused a call as it was made (a validation error, access denied, any other 4xx), or
    botocore rejected its parameters: the same call fails the same way again, so it is never retried. It
    is a bug or a setting to fix; the message names the call and the provider's code."""


def is_retriable(exc: BaseException) -> bool:
    """The one reading of the ``retriable`` flag: our own errors say it; anything else (a bug, a provider
    error nobody classified) is not retriable."""
    return bool(getattr(exc, "retriable", False)) if isinstance(exc, ConsumerError) else False


class LeaseConflictError(ConsumerError):
    """A conditional lease write lost a race: somebody else changed the lease first."""

    retriable = True


class LeaseLostError(ConsumerError):
    """This worker no longer owns the lease (or can no longer prove it does): stop and do not checkpoint."""


class WorkerFencedError(ConsumerError):
    """Another worker took at least one of our leases after our heartbeat lapsed: reconcile before going on."""


class CheckpointRejectedError(ConsumerError):
    """The checkpoint table refused a write: the epoch is no longer current, or the position would go back."""

    def __init__(self, message: str, *, stale_epoch: bool) -> None:
        super().__init__(message)
        self.stale_epoch = stale_epoch
