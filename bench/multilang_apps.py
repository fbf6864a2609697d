"""The two processors ``bench.multilang`` compares, each counting records and checkpointing every batch.

``Counter`` is this consumer's native API (``python -m consumer run``, auto checkpoints after each batch).
``kclpy_app`` (run as a script) is an amazon-kclpy v3 processor under ``python -m consumer multilang``: the
usual KCL app shape, ``checkpoint()`` at the end of each batch. Both append ``<time> <records>`` per batch to
``BENCH_PROGRESS`` (one short ``O_APPEND`` write per batch), which the benchmark reads to time the run.
"""

from __future__ import annotations

import os
import time

from consumer.lifecycle.processor import BaseProcessor, ProcessRecordsInput

__all__ = ["KCLPY_APP", "Counter"]


def _progress(n: int) -> None:
    fd = os.open(os.environ["BENCH_PROGRESS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{time.time():.6f} {n}\n".encode())
    finally:
        os.close(fd)


class Counter(BaseProcessor):
    """Counts records (native API, auto checkpoints)."""

    def process_records(self, data: ProcessRecordsInput) -> None:
        """Count the batch."""
        _progress(len(data.records))


KCLPY_APP = '''#!/usr/bin/env python
"""An amazon-kclpy v3 processor that counts records and checkpoints every batch."""
import os
import time

from amazon_kclpy import kcl
from amazon_kclpy.v3 import processor


def progress(n):
    fd = os.open(os.environ["BENCH_PROGRESS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, ("%.6f %d\\n" % (time.time(), n)).encode())
    finally:
        os.close(fd)


class App(processor.RecordProcessorBase):
    def initialize(self, initialize_input):
        pass

    def process_records(self, process_records_input):
        records = process_records_input.records
        for r in records:
            r.binary_data
        progress(len(records))
        process_records_input.checkpointer.checkpoint()

    def lease_lost(self, lease_lost_input):
        pass

    def shard_ended(self, shard_ended_input):
        shard_ended_input.checkpointer.checkpoint()

    def shutdown_requested(self, shutdown_requested_input):
        shutdown_requested_input.checkpointer.checkpoint()


if __name__ == "__main__":
    kcl.KCLProcess(App()).run()
'''
