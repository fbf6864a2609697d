"""Where the emulators listen, and the one way everybody builds boto3 clients for them."""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.config import Config

from tools.emulators.settings import ACCESS_KEY_ID, LOOPBACK, REGION, SECRET_ACCESS_KEY, EmulatorError


def client_kwargs(endpoint_url: str, *, region: str = REGION, **config: Any) -> dict[str, Any]:
    """Keyword arguments for ``boto3.client(service, **kwargs)`` against a local emulator endpoint; ``config``
    overrides the botocore Config (a generous read timeout: kinesis-local slows down as streams grow)."""
    if urllib.parse.urlsplit(endpoint_url).hostname not in {LOOPBACK, "localhost"}:
        raise EmulatorError(f"emulator endpoint {endpoint_url!r} is not on 127.0.0.1: no traffic goes there")
    settings: dict[str, Any] = {
        "retries": {"mode": "standard", "max_attempts": 3},
        "connect_timeout": 2,
        "read_timeout": 30,
        "max_pool_connections": 32,
        "proxies": {},  # never an HTTP(S)_PROXY of the environment
        **config,
    }
    return {
        "endpoint_url": endpoint_url,
        "region_name": region,
        "aws_access_key_id": ACCESS_KEY_ID,
        "aws_secret_access_key": SECRET_ACCESS_KEY,
        "config": Config(**settings),
    }


@dataclass(frozen=True)
class AwsEndpoints:
    """Where the emulators listen: kinesis-local (or its limits proxy) for Kinesis, moto for the rest."""

    kinesis_endpoint: str
    aws_endpoint: str
    region: str = REGION

    def __post_init__(self) -> None:
        for url in (self.kinesis_endpoint, self.aws_endpoint):
            client_kwargs(url)  # raises unless on 127.0.0.1 (env() hands them to child processes)

    def client(self, service: str, *, session: boto3.session.Session | None = None, **config: Any) -> Any:
        """A boto3 client for ``service`` (from ``session`` if given, faster for many clients); ``config``
        overrides the botocore Config."""
        endpoint = self.kinesis_endpoint if service == "kinesis" else self.aws_endpoint
        factory: Any = session if session is not None else boto3
        return factory.client(service, **client_kwargs(endpoint, region=self.region, **config))

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

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> AwsEndpoints | None:
        """Endpoints of already running emulators (``EMULATORS_KINESIS_ENDPOINT`` and ``EMULATORS_AWS_ENDPOINT``,
        as ``python -m tools.emulators --format env`` prints them), or None when not both are set."""
        env = os.environ if environ is None else environ
        kinesis, aws = env.get("EMULATORS_KINESIS_ENDPOINT"), env.get("EMULATORS_AWS_ENDPOINT")
        return cls(kinesis_endpoint=kinesis, aws_endpoint=aws) if kinesis and aws else None
