"""``python -m consumer import-kcl --kcl-table T``: the cut-over from a KCL application's lease table.

Stop the KCL application, import, start this consumer's fleet: it resumes exactly after each KCL checkpoint.
The command first makes sure no KCL worker is alive (no ``leaseCounter`` moves within ``--failover-millis``),
prints its plan per shard, and with ``--dry-run`` stops there.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from consumer.admin.commands import checked_dynamodb
from consumer.config import parse_timestamp
from consumer.errors import ConfigError

if TYPE_CHECKING:
    from consumer.kcl.lease_table import KclLease

__all__ = ["add_import_kcl_command"]


def _run(args: argparse.Namespace) -> int:
    if not args.kcl_table:
        raise ConfigError(
            "--kcl-table",
            "is required (the KCL application's lease table: its tableName, else its applicationName)",
        )
    if args.failover_millis <= 0:
        raise ConfigError("--failover-millis", f"must be > 0, got {args.failover_millis}")
    timestamp = parse_timestamp(args.timestamp, "--timestamp") if args.timestamp else None
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
    plans = plan_import(kcl, repo, store, command_client("kinesis"), timestamp=timestamp, force=args.force)
    if args.dry_run:
        print(f"plan ({len(plans)} shards, parents first; nothing written: --dry-run)")
        for plan in plans:
            print(f"  {plan.line()}")
        return 0
    lines = apply_plans(ddb, repo, plans)
    print(f"imported {len(lines)} KCL leases from {args.kcl_table} (parents first)")
    for line in lines:
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
        help="ISO-8601 with a time zone: the KCL's AT_TIMESTAMP (initialPositionInStreamExtended)",
    )
    p.add_argument(
        "--failover-millis",
        type=int,
        default=10000,
        help="the KCL's failoverTimeMillis: a leaseCounter that moves within it means the KCL is alive (10000)",
    )
    p.add_argument("--dry-run", action="store_true", help="print the plan per shard; write nothing")
    p.add_argument(
        "--force",
        action="store_true",
        help="import even while KCL leases renew, and move checkpoints of ours back to the KCL's",
    )
    p.set_defaults(func=_run)
