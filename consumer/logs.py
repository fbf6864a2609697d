"""Structured JSON logs: one object per line with the event name and its fields.

A failure that repeats while a dependency is down (a heartbeat, a scan, an inbox poll) is told at a bounded
rate by ``Repeated``: the first failure of an episode at once, then at most one line every ``REPEAT_EVERY``
seconds saying how many since when, and one line when it passes."""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from typing import Any

__all__ = ["REPEAT_EVERY", "JsonFormatter", "Repeated", "configure_logging", "log_event"]

REPEAT_EVERY = 5.0  # seconds between two lines about the same failure repeating

_RESERVED = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """Formats a record as JSON, keeping every ``extra=`` field as a top-level key."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _RESERVED and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def configure_logging(level: str = "INFO") -> None:
    """Route the root logger to stderr as JSON lines (stdout carries EMF metrics)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("botocore", "boto3", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def log_event(logger: logging.Logger, event: str, level: int = logging.INFO, **fields: Any) -> None:
    """Log one named event with structured fields."""
    logger.log(level, event, extra={"event": event, **fields})


class Repeated:
    """One failure that repeats on a schedule (``event``, e.g. ``heartbeat_failed``), logged at a bounded rate.

    ``failed`` logs the first failure of an episode at once (``failures=1``); later ones only once
    ``every`` seconds have passed since the last line, with ``failures`` (how many in the episode),
    ``failing_s`` (since the first) and the latest fields. ``passed`` ends the episode with one INFO line,
    ``recovered`` (``failures``, ``failing_s``). Times are the caller's monotonic ``now``: a pure step can
    use it on made-up time. Thread-safe."""

    def __init__(
        self,
        logger: logging.Logger,
        event: str,
        recovered: str,
        *,
        level: int = logging.WARNING,
        every: float = REPEAT_EVERY,
    ) -> None:
        self._logger, self._level, self._every = logger, level, every
        self.event, self.recovered = event, recovered
        self._lock = threading.Lock()
        self.since: float | None = None  # when the episode began (None: not failing)
        self.failures = 0
        self._told_at = float("-inf")

    def failed(self, now: float, **fields: Any) -> bool:
        """One more failure at ``now``; whether a line was written."""
        with self._lock:
            if self.since is None:
                self.since, self.failures = now, 0
            self.failures += 1
            if self.failures > 1 and now - self._told_at < self._every:
                return False
            self._told_at = now
            failures, failing = self.failures, round(now - self.since, 3)
        log_event(self._logger, self.event, self._level, failures=failures, failing_s=failing, **fields)
        return True

    def passed(self, now: float, **fields: Any) -> bool:
        """The call went through at ``now``: end the episode (one line if there was one)."""
        with self._lock:
            if self.since is None:
                return False
            failures, failing = self.failures, round(now - self.since, 3)
            self.since, self.failures, self._told_at = None, 0, float("-inf")
        log_event(self._logger, self.recovered, failures=failures, failing_s=failing, **fields)
        return True
