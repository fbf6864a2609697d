"""Local AWS emulators for integration tests, the demo and the benchmarks (docs/emulators.md).

Two child processes, both bound to 127.0.0.1 on free ports:

* kinesis-local (npm, ``node_modules/kinesis-local``) for Kinesis Data Streams, plain HTTP. The package binds
  0.0.0.0 and has no host option, so a copy of its ``main.js`` with the bind address replaced by 127.0.0.1 is
  run (the replacement is checked, and the listening sockets are checked again once it is up).
* moto server (PyPI ``moto[server]``) for DynamoDB, SQS, S3 and every other service, all on one port.

Usage::

    with Emulators() as emu:
        kinesis = emu.endpoints.client("kinesis")
        dynamodb = emu.endpoints.client("dynamodb")

or from a shell: ``python -m tools.emulators [--format env]`` prints the endpoints and runs until
Ctrl-C/SIGTERM.

Children run in their own process groups; :meth:`Emulators.stop` sends SIGTERM to each group, then SIGKILL
after a grace period. ``atexit`` stops anything still running, and each child also exits on its own within
about a second when the Python process that started it dies (it polls its parent pid), so even a SIGKILLed
test run leaves no orphaned node or Python servers.
"""

from __future__ import annotations

from tools.emulators.cli import main
from tools.emulators.endpoints import AwsEndpoints, client_config, client_kwargs
from tools.emulators.harness import Emulators, running_emulators
from tools.emulators.kinesis_local import loopback_main_js
from tools.emulators.network import free_port, http_ok, listening_addresses
from tools.emulators.settings import (
    ACCESS_KEY_ID,
    ACCOUNT_ID,
    DEFAULT_MOTO_SERIALIZE,
    DEFAULT_START_TIMEOUT,
    DEFAULT_STOP_TIMEOUT,
    KINESIS_LOCAL_DIR,
    KINESIS_LOCAL_SETTINGS,
    LOOPBACK,
    MOTO_ENTRY,
    REGION,
    REPO_ROOT,
    SECRET_ACCESS_KEY,
    WORK_ROOT,
    EmulatorError,
)

__all__ = [
    "ACCESS_KEY_ID",
    "ACCOUNT_ID",
    "DEFAULT_MOTO_SERIALIZE",
    "DEFAULT_START_TIMEOUT",
    "DEFAULT_STOP_TIMEOUT",
    "KINESIS_LOCAL_DIR",
    "KINESIS_LOCAL_SETTINGS",
    "LOOPBACK",
    "MOTO_ENTRY",
    "REGION",
    "REPO_ROOT",
    "SECRET_ACCESS_KEY",
    "WORK_ROOT",
    "AwsEndpoints",
    "EmulatorError",
    "Emulators",
    "client_config",
    "client_kwargs",
    "free_port",
    "http_ok",
    "listening_addresses",
    "loopback_main_js",
    "main",
    "running_emulators",
]
