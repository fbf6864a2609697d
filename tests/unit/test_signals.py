"""SIGTERM's handler is safe wherever it interrupts the worker's loop.

Python runs a signal handler in the main thread between two of its instructions, so SIGTERM's handler
(``request_shutdown``) may run while the loop is inside its own event queue. With ``queue.Queue`` that was a
hang: the loop held the queue's lock in ``get()``, the handler's ``put()`` waited for it, and the worker neither
stopped nor went on (seen once in ``make test``: ``signal_received`` logged, then nothing for 20 s).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# The worker runs on the main thread with its signal handlers. A profile hook raises SIGTERM at every call the
# loop makes while it takes events off its queue (C calls included: the lock's acquire, the queue's own
# methods), so the handler runs at each of those points in turn; the worker must still stop.
_SCRIPT = """
import signal, sys, threading
sys.path.insert(0, {repo!r})
from consumer.leases.memory import InMemoryTables
from consumer.retrieval.memory import InMemoryKinesis
from tests.unit.helpers import Journal, make_worker

tables, kinesis = InMemoryTables(), InMemoryKinesis()
kinesis.create_stream("s", 2)
worker = make_worker("w", tables, kinesis, Journal())
running, raised = threading.Event(), [0]

def taking_events(frame):
    for _ in range(10):
        if frame is None or frame.f_code.co_name == "on_signal":  # not inside the handler itself
            return False
        if frame.f_code.co_name in ("_wait", "_waiting") and frame.f_code.co_filename.endswith("worker.py"):
            return True
        frame = frame.f_back
    return False

def hook(frame, event, arg):
    if running.is_set() and raised[0] < 200 and event in ("call", "c_call") and taking_events(frame):
        raised[0] += 1
        signal.raise_signal(signal.SIGTERM)

signal.signal(signal.SIGTERM, lambda *_: None)  # what run() restores when it returns
threading.Timer(0.3, running.set).start()
sys.setprofile(hook)
worker.run(handle_signals=True)
sys.setprofile(None)
print(f"stopped after {{raised[0]}} signals", flush=True)
"""


def test_sigterm_inside_the_loops_own_queue_calls_still_stops_the_worker() -> None:
    # SIGTERM is ignored once run() returns, so a hang ends only by the timeout's SIGKILL.
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT.format(repo=str(REPO))],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "stopped after 200 signals" in done.stdout, done.stdout + done.stderr[-3000:]
