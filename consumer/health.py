"""Liveness of a worker's coordinator loop: a heartbeat file touched on every step, and the check of its age.

The worker's coordinator thread steps at least once a second while it runs (its own heartbeat and inbox polls
are due that often), and every step calls :class:`Heartbeat`, which touches ``CONSUMER_HEALTH_FILE``. When the
loop stops (it hangs on a call, dies, or the process is frozen) the file ages, and ``python -m consumer health``
(the image's ``HEALTHCHECK`` and the ECS task's health check) exits 1 once it is older than
``CONSUMER_HEALTH_MAX_AGE_SECONDS``: ECS then replaces the task, and its leases move to live workers.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from consumer.config import HealthConfig, env_float, field_default
from consumer.errors import ConfigError
from consumer.logs import log_event
from consumer.settings.checks import positive

__all__ = ["EXIT_UNHEALTHY", "Heartbeat", "add_health_command", "attach_heartbeat", "heartbeat_age"]

logger = logging.getLogger(__name__)

#: ``health``'s exit code when the heartbeat is missing or too old (any non-zero code is unhealthy to ECS).
EXIT_UNHEALTHY = 1
_MIN_TOUCH_INTERVAL = 0.5  # seconds between touches when steps come faster (a busy coordinator)


class Heartbeat:
    """The ``Coordinator.on_step`` hook: touches ``path`` at most every half second of the step clock."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._last = float("-inf")
        self._failing = False

    def __call__(self, now: float) -> None:
        if now - self._last < _MIN_TOUCH_INTERVAL:
            return
        self._last = now
        try:
            self.path.touch()
        except OSError as exc:  # a full or read-only disk must not stop the worker; health will say so
            if not self._failing:
                log_event(logger, "heartbeat_failed", logging.WARNING, path=str(self.path), error=str(exc))
            self._failing = True
        else:
            self._failing = False


def attach_heartbeat(worker: Any, health: HealthConfig) -> Heartbeat | None:
    """Touch ``health.file`` on every step of ``worker``'s coordinator (nothing when no file is set)."""
    if health.file is None:
        return None
    heartbeat = Heartbeat(health.file)
    worker.coordinator.on_step = heartbeat
    return heartbeat


def heartbeat_age(path: str | Path, now: float | None = None) -> float | None:
    """Seconds since ``path`` was last touched (wall clock), or None when it does not exist; ``OSError``
    when it cannot be read (e.g. a path through a regular file)."""
    try:
        modified = Path(path).stat().st_mtime
    except FileNotFoundError:
        return None
    return max(0.0, (time.time() if now is None else now) - modified)


def _health(args: argparse.Namespace) -> int:
    env = os.environ
    if args.file is not None and not args.file.strip():
        raise ConfigError("--file", "must not be empty")
    path = args.file or env.get("CONSUMER_HEALTH_FILE", "").strip()
    if not path:
        raise ConfigError("CONSUMER_HEALTH_FILE", "is not set: the worker keeps no heartbeat to check")
    if args.max_age is not None:
        max_age, setting = args.max_age, "--max-age"
    else:
        setting = "CONSUMER_HEALTH_MAX_AGE_SECONDS"
        max_age = env_float(env, setting, field_default("health.max_age"))
    positive(setting, max_age)  # the bound HealthConfig checks, named as the operator set it
    try:
        if Path(path).is_dir():  # its mtime is not the worker's: the setting names the wrong path
            raise IsADirectoryError(21, "it is a directory, not the heartbeat file")
        age = heartbeat_age(path)
    except OSError as exc:  # e.g. a path through a file, or a directory we may not read
        print(f"unhealthy: cannot read the heartbeat at {path}: {exc.strerror or exc}")
        return EXIT_UNHEALTHY
    if age is None:
        print(f"unhealthy: no heartbeat at {path} (the worker has not started its coordinator loop)")
        return EXIT_UNHEALTHY
    if age > max_age:
        print(f"unhealthy: the coordinator loop last stepped {age:.1f}s ago (bound {max_age:g}s)")
        return EXIT_UNHEALTHY
    print(f"healthy: the coordinator loop stepped {age:.1f}s ago (bound {max_age:g}s)")
    return 0


def add_health_command(sub: Any) -> None:
    """Register ``health`` on the CLI's subparsers."""
    p = sub.add_parser(
        "health",
        help="exit 0 while this container's worker steps its coordinator loop, 1 otherwise (health checks)",
        description="Checks the age of the heartbeat file the worker's coordinator loop touches on every "
        "step. Exit 0 healthy, 1 unhealthy (missing or older than the bound), 2 no file configured.",
    )
    p.add_argument("--file", help="the heartbeat file (default: $CONSUMER_HEALTH_FILE)")
    p.add_argument(
        "--max-age",
        type=float,
        default=None,
        help="seconds (default: $CONSUMER_HEALTH_MAX_AGE_SECONDS, else 30)",
    )
    p.set_defaults(func=_health)


if __name__ == "__main__":  # pragma: no cover - `python -m consumer health` is the entry point
    sys.exit(_health(argparse.Namespace(file=None, max_age=None)))
