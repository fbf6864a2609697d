"""Local AWS emulators for integration tests, the demo and the benchmarks (docs/emulators.md):
``with Emulators() as emu: emu.endpoints.client("kinesis")``, or ``python -m tools.emulators [--format env]``.
The children exit by themselves when the Python process that started them dies (even SIGKILLed)."""

from __future__ import annotations

from tools.emulators.endpoints import AwsEndpoints, client_kwargs
from tools.emulators.harness import Emulators
from tools.emulators.settings import ACCESS_KEY_ID, SECRET_ACCESS_KEY, EmulatorError

__all__ = [
    "ACCESS_KEY_ID",
    "SECRET_ACCESS_KEY",
    "AwsEndpoints",
    "EmulatorError",
    "Emulators",
    "client_kwargs",
]
