"""One shard's consumption: the shell of ``ShardMachine``, which decides everything, driven by the worker's
``ShardRunner`` (a few threads for all the shards, not one per shard).

The runner feeds the machine what happened (an action's result, a stop, our window, records marked done,
checkpoints the processor wrote) and carries out what it asks: set up, fetch, deliver, checkpoint, wait,
finish. The coordinator talks to a consumer through one call, ``stop(reason)``; it answers once, with a
``ShardFinished`` event. A requested stop lets a poll already under way (its pacing wait and GetRecords)
finish, bounded by one pacing interval and a grace (a timer of the runner), and delivers what it brings
before the final checkpoint.
"""

from __future__ import annotations

import itertools
import logging
import random
import threading
from typing import assert_never

from consumer.checkpoint.policy import ManualCheckpoints
from consumer.config import StreamSpec
from consumer.leases.model import Lease
from consumer.lifecycle.guard import ShardGuard
from consumer.lifecycle.messages import Metric, Outcome, ShardFinished
from consumer.lifecycle.pools import GrowingPool
from consumer.lifecycle.processor import ShutdownReason
from consumer.lifecycle.shard_machine import ShardMachine
from consumer.lifecycle.shard_messages import (
    Finish,
    ShardEvent,
    StopRequested,
    ValidityChanged,
    WatermarkAdvanced,
    WriterChanged,
)
from consumer.lifecycle.shard_model import Rules
from consumer.lifecycle.shard_runner import ShardRunner
from consumer.lifecycle.shard_start import ConsumerContext
from consumer.lifecycle.shard_work import ShardWork

__all__ = ["ConsumerContext", "ShardConsumer", "ShardGuard"]  # the first two re-exported for callers

logger = logging.getLogger(__name__)

_DONE_FALLBACK = 0.5  # a wait for records done looks again this often (done() itself wakes the shard)
_FINAL_FETCH_GRACE = 0.5
_SERIAL = itertools.count()  # seconds a poll under way at a requested stop may take beyond its pacing wait


