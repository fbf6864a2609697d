"""What the data-path benchmark measures inside a process: the window from the first read to the last record
(wall time, CPU of the whole process, peak RSS), a processor that only counts into it, and with
``DATAPATH_CALLS`` set every AWS call the process makes, for the parent to read the polls made at rest."""

from __future__ import annotations

import json
import os
import resource
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from consumer.lifecycle.processor import BaseProcessor, InitializationInput, ProcessRecordsInput

__all__ = ["WINDOW", "CountingProcessor", "Window", "count_calls"]


class Window:
    """Counts records from any thread, from the first read to the ``target``-th record; then ``result`` is set
    (and written to ``result_path``, if any) and ``done``."""

    def __init__(self, target: int, result_path: str = "") -> None:
        self.target, self.result_path, self.count = target, result_path, 0
        self._lock = threading.Lock()
        self._wall0 = self._cpu0 = 0.0
        self.done = threading.Event()
        self.result: dict[str, Any] = {}

    def begin(self) -> None:
        """The first shard is about to be read (idempotent): the window opens here."""
        with self._lock:
            if not self._wall0:
                self._wall0, self._cpu0 = time.perf_counter(), time.process_time()

    def add(self, n: int) -> None:
        """``n`` more records were read."""
        if n <= 0:
            return
        self.begin()
        with self._lock:
            self.count += n
            if self.count < self.target or self.done.is_set():
                return
            wall, cpu = time.perf_counter() - self._wall0, time.process_time() - self._cpu0
            self.result = {
                "records": self.count,
                "wall_s": wall,
                "cpu_s": cpu,
                "records_per_s": self.count / wall,
                "cpu_s_per_100k": cpu / self.count * 100_000,
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            }
            self.done.set()
        if self.result_path:
            Path(self.result_path).write_text(json.dumps(self.result))


WINDOW = Window(int(os.environ.get("DATAPATH_TARGET") or 0), os.environ.get("DATAPATH_RESULT", ""))


class CountingProcessor(BaseProcessor):
    """Counts each batch into ``window``, which opens when the first shard is initialized."""

    def __init__(self, window: Window = WINDOW) -> None:
        self.window = window

    def initialize(self, data: InitializationInput) -> None:
        self.window.begin()

    def process_records(self, data: ProcessRecordsInput) -> None:
        self.window.add(len(data.records))


def count_calls(path: str) -> None:
    """Count every botocore API call of this process by operation; the counts and the monotonic time go to
    ``path`` (replaced whole) at most every 0.2 s, on the calling thread."""
    from botocore.client import BaseClient

    original = BaseClient._make_api_call
    lock = threading.Lock()
    counts: Counter[str] = Counter()
    written = [0.0]

    def counted(self: Any, operation_name: str, api_params: Any) -> Any:
        with lock:
            counts[operation_name] += 1
            now = time.monotonic()
            if due := now - written[0] >= 0.2:
                written[0] = now
                snapshot = json.dumps({"calls": counts, "at": now})
        if due:
            tmp = Path(f"{path}.{threading.get_ident()}")
            tmp.write_text(snapshot)
            os.replace(tmp, path)
        return original(self, operation_name, api_params)

    BaseClient._make_api_call = counted


if os.environ.get("DATAPATH_CALLS"):
    count_calls(os.environ["DATAPATH_CALLS"])
