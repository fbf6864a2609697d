"""``status``, ``drain`` and ``replay``: the operator's commands (wired into ``python -m consumer``)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from datetime import datetime
from typing import Any, TextIO

from consumer.admin.ops import drain, fleet_status, plan_replay, replay
from consumer.aws import make_client
from consumer.checkpoint.dynamodb import DynamoDBCheckpointStore
from consumer.errors import ConfigError
from consumer.leases.dynamodb import DynamoDBLeaseRepository
from consumer.records import Position

__all__ = ["add_admin_commands"]


def _tables(args: argparse.Namespace) -> tuple[DynamoDBLeaseRepository, DynamoDBCheckpointStore]:
    for flag in ("lease_table", "checkpoint_table"):
        if not getattr(args, flag):
            raise ConfigError(f"--{flag.replace('_', '-')}", f"is required (or set CONSUMER_{flag.upper()})")
    ddb = make_client("dynamodb")
    return (
        DynamoDBLeaseRepository(ddb, args.lease_table, args.checkpoint_table),
        DynamoDBCheckpointStore(ddb, args.checkpoint_table),
    )


def _table(rows: list[dict[str, Any]], out: TextIO) -> None:
    if not rows:
        out.write("(none)\n")
        return
    cols = list(rows[0])
    widths = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in cols}
    out.write("  ".join(c.ljust(widths[c]) for c in cols) + "\n")
    for r in rows:
        out.write("  ".join(str(r[c] if r[c] is not None else "-").ljust(widths[c]) for c in cols) + "\n")


def _status(args: argparse.Namespace) -> int:
    repo, store = _tables(args)
    leases, workers = fleet_status(repo, store, None if args.no_lag else make_client("kinesis"))
    if args.json:
        json.dump(
            {"leases": [asdict(x) for x in leases], "workers": [asdict(w) for w in workers]},
            sys.stdout,
            indent=2,
        )
        sys.stdout.write("\n")
        return 0
    sys.stdout.write(f"leases ({len(leases)})\n")
    _table([asdict(x) for x in leases], sys.stdout)
    sys.stdout.write(f"\nworkers ({len(workers)})\n")
    _table([asdict(w) for w in workers], sys.stdout)
    return 0


def _drain(args: argparse.Namespace) -> int:
    repo, _ = _tables(args)
    drain(repo, args.worker)
    print(f"drain requested: {args.worker} hands its leases over and exits")
    return 0


def _parse_position(raw: str) -> Position:
    seq, _, sub = raw.partition("/")
    if not seq.isdigit() or (sub and not sub.lstrip("-").isdigit()):
        raise ConfigError("--checkpoint", f"expected SEQUENCE or SEQUENCE/SUB, got {raw!r}")
    return Position(seq, int(sub or 0))


def _replay(args: argparse.Namespace) -> int:
    chosen = [x for x in (args.timestamp, args.sequence, args.checkpoint) if x]
    if len(chosen) != 1:
        raise ConfigError("replay", "give exactly one of --timestamp, --sequence or --checkpoint")
    timestamp = None
    if args.timestamp:
        try:
            timestamp = datetime.fromisoformat(args.timestamp)
        except ValueError:
            raise ConfigError("--timestamp", f"must be ISO-8601, got {args.timestamp!r}") from None
    if args.sequence and not args.sequence.isdigit():
        raise ConfigError("--sequence", f"must be a sequence number (digits), got {args.sequence!r}")
    repo, store = _tables(args)
    plans = plan_replay(
        repo,
        store,
        make_client("kinesis"),
        args.stream,
        args.shard,
        timestamp=timestamp,
        sequence=args.sequence,
        checkpoint=_parse_position(args.checkpoint) if args.checkpoint else None,
    )
    if not plans:
        print("nothing to replay")
        return 0
    for p in plans:
        print(
            f"{p.lease.stream}/{p.lease.shard_id}: checkpoint {p.old_checkpoint} -> {p.new_checkpoint} "
            f"(owner {p.lease.owner or '-'} loses the lease and the next owner restarts there)"
        )
    if not args.yes:
        if not sys.stdin.isatty():
            print(
                "refusing to replay without confirmation: pass --yes, or run it in a terminal",
                file=sys.stderr,
            )
            return 3
        if input("replay? type 'yes' to continue: ").strip() != "yes":
            print("aborted", file=sys.stderr)
            return 3
    for line in replay(repo, plans):
        print(f"undo: {line}")
    return 0


def add_admin_commands(sub: Any) -> None:
    def tables(p: argparse.ArgumentParser) -> None:
        p.add_argument("--lease-table", default=os.environ.get("CONSUMER_LEASE_TABLE"))
        p.add_argument("--checkpoint-table", default=os.environ.get("CONSUMER_CHECKPOINT_TABLE"))

    st = sub.add_parser("status", help="every lease (owner, epoch, checkpoint, lag) and every live worker")
    tables(st)
    st.add_argument("--json", action="store_true")
    st.add_argument(
        "--no-lag", action="store_true", help="skip the per-shard lag look-up (2 Kinesis calls each)"
    )
    st.set_defaults(func=_status)
    dr = sub.add_parser("drain", help="ask one worker to hand its leases away and exit")
    tables(dr)
    dr.add_argument("worker")
    dr.set_defaults(func=_drain)
    rp = sub.add_parser(
        "replay", help="move a shard's (or a stream's) checkpoint back; asks for confirmation"
    )
    tables(rp)
    rp.add_argument("--stream", required=True)
    rp.add_argument("--shard")
    rp.add_argument("--timestamp", help="replay records from this ISO-8601 time")
    rp.add_argument("--sequence", help="replay from this sequence number (inclusive)")
    rp.add_argument("--checkpoint", help="set the checkpoint exactly (SEQUENCE/SUB), e.g. to undo a replay")
    rp.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    rp.set_defaults(func=_replay)
