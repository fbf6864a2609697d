"""The Kinesis client over the network (kinesis-local): arrival timestamps parsed by the cheap UTC parser to
the same instants botocore's default gives, and GetRecords reusing pooled connections."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from datetime import UTC

import boto3
import pytest

from consumer.aws import make_client
from consumer.config import RetrievalConfig
from consumer.errors import ThrottledError
from consumer.records import Record
from consumer.retrieval.kinesis import BotoKinesis
from consumer.retrieval.polling import PollingReader

pytestmark = pytest.mark.integration


class NewConnections(logging.Handler):
    """Counts urllib3's "Starting new HTTP connection" lines (one per TCP connection opened)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("Starting new HTTP"):
            self.count += 1


@pytest.fixture
def new_connections() -> Iterator[NewConnections]:
    logger = logging.getLogger("urllib3.connectionpool")
    handler, level = NewConnections(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


@pytest.fixture
def stream(emulators, unique_name) -> str:
    name = unique_name("datapath")
    kinesis = emulators.client("kinesis")
    kinesis.create_stream(StreamName=name, ShardCount=4)
    kinesis.get_waiter("stream_exists").wait(StreamName=name, WaiterConfig={"Delay": 0.2})
    kinesis.put_records(
        StreamName=name, Records=[{"Data": f"r{i}".encode(), "PartitionKey": f"pk{i}"} for i in range(200)]
    )
    return name


def _client(emulators):
    return make_client("kinesis", endpoint_url=emulators.kinesis_endpoint, region=emulators.region)


def _read_all(api: BotoKinesis, stream: str, shard: str) -> list[Record]:
    cfg = RetrievalConfig(idle_time_between_reads=0.0, max_records=1000)
    reader = PollingReader(api, stream, shard, cfg, after=None, initial_position="TRIM_HORIZON")
    records: list[Record] = []
    throttled = 0
    while True:
        try:
            got = reader.fetch()
        except ThrottledError:  # several readers of one shard at once pass its 5 reads a second, as on AWS
            throttled += 1
            assert throttled < 100, "throttled for ever"
            continue  # the reader's pacer spaces the next call after a throttle
        if got is None or not got.records:
            return records
        records += got.records


def test_arrival_timestamps_are_utc_and_the_same_instants_as_botocores(
    emulators, stream, monkeypatch
) -> None:
    for var, value in emulators.env().items():
        monkeypatch.setenv(var, value)
    api = BotoKinesis(_client(emulators))
    default = boto3.session.Session().client("kinesis", endpoint_url=emulators.kinesis_endpoint)
    shard = api.list_shards(stream)[0].shard_id
    ours = _read_all(api, stream, shard)
    it = default.get_shard_iterator(StreamName=stream, ShardId=shard, ShardIteratorType="TRIM_HORIZON")
    theirs = default.get_records(ShardIterator=it["ShardIterator"], Limit=1000)["Records"]
    assert ours and len(ours) == len(theirs)
    assert all(r.approximate_arrival.tzinfo is UTC for r in ours)
    assert [r.approximate_arrival for r in ours] == [t["ApproximateArrivalTimestamp"] for t in theirs]
    assert [r.data for r in ours] == [t["Data"] for t in theirs]


def test_getrecords_from_every_shard_thread_reuses_pooled_connections(
    emulators, stream, new_connections, monkeypatch
) -> None:
    for var, value in emulators.env().items():
        monkeypatch.setenv(var, value)
    api = BotoKinesis(_client(emulators))
    shards = [s.shard_id for s in api.list_shards(stream)]
    threads = [threading.Thread(target=_read_all, args=(api, stream, s)) for s in shards for _ in range(3)]
    for t in threads:  # first round: at most one connection per concurrent thread
        t.start()
    for t in threads:
        t.join(30)
    opened = new_connections.count
    assert 1 <= opened <= len(threads)
    for _ in range(3):  # later rounds: only pooled connections
        threads = [threading.Thread(target=_read_all, args=(api, stream, s)) for s in shards]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    assert new_connections.count == opened
    assert api.calls["GetRecords"] >= 4 * 3 + 4 * 3
