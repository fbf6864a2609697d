"""``python -m tools.emulators``: run both emulators until Ctrl-C or SIGTERM, printing their endpoints."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType
from typing import Any

from tools.emulators.harness import Emulators
from tools.emulators.settings import ACCESS_KEY_ID, SECRET_ACCESS_KEY, EmulatorError

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.emulators",
        description="Run kinesis-local and moto server on 127.0.0.1 until Ctrl-C or SIGTERM.",
    )
    parser.add_argument(
        "--format",
        choices=("json", "env"),
        default="json",
        help="print the endpoints as one JSON object (default) or as KEY=value environment lines",
    )
    parser.add_argument("--timeout", type=float, default=None, help="start-up timeout in seconds")
    parser.add_argument("--verbose", action="store_true", help="debug logging, and emulator request logs")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )

    stop_requested = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        logger.info("received %s, stopping", signal.Signals(signum).name)
        stop_requested.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGHUP, request_stop)
    try:
        with Emulators(start_timeout=args.timeout, verbose=args.verbose) as emulators:
            endpoints = emulators.endpoints
            limits = emulators.limits.describe()
            logger.info(
                "AWS limits %s: %s",
                "on" if emulators.limits.enabled else "off (EMULATORS_LIMITS=off)",
                ", ".join(f"{name}={value}" for name, value in limits.items() if name != "enabled"),
            )
            if args.format == "json":
                payload: dict[str, Any] = {
                    **endpoints.as_dict(),
                    "access_key_id": ACCESS_KEY_ID,
                    "secret_access_key": SECRET_ACCESS_KEY,
                    "pids": emulators.pids,
                    "logs": {name: str(path) for name, path in emulators.log_paths.items()},
                    "startup_seconds": {k: round(v, 3) for k, v in emulators.startup_seconds.items()},
                    "kinesis_upstream": emulators.kinesis_upstream,
                    "limits": limits,
                }
                print(json.dumps(payload), flush=True)
            else:
                for key, value in endpoints.env().items():
                    print(f"{key}={value}", flush=True)
            while not stop_requested.wait(0.5):
                emulators.check_alive()
    except KeyboardInterrupt:
        logger.info("interrupted, emulators stopped")
    except EmulatorError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0
