"""The consumer's CloudWatch metrics (Embedded Metric Format on stdout, extracted by CloudWatch Logs)."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch

from stacks.config import EnvironmentSettings

__all__ = ["NAMESPACE", "consumer_lag", "consumer_metric"]

NAMESPACE = "KinesisFleetConsumer"


def consumer_metric(
    application: str, stream: str, name: str, *, statistic: str, period: Duration
) -> cloudwatch.Metric:
    """One metric at the ``Application`` + ``Stream`` rollup (alarms never use the per-shard series)."""
    return cloudwatch.Metric(
        namespace=NAMESPACE,
        metric_name=name,
        dimensions_map={"Application": application, "Stream": stream},
        statistic=statistic,
        period=period,
    )


def consumer_lag(settings: EnvironmentSettings, *, period: Duration) -> cloudwatch.IMetric:
    """The worst ``MillisBehindLatest`` over the environment's streams."""
    per_stream = {
        f"lag{i}": consumer_metric(
            settings.consumer.application, s.name, "MillisBehindLatest", statistic="Maximum", period=period
        )
        for i, s in enumerate(settings.streams)
    }
    if len(per_stream) == 1:
        return next(iter(per_stream.values()))
    return cloudwatch.MathExpression(
        expression=f"MAX([{', '.join(per_stream)}])",
        using_metrics=dict(per_stream),
        label="MillisBehindLatest (worst stream)",
        period=period,
    )
