"""Child-process entry point for the moto server used by :mod:`tools.emulators`.

Run as a script (``python -P tools/_emulator_moto.py --port N --parent-pid P``), never imported by tests.
It always binds 127.0.0.1, keeps werkzeug's per-request log quiet unless ``--verbose``, and exits by itself
when its parent process dies, so a killed test run cannot leave an orphaned server behind.
"""

from __future__ import annotations

import argparse
import logging
import os
import threading
import time

LOOPBACK = "127.0.0.1"


def _watch_parent(parent_pid: int, interval: float) -> None:
    while True:
        if os.getppid() != parent_pid:
            os._exit(0)
        time.sleep(interval)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--parent-pid", type=int, default=0, help="exit when this process is gone")
    parser.add_argument("--verbose", action="store_true", help="log every request (werkzeug)")
    args = parser.parse_args(argv)

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not args.verbose:
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
    if args.parent_pid > 0:
        threading.Thread(
            target=_watch_parent, args=(args.parent_pid, 0.5), name="parent-watch", daemon=True
        ).start()

    from moto import server

    logging.getLogger(__name__).info("moto server starting on http://%s:%d", LOOPBACK, args.port)
    server.main(["--host", LOOPBACK, "--port", str(args.port)])


if __name__ == "__main__":
    main()
