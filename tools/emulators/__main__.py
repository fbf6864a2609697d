"""``python -m tools.emulators [--format env]``: run both emulators until Ctrl-C, SIGTERM or SIGHUP, printing
their endpoints."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import signal
import sys
import time
from collections.abc import Sequence

from tools.emulators.harness import Emulators
from tools.emulators.settings import ACCESS_KEY_ID, SECRET_ACCESS_KEY, EmulatorError

logger = logging.getLogger("tools.emulators")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the emulators until a signal; print the endpoints as JSON or as environment lines."""
    parser = argparse.ArgumentParser(prog="python -m tools.emulators", description=__doc__)
    parser.add_argument("--format", choices=("json", "env"), default="json", help="JSON or KEY=value lines")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for stop_signal in (signal.SIGTERM, signal.SIGHUP):  # stop as on Ctrl-C
        signal.signal(stop_signal, signal.default_int_handler)
    try:
        with Emulators() as emulators:
            endpoints, limits = emulators.endpoints, emulators.limits.describe()
            logger.info("AWS limits: %s", ", ".join(f"{name}={value}" for name, value in limits.items()))
            if args.format == "json":
                payload = {
                    **dataclasses.asdict(endpoints),
                    "access_key_id": ACCESS_KEY_ID,
                    "secret_access_key": SECRET_ACCESS_KEY,
                    "pids": emulators.pids,
                    "startup_seconds": {k: round(v, 3) for k, v in emulators.startup_seconds.items()},
                    "kinesis_upstream": emulators.kinesis_upstream,
                    "limits": limits,
                }
                print(json.dumps(payload), flush=True)
            else:
                print("\n".join(f"{key}={value}" for key, value in endpoints.env().items()), flush=True)
            while True:
                time.sleep(0.5)
                emulators.check_alive()
    except KeyboardInterrupt:
        logger.info("interrupted, emulators stopped")
    except EmulatorError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
