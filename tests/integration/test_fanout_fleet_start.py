"""A fan-out fleet starting at once finds or registers its one stream consumer within AWS's control-plane
quotas, over the network: the limits layer (AWS's numbers) in front of kinesis-local throttles
DescribeStreamSummary (20 a second per account), ListStreamConsumers (5 a second per stream),
RegisterStreamConsumer and DescribeStreamConsumer, and every worker still gets the same consumer.

Before, the worker's one-attempt client raised the first throttle out of ``run()``: 30 workers starting
together, 24 failed (``LimitExceededException``) and 2 more on the registration another worker had under way
(``ResourceInUseException``)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import pytest

from consumer.aws import WORKER_CALLS, make_client
from consumer.lifecycle.fanout_start import register_with_retries
from consumer.retrieval.kinesis import BotoKinesis
from tests.integration.support import create_stream
from tools.emulators.kinesis_proxy import KinesisLimitsProxy
from tools.emulators.limits import Limits
from tools.emulators.settings import ACCESS_KEY_ID, SECRET_ACCESS_KEY

pytestmark = pytest.mark.integration

WORKERS = 20
SESSION = boto3.Session(
    aws_access_key_id=ACCESS_KEY_ID, aws_secret_access_key=SECRET_ACCESS_KEY, region_name="us-east-1"
)


@pytest.fixture
def proxy(emulators: Any) -> Iterator[KinesisLimitsProxy]:
    """A limits proxy of the test's own (AWS's default limits), so that its refusals are counted here."""
    host, _, port = emulators.kinesis_endpoint.removeprefix("http://").rpartition(":")
    limiter = KinesisLimitsProxy((host, int(port)), Limits()).start()
    yield limiter
    limiter.stop()


def _start_together(emulators: Any, proxy: KinesisLimitsProxy) -> str:
    """Twenty workers find or register the consumer of a new stream at once: its one ARN (checked)."""
    stream = f"fanout-start-{uuid.uuid4().hex[:8]}"
    create_stream(emulators.client("kinesis"), stream, 1)
    start = threading.Barrier(WORKERS)

    def worker(_: int) -> str:
        # Each worker's own client, as the worker makes it: one attempt per call, our retry policy above.
        client = make_client("kinesis", endpoint_url=proxy.url(), session=SESSION, config=WORKER_CALLS)
        start.wait()
        return register_with_retries(BotoKinesis(client), stream, "fleet")

    with ThreadPoolExecutor(WORKERS) as pool:
        arns = list(pool.map(worker, range(WORKERS)))
    assert len(set(arns)) == 1 and arns[0].startswith("arn:aws:kinesis:"), set(arns)
    consumers = emulators.client("kinesis").list_stream_consumers(StreamARN=arns[0].split("/consumer/")[0])
    assert [c["ConsumerName"] for c in consumers["Consumers"]] == ["fleet"]
    return arns[0]


def test_twenty_workers_starting_at_once_all_get_the_one_stream_consumer(
    emulators: Any, proxy: KinesisLimitsProxy
) -> None:
    # A start proves something only if AWS's limits refused some of its calls. On a loaded machine the
    # twenty threads' calls can spread over more than a second and stay within them: then start again, on a
    # new stream, until one start was throttled (each start must get its one consumer either way).
    for _ in range(5):
        _start_together(emulators, proxy)
        if proxy.limiter.refusals.get("ListStreamConsumers", 0) > 0:
            break
    refused = dict(proxy.limiter.refusals)
    assert refused.get("ListStreamConsumers", 0) > 0, (
        f"nothing was throttled in five starts: the test proves nothing ({refused})"
    )
