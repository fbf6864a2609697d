"""A processor that appends every delivery and lifecycle event to a JSON-lines journal file.

Used by the fleet benchmark, the demo and the integration tests to prove what was delivered, by whom, under
which epoch and when. ``JOURNAL_PATH`` names the file (one per process is simplest); ``JOURNAL_DELAY_MS``
adds a processing delay per batch; ``JOURNAL_MANUAL=1`` marks records done from a background thread in
random order (per-record manual checkpointing).
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from typing import IO, Any

from consumer.lifecycle.processor import (
    InitializationInput,
    LeaseLostInput,
    ProcessRecordsInput,
    ShardEndedInput,
    ShutdownRequestedInput,
)
from consumer.records import Record

__all__ = ["JournalProcessor"]

_files: dict[str, IO[str]] = {}
_lock = threading.Lock()


def _journal() -> IO[str]:
    path = os.environ.get("JOURNAL_PATH", "journal.jsonl")
    with _lock:
        if path not in _files:
            _files[path] = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - process-wide
        return _files[path]


class JournalProcessor:
    def __init__(self) -> None:
        self.worker = os.environ.get("CONSUMER_WORKER_ID", str(os.getpid()))
        self.delay = float(os.environ.get("JOURNAL_DELAY_MS", "0")) / 1000
        self.manual = os.environ.get("JOURNAL_MANUAL") == "1"
        self.shard = ""
        self.stream = ""
        self._out = _journal()

    def _write(self, **fields: Any) -> None:
        line = json.dumps({"w": self.worker, "st": self.stream, "s": self.shard, "t": time.time(), **fields})
        with _lock:
            self._out.write(line + "\n")

    def initialize(self, data: InitializationInput) -> None:
        self.shard, self.stream = data.shard_id, data.stream
        start = str(data.starting_position) if data.starting_position else None
        self._write(k="init", e=data.epoch, start=start)

    def process_records(self, data: ProcessRecordsInput) -> None:
        if self.delay:
            time.sleep(self.delay)
        data.guard.ensure_valid()
        now = time.time()
        lines = [
            json.dumps(
                {
                    "w": self.worker,
                    "st": self.stream,
                    "s": self.shard,
                    "t": now,
                    "k": "d",
                    "q": r.sequence_number,
                    "u": r.sub_sequence_number,
                    "e": data.epoch,
                    "p": r.data.decode("utf-8", "replace")[:64],
                }
            )
            for r in data.records
        ]
        with _lock:
            self._out.write("\n".join(lines) + "\n")
        if self.manual:
            shuffled = list(data.records)
            random.shuffle(shuffled)
            threading.Thread(target=_complete, args=(shuffled,), daemon=True).start()

    def lease_lost(self, data: LeaseLostInput) -> None:
        self._write(k="lease_lost", e=data.epoch)

    def shard_ended(self, data: ShardEndedInput) -> None:
        data.checkpointer.checkpoint()
        self._write(k="shard_ended", e=data.epoch)

    def shutdown_requested(self, data: ShutdownRequestedInput) -> None:
        data.checkpointer.checkpoint()
        self._write(k="shutdown", e=data.epoch, cp=str(data.checkpointer.last_checkpoint))


def _complete(records: list[Record]) -> None:
    for r in records:
        time.sleep(random.random() / 1000)
        r.done()
