"""``acheckpoint`` runs its write on the worker's own threads: an application that fills the event loop's
default executor (``asyncio.to_thread``, ``run_in_executor(None, ...)``) never delays a checkpoint."""

from __future__ import annotations

import asyncio
import threading

from consumer.leases.memory import InMemoryTables
from consumer.lifecycle.processor import ProcessRecordsInput
from consumer.retrieval.memory import InMemoryKinesis

from .helpers import AsyncRecordingProcessor, Journal, make_worker, start, wait_until

# Far more jobs than the default executor has threads (min(32, cpus + 4)).
APPLICATION_JOBS = 64


class BusyApplication(AsyncRecordingProcessor):
    """Fills the loop's default executor with its own blocking work, then checkpoints the batch."""

    release = threading.Event()
    outcome: list[str] = []

    async def process_records(self, data: ProcessRecordsInput) -> None:
        loop = asyncio.get_running_loop()
        jobs = [loop.run_in_executor(None, self.release.wait, 30.0) for _ in range(APPLICATION_JOBS)]
        try:
            await asyncio.wait_for(data.checkpointer.acheckpoint(data.records[-1]), 5.0)
            self.outcome.append("written")
        except TimeoutError:
            self.outcome.append("queued behind the application's executor work")
        finally:
            self.release.set()
            await asyncio.gather(*jobs)
        await super().process_records(data)


def test_acheckpoint_does_not_queue_behind_the_applications_default_executor_work() -> None:
    BusyApplication.release.clear()
    BusyApplication.outcome.clear()
    tables, kinesis, journal = InMemoryTables(), InMemoryKinesis(), Journal()
    kinesis.create_stream("s", 1)
    shard = kinesis.list_shards("s")[0].shard_id
    kinesis.put("s", shard, b"r0")
    worker = make_worker("w1", tables, kinesis, journal, processor=lambda: BusyApplication(journal, "w1"))
    t = start(worker)
    try:
        wait_until(lambda: BusyApplication.outcome != [], timeout=20, what="the checkpoint's outcome")
        stored = tables.checkpoints[("s", shard)].position
    finally:
        BusyApplication.release.set()
        worker.request_shutdown()
        t.join(10)
    assert BusyApplication.outcome == ["written"]
    assert stored is not None and stored.sequence == journal.sequences(shard)[0]
