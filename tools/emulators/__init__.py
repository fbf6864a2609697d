"""Local AWS emulators for integration tests, the demo and the benchmarks (docs/emulators.md).

``with Emulators() as emu: emu.endpoints.client("kinesis")`` runs kinesis-local (Kinesis) and moto server
(DynamoDB, S3, SQS and the rest) as children on free 127.0.0.1 ports, with AWS's limits enforced; from a
shell, ``python -m tools.emulators [--format env]``. The children exit by themselves when the Python process
that started them dies, so even a SIGKILLed test run leaves no orphaned servers.
"""

from __future__ import annotations

from tools.emulators.children import http_ok, listening_addresses
from tools.emulators.endpoints import AwsEndpoints, client_kwargs
from tools.emulators.harness import Emulators, loopback_main_js
from tools.emulators.settings import ACCESS_KEY_ID, SECRET_ACCESS_KEY, EmulatorError

__all__ = [
    "ACCESS_KEY_ID",
    "SECRET_ACCESS_KEY",
    "AwsEndpoints",
    "EmulatorError",
    "Emulators",
    "client_kwargs",
    "http_ok",
    "listening_addresses",
    "loopback_main_js",
]
