"""Where the emulators listen, and the one way everybody builds boto3 clients for them."""

from __future__ import annotations

import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.config import Config

from tools.emulators.settings import ACCESS_KEY_ID, LOOPBACK, REGION, SECRET_ACCESS_KEY, EmulatorError

# --------------------------------------------------------------------------------------------- boto3 clients


def client_config(**overrides: Any) -> Config:
    """botocore ``Config`` for talking to a local emulator.

    Short connect timeout (loopback), a generous read timeout (kinesis-local slows down as streams grow),
    3 standard-mode attempts, and ``proxies={}`` so an ``HTTP(S)_PROXY`` in the environment is never used:
    traffic goes straight to 127.0.0.1. Keyword arguments override any of these.
    """
    settings: dict[str, Any] = {
        "retries": {"mode": "standard", "max_attempts": 3},
        "connect_timeout": 2,
        "read_timeout": 30,
        "max_pool_connections": 32,
        "proxies": {},
    }
    settings.update(overrides)
    return Config(**settings)


def client_kwargs(endpoint_url: str, *, region: str = REGION, **config: Any) -> dict[str, Any]:
    """Keyword arguments for ``boto3.client(service, **kwargs)`` against a local emulator endpoint."""
    _require_loopback_url(endpoint_url)
    return {
        "endpoint_url": endpoint_url,
        "region_name": region,
        "aws_access_key_id": ACCESS_KEY_ID,
        "aws_secret_access_key": SECRET_ACCESS_KEY,
        "config": client_config(**config),
    }


@dataclass(frozen=True)
class AwsEndpoints:
    """Where the emulators listen, and the one way everybody builds clients for them."""

    kinesis_endpoint: str
    aws_endpoint: str
    region: str = REGION

    def __post_init__(self) -> None:
        _require_loopback_url(self.kinesis_endpoint)
        _require_loopback_url(self.aws_endpoint)

    def endpoint_for(self, service: str) -> str:
        """kinesis-local for ``kinesis``; moto for everything else (dynamodb, dynamodbstreams, sqs, s3...)."""
        return self.kinesis_endpoint if service == "kinesis" else self.aws_endpoint

    def client_kwargs(self, service: str, **config: Any) -> dict[str, Any]:
        """Kwargs for ``boto3.client(service, **kwargs)``; ``config`` overrides the botocore Config."""
        return client_kwargs(self.endpoint_for(service), region=self.region, **config)

    def client(self, service: str, *, session: boto3.session.Session | None = None, **config: Any) -> Any:
        """A boto3 client for ``service`` (from ``session`` if given, which is faster for many clients)."""
        factory: Any = session if session is not None else boto3
        return factory.client(service, **self.client_kwargs(service, **config))

    def env(self) -> dict[str, str]:
        """Environment for a child process (consumer, demo) so that plain boto3 reaches the emulators."""
        return {
            "AWS_ENDPOINT_URL": self.aws_endpoint,
            "AWS_ENDPOINT_URL_KINESIS": self.kinesis_endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY_ID,
            "AWS_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_REGION": self.region,
            "AWS_EC2_METADATA_DISABLED": "true",
            "NO_PROXY": "127.0.0.1,localhost",
            "EMULATORS_KINESIS_ENDPOINT": self.kinesis_endpoint,
            "EMULATORS_AWS_ENDPOINT": self.aws_endpoint,
        }

    def as_dict(self) -> dict[str, str]:
        return {
            "kinesis_endpoint": self.kinesis_endpoint,
            "aws_endpoint": self.aws_endpoint,
            "region": self.region,
        }

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> AwsEndpoints | None:
        """Endpoints of already running emulators (``EMULATORS_KINESIS_ENDPOINT``/``EMULATORS_AWS_ENDPOINT``,
        as printed by ``python -m tools.emulators --format env``), or None when not both are set."""
        env = os.environ if environ is None else environ
        kinesis, aws = env.get("EMULATORS_KINESIS_ENDPOINT"), env.get("EMULATORS_AWS_ENDPOINT")
        if not kinesis or not aws:
            return None
        return cls(kinesis_endpoint=kinesis, aws_endpoint=aws, region=env.get("EMULATORS_REGION", REGION))


def _require_loopback_url(url: str) -> None:
    host = urllib.parse.urlsplit(url).hostname
    if host not in {LOOPBACK, "localhost"}:
        raise EmulatorError(f"emulator endpoint {url!r} is not on 127.0.0.1; refusing to send traffic there")
