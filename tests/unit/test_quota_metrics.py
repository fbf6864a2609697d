"""CloudWatch custom metrics are billed per metric (name and dimension values) a month: what the EMF sink
creates must not grow with the shards when asked not to."""

from __future__ import annotations

import io
import json

from consumer.metrics.sink import EmfMetrics


def _custom_metrics(out: str) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    """The CloudWatch metrics the EMF documents create: one per metric name and dimension set's values."""
    made = set()
    for line in out.splitlines():
        doc = json.loads(line)
        for directive in doc["_aws"]["CloudWatchMetrics"]:
            for dims in directive["Dimensions"]:
                values = tuple((d, str(doc[d])) for d in dims)
                made |= {(m["Name"], values) for m in directive["Metrics"]}
    return made


def _one_flush(shards: int, **kwargs: bool) -> str:
    out = io.StringIO()
    sink = EmfMetrics("app", "w1", out, **kwargs)
    for i in range(shards):
        shard = f"shardId-{i:012d}"
        sink.add("RecordsProcessed", 10, "orders", shard)
        sink.add("MillisBehindLatest", 5, "orders", shard)
        sink.add("Checkpoints", 1, "orders", shard)
    sink.flush()
    return out.getvalue()


def test_per_shard_dimension_costs_a_metric_per_shard() -> None:
    """The default: three metrics per shard plus the three per-stream rollups (what the docs price)."""
    assert len(_custom_metrics(_one_flush(1000))) == 3 * 1000 + 3


def test_without_the_shard_dimension_the_count_does_not_grow_with_shards() -> None:
    for shards in (4, 1000):
        out = _one_flush(shards, shard_dimension=False)
        assert len(_custom_metrics(out)) == 3  # the per-stream rollups alone
        docs = [json.loads(line) for line in out.splitlines()]
        assert len(docs) == shards and all("Shard" in d for d in docs)  # still there to query in the logs
        assert sum(d["RecordsProcessed"] for d in docs) == 10 * shards


def test_the_worker_publishes_per_stream_only_when_consumer_metrics_dimensions_is_stream() -> None:
    """``CONSUMER_METRICS_DIMENSIONS=stream`` reaches the worker's EMF sink (the CLI and the container read
    it); the default keeps the per-shard set."""
    from consumer import create_worker

    env = {
        "CONSUMER_STREAMS": "orders",
        "CONSUMER_PROCESSOR": "consumer.examples.logging_processor:LoggingProcessor",
        "CONSUMER_APPLICATION": "app",
        "CONSUMER_LEASE_TABLE": "leases",
        "CONSUMER_CHECKPOINT_TABLE": "checkpoints",
        "AWS_REGION": "eu-west-1",
    }
    for setting, per_shard in (({}, True), ({"CONSUMER_METRICS_DIMENSIONS": "Stream"}, False)):
        out = io.StringIO()
        worker = create_worker(env={**env, **setting}, checks=False, metrics_out=out, region="eu-west-1")
        worker.metrics.add("RecordsProcessed", 1, "orders", "shardId-000000000000")
        worker.metrics.flush()
        made = _custom_metrics(out.getvalue())
        assert any(dict(values).get("Shard") for _, values in made) is per_shard, made
