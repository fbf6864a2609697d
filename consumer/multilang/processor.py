"""The MultiLang record processor: one child process per owned shard, spoken to in the KCL's protocol.

It is an ordinary processor of this consumer in ``explicit`` checkpoint mode: the only checkpoints written
are the ones the child asks for, each through the epoch-fenced checkpointer, so a child's checkpoint after a
hand-off is refused (``ShutdownException``, as the KCL answers). A child that exits, hangs past the bound or
writes what is not the protocol is killed with its stderr tail logged; the batch raises, so this consumer's
retries (and at the end its halt policy) apply, and the next attempt starts a new child after a backoff,
initialized at the last confirmed checkpoint and given again every record delivered since, so that nothing
after that checkpoint is skipped.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

from consumer.errors import CheckpointRejectedError, LeaseLostError
from consumer.lifecycle.processor import (
    Checkpointer,
    InitializationInput,
    LeaseLostInput,
    ProcessRecordsInput,
    ShardEndedInput,
    ShutdownRequestedInput,
)
from consumer.logs import log_event
from consumer.multilang import protocol
from consumer.multilang.child import Child, ChildFailed
from consumer.multilang.properties import MultiLangSettings
from consumer.records import SHARD_END, Position, Record

__all__ = ["MultiLangProcessor"]

logger = logging.getLogger(__name__)

_REPLAY_CHUNK = 1000  # records per processRecords message when a restarted child is given records again
# At most this many records given to a child since its last checkpoint are kept for a restart; past it the
# oldest are let go, and a restart before the child checkpoints past them halts the shard instead of
# skipping them (the next owner reads them again from Kinesis).
MAX_UNCONFIRMED = 100_000
_MAX_RESTART_BACKOFF = 10.0


class MultiLangProcessor:
    """Runs ``settings.command`` for one shard and relays the lifecycle to it (one instance per shard)."""

    checkpoint_mode = "explicit"

    def __init__(self, settings: MultiLangSettings, env: dict[str, str] | None = None) -> None:
        self._s = settings
        self._env = env
        self._child: Child | None = None
        self._stream = self._shard = ""
        self._initial = settings.initial_position
        self._confirmed: Position | None = None  # the checkpoint as stored (the start, or the child's last)
        # Records given to the child (and answered) since the confirmed checkpoint: a restarted child gets
        # them again, from that checkpoint on.
        self._unconfirmed: list[tuple[Record, str]] = []
        self._failures = 0
        self._lost = False
        self._dropped_upto: Position | None = None  # the last record let go of (MAX_UNCONFIRMED)

    # -- the lifecycle ------------------------------------------------------------------------------
    def initialize(self, data: InitializationInput) -> None:
        """Start the child and send it ``initialize`` at the checkpoint (a failure is retried at the first batch)."""
        self._stream, self._shard = data.stream, data.shard_id
        self._confirmed, self._initial = data.starting_position, data.initial_position
        try:
            self._start()
        except ChildFailed as exc:
            self._failed(exc, "initialize")

    def process_records(self, data: ProcessRecordsInput) -> None:
        """Send the batch (records after the confirmed checkpoint) and serve checkpoints until ``status``."""
        records, confirmed = data.records, self._confirmed
        if confirmed is not None and records and not records[0].position > confirmed:
            records = [r for r in records if r.position > confirmed]  # the child checkpointed into it
        fresh = [(r, protocol.record_json(r)) for r in records]
        try:
            if self._child is None:
                self._restart(data.checkpointer)
            if fresh:
                line = protocol.process_records([j for _, j in fresh], data.millis_behind_latest)
                self._exchange(line, "processRecords", data.checkpointer, fresh)
        except ChildFailed as exc:
            self._failed(exc, "processRecords")
            raise
        self._unconfirmed.extend(fresh)
        self._trim()
        self._failures = 0
        if len(self._unconfirmed) > MAX_UNCONFIRMED:
            excess = len(self._unconfirmed) - MAX_UNCONFIRMED
            first_time = self._dropped_upto is None
            self._dropped_upto = self._unconfirmed[excess - 1][0].position
            del self._unconfirmed[:excess]
            if not first_time:
                return
            log_event(
                logger,
                "child_backlog_capped",
                logging.WARNING,
                shard=self._shard,
                kept=MAX_UNCONFIRMED,
                checkpoint=str(self._confirmed),
                hint="the child checkpoints rarely: a restart now halts the shard at its checkpoint",
            )

    def shutdown_requested(self, data: ShutdownRequestedInput) -> None:
        """The hand-off: ``shutdownRequested`` (the child's last chance to checkpoint), then the child ends."""
        self._finish("shutdownRequested", data.checkpointer, self._s.shutdown_timeout)

    def shard_ended(self, data: ShardEndedInput) -> None:
        """``shardEnded``: the child checkpoints SHARD_END (``checkpoint()`` with no position) so children start."""
        try:
            if self._child is None:
                self._restart(data.checkpointer)
        except ChildFailed as exc:
            self._failed(exc, "shardEnded")
            raise
        self._finish("shardEnded", data.checkpointer, self._s.response_timeout, must=True)
        if self._confirmed != SHARD_END:  # the child answered without checkpoint(): say it in its terms
            log_event(
                logger,
                "multilang_shard_end_not_checkpointed",
                logging.ERROR,
                stream=self._stream,
                shard=self._shard,
                checkpoint=str(self._confirmed) if self._confirmed else None,
                hint="the child must call checkpointer.checkpoint() (no position: SHARD_END) in shard_ended "
                "(amazon-kclpy v3) or in shutdown with reason TERMINATE (v2); the shard halts and its "
                "children wait until a child does",
            )

    def lease_lost(self, data: LeaseLostInput) -> None:
        """``leaseLost``: checkpoints are answered ``ShutdownException``; then the child ends."""
        self._lost = True
        self._finish("leaseLost", None, self._s.response_timeout)

    # -- the child's life ---------------------------------------------------------------------------
    def _start(self) -> None:
        child = Child(self._s.command, self._s.workdir, self._shard, self._env)
        self._child = child
        self._exchange(
            protocol.initialize(self._shard, self._confirmed, self._initial), "initialize", None, []
        )

    def _restart(self, checkpointer: Checkpointer) -> None:
        """A new child after a failure: backoff, ``initialize`` at the confirmed checkpoint, then the records
        given to the old one since that checkpoint."""
        if self._failures:
            time.sleep(min(_MAX_RESTART_BACKOFF, self._s.backoff_base * 2 ** (self._failures - 1)))
        if self._dropped_upto is not None and (
            self._confirmed is None or self._confirmed < self._dropped_upto
        ):
            raise ChildFailed(
                f"cannot restart: records after the checkpoint {self._confirmed} up to {self._dropped_upto} "
                f"are no longer kept (over {MAX_UNCONFIRMED}); the shard stops there, never past it"
            )
        self._start()
        backlog = [
            (r, j) for r, j in self._unconfirmed if self._confirmed is None or r.position > self._confirmed
        ]
        self._unconfirmed = backlog  # trimmed as the new child checkpoints while it gets them again
        if backlog:
            log_event(
                logger,
                "child_records_again",
                shard=self._shard,
                records=len(backlog),
                after=str(self._confirmed),
            )
        for at in range(0, len(backlog), _REPLAY_CHUNK):
            chunk = backlog[at : at + _REPLAY_CHUNK]
            line = protocol.process_records([j for _, j in chunk], None)
            self._exchange(line, "processRecords", checkpointer, chunk)

    def _finish(
        self, action: str, checkpointer: Checkpointer | None, timeout: float, must: bool = False
    ) -> None:
        child = self._child
        if child is None:  # it failed before: nobody to tell, nothing the child asked to checkpoint
            return
        try:
            self._exchange(protocol.encode({"action": action}), action, checkpointer, [], timeout)
        except ChildFailed as exc:
            self._failed(exc, action)
            if must:
                raise
            return
        self._child = None
        code = child.close(timeout=5.0)
        log_event(logger, "child_stopped", shard=self._shard, pid=child.pid, after=action, exit_code=code)

    def _failed(self, exc: ChildFailed, during: str) -> None:
        child, self._child = self._child, None
        self._failures += 1
        code = child.kill() if child is not None else None
        log_event(
            logger,
            "child_failed",
            logging.ERROR,
            stream=self._stream,
            shard=self._shard,
            during=during,
            error=str(exc),
            pid=child.pid if child is not None else None,
            exit_code=code,
            stderr_tail=child.stderr_tail() if child is not None else "",
            checkpoint=str(self._confirmed) if self._confirmed else None,
            failures=self._failures,
        )

    # -- one message and its answers ---------------------------------------------------------------
    def _exchange(
        self,
        line: bytes,
        action: str,
        checkpointer: Checkpointer | None,
        in_flight: list[tuple[Record, str]],
        timeout: float | None = None,
    ) -> None:
        child = self._child
        assert child is not None
        bound = self._s.response_timeout if timeout is None else timeout
        child.send(line, bound)
        while True:
            message = child.receive(bound)
            if isinstance(message, protocol.StatusReply):
                if message.response_for != action:
                    raise ChildFailed(f"status for {message.response_for!r} while {action!r} was pending")
                return
            error = self._checkpoint(message, action, checkpointer, in_flight)
            child.send(protocol.checkpoint_reply(message, error), bound)

    def _checkpoint(
        self,
        request: protocol.CheckpointRequest,
        action: str,
        checkpointer: Checkpointer | None,
        in_flight: list[tuple[Record, str]],
    ) -> str | None:
        """Write the checkpoint the child asked for; the KCL exception name when it cannot be written."""
        if self._lost or action == "leaseLost":
            return protocol.SHUTDOWN
        if checkpointer is None:  # initialize: no checkpointer in the KCL either
            return protocol.INVALID_STATE
        target = self._target(request, action, in_flight)
        if target is None or isinstance(target, str):
            return target  # nothing to write (None), or the error
        return self._write(checkpointer, target, action)

    def _write(self, checkpointer: Checkpointer, target: Position, action: str) -> str | None:
        try:
            checkpointer.checkpoint(target)
        except LeaseLostError:
            self._lost = True
            return protocol.SHUTDOWN
        except CheckpointRejectedError:
            return protocol.ILLEGAL_ARGUMENT
        if checkpointer.last_checkpoint != target:  # not written yet (kept pending and retried)
            return protocol.THROTTLING
        self._confirmed = target
        self._trim()
        if self._dropped_upto is not None and not target < self._dropped_upto:
            self._dropped_upto = None  # what was let go of is checkpointed now
        log_event(
            logger,
            "multilang_checkpoint",
            stream=self._stream,
            shard=self._shard,
            position=str(target),
            during=action,
        )
        return None

    def _target(
        self, request: protocol.CheckpointRequest, action: str, in_flight: list[tuple[Record, str]]
    ) -> Position | str | None:
        """The position to write; None when there is nothing to write; an error name when it is not allowed
        (a position this ownership did not deliver, or behind the checkpoint: the KCL's range check)."""
        delivered = (
            in_flight[-1][0].position
            if in_flight
            else (self._unconfirmed[-1][0].position if self._unconfirmed else None)
        )
        target = request.position
        if self._confirmed is not None and target in (self._confirmed, protocol.announced(self._confirmed)):
            return None  # the checkpoint already stored (as initialize told it): nothing to write, as the KCL
        if target is None:
            target = SHARD_END if action == "shardEnded" else delivered
        elif target.sequence == "invalid" or delivered is None or delivered < target:
            return protocol.ILLEGAL_ARGUMENT
        if target is None or target == self._confirmed:
            return None
        if self._confirmed is not None and target < self._confirmed:
            return protocol.ILLEGAL_ARGUMENT
        return target

    def _trim(self) -> None:
        confirmed, kept = self._confirmed, self._unconfirmed
        if confirmed is None or not kept or kept[0][0].position > confirmed:
            return
        if not kept[-1][0].position > confirmed:  # the usual case: the child checkpointed everything
            self._unconfirmed = []
            return
        self._unconfirmed = [(r, j) for r, j in kept if r.position > confirmed]


def processor_factory(settings: MultiLangSettings) -> Callable[[], MultiLangProcessor]:
    """One ``MultiLangProcessor`` per shard, children started with the daemon's environment."""
    env = dict(os.environ)
    return lambda: MultiLangProcessor(settings, env)
