"""What the data-path benchmark measures inside the consumer process: a processor that only counts, and the
window from the first read to the last record (wall time, CPU time of the whole process, peak RSS). With
``DATAPATH_CALLS`` set, every AWS call the process makes is counted by operation (botocore's
``_make_api_call``) and the counts written to that file at most every 0.2 s, for the parent to read the polls
a process makes at rest."""

from __future__ import annotations

import json
import os
import resource
import threading
import time
from pathlib import Path
from typing import Any

from consumer.lifecycle.processor import BaseProcessor, InitializationInput, ProcessRecordsInput

__all__ = ["WINDOW", "CountingProcessor", "Window", "count_calls"]


class Window:
    """Counts records from any thread; the measurement runs from the first record to the ``target``-th."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.target = int(os.environ.get("DATAPATH_TARGET", "0") or 0)
        self.result_path = os.environ.get("DATAPATH_RESULT", "")
        self.count = 0
        self._wall0 = 0.0
        self._cpu0 = 0.0
        self.done = threading.Event()
        self.result: dict[str, Any] = {}

    def begin(self) -> None:
        """The first shard is about to be read (idempotent): the window opens here."""
        with self._lock:
            if not self._wall0:
                self._wall0, self._cpu0 = time.perf_counter(), time.process_time()

    def add(self, n: int) -> None:
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
                "records_per_s": self.count / wall if wall > 0 else 0.0,
                "cpu_s_per_100k": cpu / self.count * 100_000,
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            }
            self.done.set()
        if self.result_path:
            Path(self.result_path).write_text(json.dumps(self.result))


WINDOW = Window()


class CountingProcessor(BaseProcessor):
    """Counts the records of each batch (no work per record: the benchmark measures the consumer itself).
    The window opens when the first shard is initialized, just before its first GetShardIterator."""

    def initialize(self, data: InitializationInput) -> None:
        WINDOW.begin()

    def process_records(self, data: ProcessRecordsInput) -> None:
        WINDOW.add(len(data.records))


def count_calls(path: str) -> None:
    """Count every botocore API call of this process by operation; the counts and the monotonic time of the
    last one go to ``path`` (replaced whole) at most every 0.2 s, so no thread of its own is needed."""
    from botocore.client import BaseClient

    original = BaseClient._make_api_call
    lock = threading.Lock()
    counts: dict[str, int] = {}
    written = [0.0]

    def counted(self: Any, operation_name: str, api_params: Any) -> Any:
        with lock:
            counts[operation_name] = counts.get(operation_name, 0) + 1
            now = time.monotonic()
            snapshot = None if now - written[0] < 0.2 else {"calls": dict(counts), "at": now}
            if snapshot is not None:
                written[0] = now
        if snapshot is not None:
            tmp = Path(f"{path}.{threading.get_ident()}")
            tmp.write_text(json.dumps(snapshot))
            os.replace(tmp, path)
        return original(self, operation_name, api_params)

    BaseClient._make_api_call = counted


if os.environ.get("DATAPATH_CALLS"):
    count_calls(os.environ["DATAPATH_CALLS"])
