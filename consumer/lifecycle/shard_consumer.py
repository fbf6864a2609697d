"""One shard's processing loop, on its own thread: the shell of ``ShardMachine``, which decides everything.

The loop feeds the machine what happened (an action's result, a stop, our window, records marked done,
checkpoints the processor wrote) and carries out what it asks: set up, fetch, deliver, checkpoint, wait,
finish. It reads the time only from the injected clock and never sleeps: a wait is on a condition that a stop
ends at once. The coordinator talks to it through one call, ``stop(reason)``; it answers once, with a
``ShardFinished`` event. A requested stop lets a poll already under way (its pacing wait and GetRecords)
finish, bounded by one pacing interval and a grace, and delivers what it brings before the final checkpoint.
"""

from __future__ import annotations

import logging
import random
import threading
from typing import assert_never

from consumer.checkpoint.policy import ManualCheckpoints
from consumer.config import StreamSpec
from consumer.leases.model import Lease
from consumer.lifecycle.guard import ShardGuard
from consumer.lifecycle.messages import Metric, Outcome, ShardFinished
from consumer.lifecycle.processor import (
    ShutdownReason,
)
from consumer.lifecycle.shard_machine import ShardMachine
from consumer.lifecycle.shard_messages import (
    Checkpoint,
    CloseReader,
    Deliver,
    EndShard,
    Fetch,
    Finish,
    NotifyShutdown,
    Setup,
    ShardAction,
    ShardEvent,
    StopRequested,
    Tick,
    ValidityChanged,
    WaitUntil,
    WatermarkAdvanced,
    WriterChanged,
)
from consumer.lifecycle.shard_model import Rules
from consumer.lifecycle.shard_start import ConsumerContext
from consumer.lifecycle.shard_work import ShardWork

__all__ = ["ConsumerContext", "ShardConsumer", "ShardGuard"]  # the first two re-exported for callers

logger = logging.getLogger(__name__)

_FINAL_FETCH_GRACE = 0.5  # seconds a poll under way at a requested stop may take beyond its pacing wait


class ShardConsumer:
    """Consumes one lease's shard on its own thread until it finishes in one known way (``Outcome``)."""

    def __init__(self, lease: Lease, spec: StreamSpec, ctx: ConsumerContext) -> None:
        self.lease = lease
        self._ctx = ctx
        self.guard = ShardGuard(lease.epoch, ctx.validity)
        self._work = ShardWork(lease, spec, ctx, self.guard)
        self._wake = threading.Condition()  # a wait for the machine's time, ended early by a stop
        self._inbox: list[ShardEvent] = []  # stops, for the next step
        self._thread = threading.Thread(target=self._main, name=f"shard-{lease.shard_id}", daemon=True)
        cfg = ctx.config
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
        )
        self.machine = ShardMachine(rules, ctx.clock.monotonic())

    # -- control, from the coordinator --------------------------------------------------------
    def start(self) -> None:
        """Start the loop's thread."""
        self._thread.start()

    def stop(self, reason: ShutdownReason) -> None:
        """REQUESTED: drain (finish the batch in flight and a poll under way, final checkpoint); LEASE_LOST:
        stop at once."""
        if reason is ShutdownReason.LEASE_LOST:
            self.guard.mark_lost()
        fanout = self._ctx.config.retrieval.mode == "fanout"  # a subscription waits for its next event
        reader, finishing = self._work.stopping(reason, fanout)
        with self._wake:
            self._inbox.append(StopRequested(reason))
            self._wake.notify_all()
        if reader is None:
            return
        if not finishing:
            reader.interrupt()  # ends the pacing wait, drops what was fetched ahead
            return
        # A call that hangs (a slow network) must not hold the hand-off: past one pacing interval and a
        # grace, the fetch is interrupted as any other.
        grace = self._ctx.config.retrieval.idle_time_between_reads + _FINAL_FETCH_GRACE
        timer = threading.Timer(grace, self._work.interrupt_fetch, (reader,))
        timer.daemon = True
        timer.start()

    def join(self, timeout: float | None = None) -> None:
        """Wait up to ``timeout`` for the loop's thread to end."""
        self._thread.join(timeout)

    @property
    def finished(self) -> bool:
        """The loop has ended (it was started and its thread is gone)."""
        return self._thread.ident is not None and not self._thread.is_alive()

    # -- the thread ---------------------------------------------------------------------------------
    def _main(self) -> None:
        outcome, halted_at, detail = Outcome.FAILED, None, ""
        try:
            end = self._run()
            outcome, halted_at, detail = end.outcome, end.halted_at, end.detail
            if outcome is Outcome.LOST:
                self._work.lost()
        except Exception as exc:  # the shard thread's boundary: whatever ended it, the coordinator hears once
            logger.exception(
                "shard loop failed", extra={"event": "shard_failed", "shard": self.lease.shard_id}
            )
            detail = repr(exc)
        finally:
            self._work.log("shard_stopped", outcome=outcome.value)
            # Report first: the hand-off need not wait for a fetch still in flight (its result is dropped).
            self._ctx.report(ShardFinished(self.lease.key, self.lease.epoch, outcome, halted_at, detail))
            if (reader := self._work.reader) is not None:
                reader.interrupt()
                reader.close()

    def _run(self) -> Finish:
        """Step the machine until it finishes; each action's result is the next step's first event."""
        events: list[ShardEvent] = []
        while True:
            events += self._news()
            actions = self.machine.step(self._ctx.clock.monotonic(), events)
            events = []
            for action in actions:
                if isinstance(action, Finish):
                    return action
                events += self._carry_out(action)

    def _news(self) -> list[ShardEvent]:
        """What changed outside the machine's actions: stops, our window, records done, the processor's own
        checkpoints."""
        with self._wake:
            news, self._inbox = self._inbox, []
        state, now = self.machine.state, self._ctx.clock.monotonic()
        valid, ends = self.guard.is_valid(), now + self.guard.remaining()
        if valid != state.valid or ends != state.window_ends:
            news.append(ValidityChanged(valid, ends))
        setting = self._work.setting
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

    def _carry_out(self, action: ShardAction) -> list[ShardEvent]:  # noqa: C901, PLR0911 - one case per action
        work = self._work
        match action:
            case Setup():
                return [work.setup()]
            case Fetch():
                return [work.fetch()]
            case Deliver():
                return [work.deliver()]
            case Checkpoint():
                return [work.checkpoint(action.position)]
            case NotifyShutdown():
                return [work.notify()]
            case EndShard():
                return [work.end()]
            case CloseReader():
                work.close_reader()
                return []
            case WaitUntil():
                work.behind = None  # a new round: a batch kept in hand was fetched in an earlier one
                with self._wake:
                    if not self._inbox:  # one wait at most: a fake clock does not move by itself
                        self._wake.wait(max(0.0, action.at - self._ctx.clock.monotonic()))
                return [Tick()]
            case Metric():
                self._ctx.metrics.add(action.name, action.value, action.stream, action.shard)
                return []
            case Finish():
                return []
            case _:
                assert_never(action)
