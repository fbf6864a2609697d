"""Constants of the emulator harness (paths, credentials, kinesis-local settings) and its error type."""

from __future__ import annotations

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
#: moto handles DynamoDB (+ Streams) and S3 requests one at a time, so conditional writes and transactions
#: are atomic as on AWS. ``EMULATORS_MOTO_SERIALIZE=none`` restores moto's unsafe threaded server.
DEFAULT_MOTO_SERIALIZE: Final = "dynamodb,s3"

_STEPS: Final = [
    "CREATE_STREAM",
    "DELETE_STREAM",
    "REGISTER_STREAM_CONSUMER",
    "DEREGISTER_STREAM_CONSUMER",
    "MERGE_SHARDS",
    "SPLIT_SHARD",
    "START_STREAM_ENCRYPTION",
    "STOP_STREAM_ENCRYPTION",
    "UPDATE_SHARD_COUNT",
    "UPDATE_STREAM_MODE",
]
#: kinesis-local: every simulated state transition instant ("0ms": a new stream is ACTIVE at once), limits
#: high enough for a whole test session of uniquely named streams, no persistence.
KINESIS_LOCAL_SETTINGS: Final[Mapping[str, str]] = {
    **{f"{step}_DURATION": "0ms" for step in _STEPS},
    "SHARD_LIMIT": "100000",
    "ON_DEMAND_STREAM_COUNT_LIMIT": "10000",
    "AWS_REGION": REGION,
    "AWS_ACCOUNT_ID": ACCOUNT_ID,
    "LOG_LEVEL": "WARN",
    "ROOT_LOG_LEVEL": "ERROR",
    "SHOULD_PERSIST_DATA": "false",
    "LOAD_DATA_IF_EXISTS": "false",
}


class EmulatorError(RuntimeError):
    """An emulator could not be prepared, did not come up in time, or died."""


def credential_scope(auth: str) -> list[str]:
    """A SigV4 ``Authorization`` header's credential scope: [key, date, region, service, "aws4_request"]."""
    start = auth.find("Credential=")
    scope = auth[start + 11 :].split(",", 1)[0].strip().split("/") if start >= 0 else []
    return scope if len(scope) == 5 else []


def region_of(auth: str) -> str:
    """The region of a SigV4 ``Authorization`` header ("" if unsigned)."""
    scope = credential_scope(auth)
    return scope[2] if scope else ""
