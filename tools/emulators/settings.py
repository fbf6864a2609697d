"""Constants of the emulator harness: paths, credentials, ports, kinesis-local settings, the error type."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Final

REPO_ROOT: Final = Path(__file__).resolve().parents[2]
KINESIS_LOCAL_DIR: Final = REPO_ROOT / "node_modules" / "kinesis-local"
WORK_ROOT: Final = REPO_ROOT / ".emulators"
MOTO_ENTRY: Final = Path(__file__).resolve().parents[1] / "_emulator_moto.py"

LOOPBACK: Final = "127.0.0.1"
REGION: Final = "us-east-1"
ACCESS_KEY_ID: Final = "testing"
SECRET_ACCESS_KEY: Final = "testing"
#: moto's default account; kinesis-local is configured to use the same one so ARNs agree across services.
ACCOUNT_ID: Final = "123456789012"

DEFAULT_START_TIMEOUT: Final = 60.0
DEFAULT_STOP_TIMEOUT: Final = 10.0
POLL_INTERVAL: Final = 0.05
MAX_SPAWN_ATTEMPTS: Final = 3
STALE_WORKDIR_SECONDS: Final = 3600.0
OWNER_FILE: Final = "owner.pid"
KINESIS_TERM_GRACE: Final = 1.0
#: moto handles DynamoDB (+ Streams) and S3 requests one at a time, so conditional writes and transactions
#: are atomic as on AWS. ``EMULATORS_MOTO_SERIALIZE=none`` restores moto's unsafe threaded server.
DEFAULT_MOTO_SERIALIZE: Final = "dynamodb,s3"

#: Environment for kinesis-local: every simulated state transition instant ("0ms" is accepted; a 2-shard
#: stream is ACTIVE on the first DescribeStreamSummary), limits high enough that a whole test session can
#: keep creating uniquely named streams, no persistence.
KINESIS_LOCAL_SETTINGS: Final[Mapping[str, str]] = {
    "CREATE_STREAM_DURATION": "0ms",
    "DELETE_STREAM_DURATION": "0ms",
    "REGISTER_STREAM_CONSUMER_DURATION": "0ms",
    "DEREGISTER_STREAM_CONSUMER_DURATION": "0ms",
    "START_STREAM_ENCRYPTION_DURATION": "0ms",
    "STOP_STREAM_ENCRYPTION_DURATION": "0ms",
    "MERGE_SHARDS_DURATION": "0ms",
    "SPLIT_SHARD_DURATION": "0ms",
    "UPDATE_SHARD_COUNT_DURATION": "0ms",
    "UPDATE_STREAM_MODE_DURATION": "0ms",
    "SHARD_LIMIT": "100000",
    "ON_DEMAND_STREAM_COUNT_LIMIT": "10000",
    "AWS_REGION": REGION,
    "AWS_ACCOUNT_ID": ACCOUNT_ID,
    "LOG_LEVEL": "WARN",
    "ROOT_LOG_LEVEL": "ERROR",
    "SHOULD_PERSIST_DATA": "false",
    "LOAD_DATA_IF_EXISTS": "false",
}

# Preloaded into node (``--require``): exit when the Python parent is gone (reparented or dead).
PARENT_WATCH_JS: Final = """'use strict';
const parent = Number(process.env.EMULATOR_PARENT_PID || 0);
if (parent > 0) {
  setInterval(() => {
    let alive = process.ppid === parent;
    if (alive) {
      try { process.kill(parent, 0); } catch (e) { alive = false; }
    }
    if (!alive) { process.exit(0); }
  }, 500).unref();
}
"""

ANY_ADDRESS_LITERAL: Final = re.compile(rb"""(["'`])0\.0\.0\.0\1""")
ANY_ADDRESS_ANYWHERE: Final = re.compile(rb"(?<![\d.])0\.0\.0\.0(?![\d.])")
PORT_IN_USE: Final = ("EADDRINUSE", "Address already in use")


class EmulatorError(RuntimeError):
    """An emulator could not be prepared, did not come up in time, or died."""
