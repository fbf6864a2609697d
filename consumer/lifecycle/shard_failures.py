"""How a shard's failure is told and decided: ``retry.verdict`` of the error, a throttle counted per
operation, a processor setup failure's traceback once, a refusal or a bug logged with its traceback for the
shard to end FAILED at once."""

from __future__ import annotations

import logging

from consumer.errors import MissingResourceError
from consumer.leases.model import Lease
from consumer.lifecycle import retry
from consumer.metrics.sink import MetricsSink

__all__ = ["judge"]

logger = logging.getLogger(__name__)


def judge(
    exc: Exception, lease: Lease, metrics: MetricsSink, *, tell_setup: bool
) -> tuple[retry.Verdict, str]:
    """``retry.verdict`` of ``exc`` and the text its event carries (``repr`` for one that surfaces).
    ``tell_setup``: ``exc`` is the ownership's first ``ProcessorSetupError``, logged with its cause's traceback."""
    decided = retry.verdict(exc)
    if decided is retry.Verdict.BACK_OFF:
        metrics.add(f"Throttles.{retry.operation(exc)}", 1, lease.stream, lease.shard_id)
    if tell_setup:  # a ProcessorSetupError's traceback once per ownership; the retries go to the digest
        logger.warning(
            "processor setup failed",
            exc_info=exc.__cause__ or exc,
            extra={
                "event": "processor_setup_failed",
                "stream": lease.stream,
                "shard": lease.shard_id,
                "epoch": lease.epoch,
                "error": str(exc),
            },
        )
    if decided is retry.Verdict.SURFACE:
        # A missing stream (deleted under us) is no bug: its message says it all, and the leader tells
        # the operator once (``stream_gone``); no traceback.
        missing = isinstance(exc, MissingResourceError)
        logger.error(
            "shard loop failed",
            exc_info=None if missing else exc,
            extra={
                "event": "shard_failed",
                "stream": lease.stream,
                "shard": lease.shard_id,
                "epoch": lease.epoch,
                **({"error": str(exc)} if missing else {}),
            },
        )
        return decided, repr(exc)
    return decided, str(exc)
