"""Enhanced fan-out on a stream deleted and created again under a running worker (``python -m consumer run``):
the stream consumer went with the old stream, so a subscription that finds it gone registers it again
(``fanout_consumer_registered_again``) and the new stream is read from the initial position. Before, the
consumer was registered only at start: no shard of the new stream was ever read (0 of 20 records in the
audit), and each failed for ever with an error saying the stream was deleted."""

from __future__ import annotations

from typing import Any

import pytest

from tools.tcp_proxy import FaultProxy

from .support import (
    PROCESS_START,
    create_stream,
    log_events,
    make_names,
    put_numbered,
    read_journal,
    spawn_worker,
    stop_process,
    wait_until,
)

pytestmark = pytest.mark.integration


def _consumers(kinesis: Any, stream: str) -> list[str]:
    arn = kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]["StreamARN"]
    return [c["ConsumerName"] for c in kinesis.list_stream_consumers(StreamARN=arn)["Consumers"]]


def test_a_recreated_streams_consumer_is_registered_again_and_the_new_stream_read(
    emulators, kinesis_client, dynamodb_client, unique_name, tmp_path
) -> None:
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 1)
    put_numbered(kinesis_client, names.stream, "old-", 3)
    journal = tmp_path / "j.jsonl"
    log = journal.with_suffix(".w.log")
    delivered = lambda: [e["p"] for e in read_journal(journal) if e["k"] == "d"]  # noqa: E731
    port = int(emulators.kinesis_endpoint.rsplit(":", 1)[1])
    # kinesis-local leaves out SubscribeToShard's initial response: the shim adds it (docs/emulators.md).
    with FaultProxy(("127.0.0.1", port), eventstream=True) as shim:
        proc = spawn_worker(
            emulators,
            names,
            "w",
            journal,
            CONSUMER_RETRIEVAL="fanout",
            CONSUMER_FANOUT_NAME=names.stream,
            AWS_ENDPOINT_URL_KINESIS=shim.url(),
        )
        try:
            wait_until(lambda: len(delivered()) == 3, PROCESS_START, what="the first stream read")
            kinesis_client.delete_stream(StreamName=names.stream, EnforceConsumerDeletion=True)
            wait_until(lambda: log_events(log, "stream_gone"), 20, what="the stream seen gone")
            create_stream(kinesis_client, names.stream, 2)  # a new stream: shard 1 never had a lease
            put_numbered(kinesis_client, names.stream, "new-", 20)
            wait_until(
                lambda: sum(p.startswith("new-") for p in delivered()) == 20,
                30,
                what="every record of the new stream",
            )
            assert sorted(delivered()) == sorted(
                [f"old-{i}" for i in range(3)] + [f"new-{i}" for i in range(20)]
            )
            assert _consumers(kinesis_client, names.stream) == [names.stream]  # one, registered again
            assert log_events(log, "fanout_consumer_registered_again")
        finally:
            assert stop_process(proc) == 0
