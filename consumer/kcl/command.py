"""``python -m consumer import-kcl --kcl-table T``: the cut-over from a KCL application's lease table.

Stop the KCL application, import, start this consumer's fleet: it resumes exactly after each KCL checkpoint.
The command first makes sure no KCL worker is alive (no ``leaseCounter`` moves within ``--failover-millis``),
prints its plan per shard (and each KCL lease it leaves out, with why), and with ``--dry-run`` stops there.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from consumer.admin.commands import checked_dynamodb
from consumer.config import parse_timestamp
from consumer.errors import ConfigError

if TYPE_CHECKING:
    from consumer.kcl.lease_table import KclLease

__all__ = ["add_import_kcl_command", "parse_kcl_timestamp"]


def parse_kcl_timestamp(raw: str) -> datetime:
    """``--timestamp``: epoch seconds, as the KCL's ``initialPositionInStreamExtended`` holds it (a whole or a
    decimal number), or ISO-8601 with a time zone; ``ConfigError`` naming ``--timestamp`` otherwise."""
    text = raw.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            datetime.fromisoformat(text)
        except ValueError:
            raise ConfigError(
                "--timestamp",
                "must be epoch seconds (the KCL's initialPositionInStreamExtended, e.g. 1714564800) or ISO-8601 "
                f"with a time zone (e.g. 2024-05-01T12:00:00Z); got {raw!r}",
            ) from None
        return parse_timestamp(text, "--timestamp")  # ISO-8601: refused without a time zone
    if not (math.isfinite(seconds) and seconds >= 0):
        raise ConfigError("--timestamp", f"must be epoch seconds >= 0, got {raw!r}")
    try:
        return datetime.fromtimestamp(seconds, UTC)
    except (OverflowError, OSError, ValueError):
        raise ConfigError(
            "--timestamp", f"{raw!r} epoch seconds is past any date this can represent"
        ) from None


def _run(args: argparse.Namespace) -> int:
    if not args.kcl_table:
        raise ConfigError(
            "--kcl-table",
            "is required (the KCL application's lease table: its tableName, else its applicationName)",
        )
    if args.failover_millis <= 0:
        raise ConfigError("--failover-millis", f"must be > 0, got {args.failover_millis}")
    timestamp = parse_kcl_timestamp(args.timestamp) if args.timestamp else None
    # Imported here, not with the CLI: registering the command stays cheap for every ``python -m consumer``.
    from consumer.aws import command_client
    from consumer.checkpoint.dynamodb import DynamoDBCheckpointStore
    from consumer.kcl.cutover import apply_plans, plan_import
    from consumer.kcl.lease_table import check_not_alive, read_kcl_leases
    from consumer.leases.dynamodb import DynamoDBLeaseRepository

    ddb = checked_dynamodb(args)
    repo = DynamoDBLeaseRepository(ddb, args.lease_table, args.checkpoint_table)
    store = DynamoDBCheckpointStore(ddb, args.checkpoint_table)

    def read() -> list[KclLease]:
        return read_kcl_leases(ddb, args.kcl_table, args.stream)

    kcl = read() if args.force else check_not_alive(read, args.failover_millis / 1000.0)
    if not kcl:
        raise ConfigError(
            "--kcl-table",
            f"{args.kcl_table} holds no KCL leases" + (f" of {args.stream}" if args.stream else ""),
        )
    plan = plan_import(
        kcl,
        repo,
        store,
        command_client("kinesis"),
        timestamp=timestamp,
        force=args.force,
        leave_out_expired=args.leave_out_expired,
    )
    left = f"; {len(plan.left_out)} KCL leases left out" if plan.left_out else ""
    if args.dry_run:
        print(f"plan ({len(plan.shards)} shards, parents first{left}; nothing written: --dry-run)")
        for line in plan.lines():
            print(f"  {line}")
        return 0
    lines = apply_plans(ddb, repo, plan.shards)
    print(f"imported {len(lines)} KCL leases from {args.kcl_table} (parents first{left})")
    for line in [*lines, *(out.line() for out in plan.left_out)]:
        print(f"  {line}")
    sys.stdout.flush()
    return 0


def add_import_kcl_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``import-kcl`` on the CLI."""
    p = sub.add_parser(
        "import-kcl",
        help="cut over from a KCL 2.x/3.x lease table: leases and checkpoints at the KCL's positions",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--kcl-table", help="the KCL lease table: its tableName setting, else its applicationName")
    p.add_argument(
        "--stream", help="the stream of single-stream lease keys; with multi-stream keys, a filter"
    )
    p.add_argument(
        "--lease-table", default=os.environ.get("CONSUMER_LEASE_TABLE"), help="default: $CONSUMER_LEASE_TABLE"
    )
    p.add_argument(
        "--checkpoint-table",
        default=os.environ.get("CONSUMER_CHECKPOINT_TABLE"),
        help="default: $CONSUMER_CHECKPOINT_TABLE",
    )
    p.add_argument(
        "--timestamp",
        help="the KCL's AT_TIMESTAMP (initialPositionInStreamExtended): epoch seconds, or ISO-8601 with a time zone",
    )
    p.add_argument(
        "--failover-millis",
        type=int,
        default=10000,
        help="the KCL's failoverTimeMillis: a leaseCounter that moves within it means the KCL is alive (10000)",
    )
    p.add_argument("--dry-run", action="store_true", help="print the plan per shard; write nothing")
    p.add_argument(
        "--leave-out-expired",
        action="store_true",
        help="leave out (and list) a KCL lease whose shard the stream no longer lists and is older than every "
        "shard it lists: expired past the retention period before the KCL finished it",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="import even while KCL leases renew, and move checkpoints of ours back to the KCL's",
    )
    p.set_defaults(func=_run)
