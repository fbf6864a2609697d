"""The processor's callbacks that end a shard's turn, and what a shard's actions share to tell what they do.

``ShardWork`` (consumer/lifecycle/shard_work.py) extends this class: ``notify`` (``shutdown_requested`` before
the final checkpoint), ``halted`` (the flush and checkpoint of a shard halted on a failing record), ``end``
(``shard_ended`` at SHARD_END) and ``lost`` (``lease_lost``); each processor call is ``watched`` for the
worker's ``SlowCallWatch``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from consumer.errors import LeaseLostError
from consumer.leases.model import Lease
from consumer.lifecycle.guard import ShardGuard
from consumer.lifecycle.processor import (
    LeaseLostInput,
    RecordProcessor,
    ShardEndedInput,
    ShutdownRequestedInput,
)
from consumer.lifecycle.shard_messages import ShardEndCalled, ShardEvent, ShutdownNotified, WindowClosed
from consumer.lifecycle.shard_start import ConsumerContext
from consumer.lifecycle.shard_start import Started as Setting
from consumer.lifecycle.slow_calls import ProcessorCall
from consumer.logs import log_event
from consumer.records import SHARD_END

__all__ = ["ShardCallbacks"]

logger = logging.getLogger(__name__)


class ShardCallbacks:
    """A shard's lease, its processor once set up, and the callbacks that end its turn (set by ``ShardWork``)."""

    lease: Lease
    guard: ShardGuard
    setting: Setting | None
    calling: ProcessorCall | None
    _ctx: ConsumerContext

    def log(self, event: str, level: int = logging.INFO, **fields: object) -> None:
        """Log ``event`` with the lease's identity."""
        lease = self.lease
        log_event(
            logger, event, level, stream=lease.stream, shard=lease.shard_id, epoch=lease.epoch, **fields
        )

    @contextmanager
    def watched(self, callback: str) -> Iterator[ProcessorCall]:
        """Note the processor's ``callback`` as under way on this thread while the block runs (the worker's
        ``SlowCallWatch`` tells one that does not return, naming it)."""
        lease = self.lease
        call = ProcessorCall(
            lease.stream,
            lease.shard_id,
            lease.epoch,
            self._ctx.clock.monotonic(),
            threading.get_ident(),
            callback,
        )
        self.calling = call
        try:
            yield call
        finally:
            self.calling = None

    def log_failure(self, event: str, message: str) -> None:
        """Log ``event`` (ERROR) with the exception being handled, its traceback, and the lease's identity
        (called in an ``except`` block)."""
        lease = self.lease
        fields = {"event": event, "stream": lease.stream, "shard": lease.shard_id, "epoch": lease.epoch}
        logger.exception(message, extra=fields)

    def closed(self, exc: LeaseLostError, draining: bool) -> WindowClosed:
        """An action found our window closed; ``draining``: a drain cannot go on without it."""
        lost = self.guard.lost.is_set()
        if lost or draining:
            self.log("lease_lost_in_loop", logging.WARNING, error=str(exc))
        return WindowClosed(lost)

    def notify(self) -> ShardEvent:
        """The processor's shutdown_requested (its own failure is logged: the final checkpoint is still due)."""
        setting = self.setting
        assert setting is not None
        try:  # first, so that a buffering processor can flush and mark its records done
            view = setting.writer.view(setting.policy.position)
            with self.watched("shutdown_requested"):
                setting.processor.shutdown_requested(ShutdownRequestedInput(view, self.lease.epoch))
        except LeaseLostError as exc:
            return self.closed(exc, True)
        except Exception:  # the processor's callback (user code): the final checkpoint is still due
            self.log_failure("processor_shutdown_failed", "shutdown_requested raised")
        return ShutdownNotified()

    def halted(self) -> None:
        """The shard halted on a record that kept failing: ``shutdown_requested`` lets the processor flush what
        came before that record (a buffering sink writes it and marks it done), and what is done is then
        checkpointed, so that the lease, kept halted, holds its checkpoint right before the failing record
        (``replay --checkpoint`` of that record then skips it alone). A failure here is logged: the shard is
        halted either way."""
        setting = self.setting
        if setting is None:
            return
        view = setting.writer.view(setting.policy.position)
        try:
            with self.watched("shutdown_requested"):
                setting.processor.shutdown_requested(ShutdownRequestedInput(view, self.lease.epoch))
        except LeaseLostError as exc:
            self.log("lease_lost_in_loop", logging.WARNING, error=str(exc))
            return
        except Exception:  # the processor's callback (user code): the shard is halted either way
            self.log_failure("processor_shutdown_failed", "shutdown_requested raised")
            return
        try:
            view.checkpoint()
        except LeaseLostError as exc:
            self.log("lease_lost_in_loop", logging.WARNING, error=str(exc))
        except Exception:  # the halted shard's checkpoint (ours, not the processor's): halted either way
            self.log_failure("halt_checkpoint_failed", "the halted shard's checkpoint failed")

    def end(self) -> ShardEvent:
        """SHARD_END, once every delivered record is done: the processor's shard_ended checkpoints it."""
        setting = self.setting
        assert setting is not None
        try:
            view = setting.writer.view(lambda: SHARD_END, at_end=True)
            with self.watched("shard_ended"):
                setting.processor.shard_ended(ShardEndedInput(view, self.lease.epoch))
        except LeaseLostError as exc:
            return self.closed(exc, False)
        return ShardEndCalled()

    def lost(self) -> None:
        """The lease is gone: later done() calls are ignored, and the processor is told."""
        setting = self.setting
        if setting is None:
            return
        setting.policy.close()
        processor: RecordProcessor = setting.processor
        try:
            with self.watched("lease_lost"):
                processor.lease_lost(LeaseLostInput(self.lease.stream, self.lease.shard_id, self.lease.epoch))
        except Exception:  # the processor's callback (user code): the lease is gone either way
            self.log_failure("processor_lease_lost_failed", "lease_lost raised")