class ShardConsumer:
    """Consumes one lease's shard until it finishes in one known way (``Outcome``), on the worker's runner
    (``ctx.runner``; without one, e.g. in a test outside a worker, on a small runner of its own)."""

    def __init__(self, lease: Lease, spec: StreamSpec, ctx: ConsumerContext) -> None:
        self.lease = lease
        self._ctx = ctx
        self.guard = ShardGuard(lease.epoch, ctx.validity)
        self._key = f"{lease.key}@{lease.epoch}#{next(_SERIAL)}"
        self._ended = threading.Event()
        self._started = False
        cfg = ctx.config
        self._own_runner = ctx.runner is None
        runner = self._runner = ctx.runner or ShardRunner(
            ctx.clock, GrowingPool(f"fetch-{lease.shard_id}", 1), GrowingPool(f"lane-{lease.shard_id}", 1)
        )
        self._poked = False  # a poke is on its way: more done() calls before the next step need none
        self.work = ShardWork(lease, spec, ctx, self.guard, self._poke, runner.timers(self._key))
        self.depth = cfg.retrieval.prefetch_batches
        self.grace = cfg.retrieval.idle_time_between_reads + _FINAL_FETCH_GRACE
        rules = Rules(
            lease.stream,
            lease.shard_id,
            lease.epoch,
            backoff_base=cfg.retrieval.backoff_base,
            backoff_max=cfg.retrieval.backoff_max,
            give_up_after=cfg.lease.give_up_seconds,
            auto_interval=cfg.checkpoint.auto_interval,
            flush_interval=cfg.checkpoint.flush_interval,
            max_pending=cfg.checkpoint.max_pending_records,
            final_timeout=cfg.shutdown.final_checkpoint_timeout,
            window=self.guard.window,
            jitter=random.random,
            done_wait=_DONE_FALLBACK,
            retries=ctx.retries,
        )
        self.machine = ShardMachine(rules, ctx.clock.monotonic())

    @property
    def key(self) -> str:
        """This consumer's own key on the runner (a later ownership of the same lease is another consumer)."""
        return self._key

    # -- control, from the coordinator --------------------------------------------------------
    def start(self) -> None:
        """Hand the machine to the runner."""
        self._started = True
        self._runner.add(self)

    def stop(self, reason: ShutdownReason, last_poll: bool = True) -> None:
        """REQUESTED: drain (finish the batch in flight and, with ``last_poll``, a poll under way; final
        checkpoint); LEASE_LOST: stop at once."""
        match reason:
            case ShutdownReason.LEASE_LOST:
                self.guard.mark_lost()
            case ShutdownReason.REQUESTED:
                pass  # the lease is still ours until the drain's final checkpoint
            case _:
                assert_never(reason)
        fanout = self._ctx.config.retrieval.mode == "fanout"  # a subscription waits for its next event
        reader, finishing = self.work.stopping(reason, fanout or not last_poll)
        if reader is not None and not finishing:
            reader.interrupt()  # ends the pacing wait; the runner drops what was fetched ahead
        self._runner.stop(self.key, reason, reader, finishing)

    def join(self, timeout: float | None = None) -> None:
        """Wait up to ``timeout`` for the consumer to end."""
        self._ended.wait(timeout)

    @property
    def finished(self) -> bool:
        """The consumer has ended (it was started and has answered the coordinator)."""
        return self._started and self._ended.is_set()

    # -- from the runner ----------------------------------------------------------------------------------
    def ended(self, finish: Finish | None, error: Exception | None) -> None:
        """The machine finished (or a bug of ours ended it, FAILED): the processor and the coordinator are
        told, once; on the shard's lane."""
        outcome, halted_at, detail = Outcome.FAILED, None, ""
        try:
            if finish is not None:
                outcome, halted_at, detail = finish.outcome, finish.halted_at, finish.detail
                if outcome is Outcome.LOST:
                    self.work.lost()
                elif outcome is Outcome.HALTED and not self.machine.state.ended:  # not after shard_ended
                    self.work.halted()
            else:
                logger.error(
                    "shard loop failed",
                    exc_info=error,
                    extra={"event": "shard_failed", "shard": self.lease.shard_id},
                )
                detail = repr(error)
        except Exception as exc:  # the shard's boundary: whatever ended it, the coordinator hears once
            logger.exception(
                "shard loop failed", extra={"event": "shard_failed", "shard": self.lease.shard_id}
            )
            outcome, detail = Outcome.FAILED, repr(exc)
        finally:
            try:
                self.guard.mark_ended()  # before the coordinator hands the lease on: no overlap with the next owner
                self.work.log("shard_stopped", outcome=outcome.value)
                # Report first: the hand-off need not wait for a fetch still in flight (its result is dropped).
                self._ctx.report(ShardFinished(self.lease.key, self.lease.epoch, outcome, halted_at, detail))
                if (reader := self.work.reader) is not None:
                    reader.interrupt()
                    reader.close()
            finally:  # whatever failed above (it reaches the lane pool's log): a join never waits for ever
                self._ended.set()
                if self._own_runner:
                    self._runner.close()

    def _poke(self) -> None:
        """Records were marked done, or a checkpoint written (any thread): one poke per step at most."""
        if not self._poked:
            self._poked = True
            self._runner.poke(self._key)

    def metric(self, action: Metric) -> None:
        """A machine's metric, recorded."""
        self._ctx.metrics.add(action.name, action.value, action.stream, action.shard)

    def news(self) -> list[ShardEvent]:
        """What changed outside the machine's actions: a stop, our window, records done, the processor's own
        checkpoints."""
        self._poked = False  # first: what changes from here on pokes again
        news: list[ShardEvent] = []
        state, now = self.machine.state, self._ctx.clock.monotonic()
        # The stop too (its runner message may still be queued): a fetch it already answered must not
        # start another round that knows nothing of it.
        if (reason := self.work.reason) is not None and _stop_is_news(reason, state.stop):
            news.append(StopRequested(reason))
        valid, ends = self.guard.is_valid(), now + self.guard.remaining()
        if valid != state.valid or ends != state.window_ends:
            news.append(ValidityChanged(valid, ends))
        setting = self.work.setting
        if setting is None:
            return news
        policy, writer = setting.policy, setting.writer
        if isinstance(policy, ManualCheckpoints):
            mark, pending = policy.position(), policy.pending
            if mark != state.watermark or pending != state.pending:
                news.append(WatermarkAdvanced(mark, pending))
        if writer.last != state.written or writer.pending != state.deferred:
            news.append(WriterChanged(writer.last, writer.pending))
        return news


def _stop_is_news(reason: ShutdownReason, known: ShutdownReason | None) -> bool:
    """Whether the stop noted (``reason``) is news to a machine that knows of ``known``: any stop to one that
    knows of none; a lost lease also to one that knows only of a requested stop."""
    match reason:
        case ShutdownReason.REQUESTED:
            return known is None
        case ShutdownReason.LEASE_LOST:
            return known is not reason
        case _:
            assert_never(reason)
