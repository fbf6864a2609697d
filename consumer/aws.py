"""boto3 clients for the consumer; the endpoint is configuration (``AWS_ENDPOINT_URL`` works as usual)."""

from __future__ import annotations

import os
import threading
from typing import Any

import boto3
from botocore.config import Config

__all__ = ["make_client", "shared_client"]

_CONFIG = Config(
    retries={"max_attempts": 3, "mode": "standard"},
    connect_timeout=2,
    read_timeout=10,
    max_pool_connections=64,
)


def make_client(service: str, *, endpoint_url: str | None = None, region: str | None = None) -> Any:
    config = _CONFIG
    if service == "s3" and (endpoint_url or os.environ.get("AWS_ENDPOINT_URL")):
        config = config.merge(Config(s3={"addressing_style": "path"}))  # local endpoints have no bucket DNS
    return boto3.session.Session().client(
        service, endpoint_url=endpoint_url, region_name=region, config=config
    )


_shared: dict[str, Any] = {}
_shared_lock = threading.Lock()


def shared_client(service: str) -> Any:
    """One client per service per process (boto3 clients are thread-safe; creating one costs ~0.1-0.5 s,
    which a processor created per shard on every hand-off should not pay)."""
    with _shared_lock:
        if service not in _shared:
            _shared[service] = make_client(service)
        return _shared[service]
