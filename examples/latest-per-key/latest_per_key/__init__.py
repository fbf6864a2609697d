"""An example processor project: the raw S3 sink plus the newest record of every partition key in DynamoDB."""

from __future__ import annotations

from latest_per_key.processor import LatestPerKey
from latest_per_key.table import FencedLatestTable, StaleEpochError

__all__ = ["FencedLatestTable", "LatestPerKey", "StaleEpochError"]
