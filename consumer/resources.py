"""What a processor needs to exist before it can run: checked by the worker at start (``consumer.preflight``).

A processor declares its external resources with a ``required_resources()`` method returning ``Resource``
items; each names the setting (environment variable) that chose it, so a missing one is reported as the
variable to fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["Resource", "ResourceKind"]

ResourceKind = Literal["kinesis_stream", "s3_bucket", "sqs_queue"]


@dataclass(frozen=True)
class Resource:
    kind: ResourceKind
    name: str  # stream name, bucket name or queue URL
    setting: str  # the variable or flag that names it, e.g. CONSUMER_RAW_BUCKET
