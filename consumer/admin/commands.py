"""``status``, ``drain`` and ``replay``: the operator's commands (wired into ``python -m consumer``)."""

from __future__ import annotations

import argparse
import json
import os
import select
import sys
from dataclasses import asdict
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

from consumer.config import env_float, field_default, parse_timestamp
from consumer.errors import EXIT_NOT_CONFIRMED, ConfigError
from consumer.records import Position
from consumer.settings.checks import positive

if TYPE_CHECKING:
    from consumer.admin.status import FleetStatus
    from consumer.checkpoint.dynamodb import DynamoDBCheckpointStore
    from consumer.leases.dynamodb import DynamoDBLeaseRepository

# boto3 and the repositories are imported by the handlers, when a command runs: registering the commands
# (every ``python -m consumer``) stays cheap.

__all__ = ["add_admin_commands", "checked_dynamodb", "table_settings"]

_TABLES = (("lease_table", "CONSUMER_LEASE_TABLE"), ("checkpoint_table", "CONSUMER_CHECKPOINT_TABLE"))


def table_settings(args: argparse.Namespace) -> dict[str, str]:
    """Resolve ``--lease-table`` and ``--checkpoint-table`` (each defaults to its variable) into
    ``args.lease_table`` and ``args.checkpoint_table``; returns the setting that named each (the flag when
    given, else the variable), for messages. Refuses a flag given empty, a table named nowhere, and one
    table for both (the checkpoint table's setting is named)."""
    settings: dict[str, str] = {}
    for dest, variable in _TABLES:
        flag = f"--{dest.replace('_', '-')}"
        value = getattr(args, dest, None)
        from_env = os.environ.get(variable)
        # Given on the command line (import-kcl's flags default to the variable: equal, it came from there).
        if value is not None and value != from_env:
            if not value.strip():
                raise ConfigError(flag, "must not be empty")
            setting = flag
        else:
            value, setting = (from_env or "").strip(), variable
            if not value:
                raise ConfigError(flag, f"is required (or set {variable})")
        setattr(args, dest, value.strip())
        settings[dest] = setting
    if args.lease_table == args.checkpoint_table:
        raise ConfigError(
            settings["checkpoint_table"],
            f"must differ from the lease table ({args.lease_table!r}): the two tables hold different items "
            "under the same keys",
        )
    return settings


def checked_dynamodb(args: argparse.Namespace, settings: dict[str, str] | None = None) -> Any:
    """A DynamoDB client, once ``--lease-table`` and ``--checkpoint-table`` are given (``table_settings``, or
    its result as ``settings``), credentials resolve, both tables have the consumer's key schema, neither
    holds the other's items and they are one application's pair, as ``run`` checks them (each problem one line
    naming the flag or variable that named the table)."""
    settings = settings or table_settings(args)
    from consumer.aws import command_client
    from consumer.preflight import check_credentials
    from consumer.table_checks import SettingNames, check_table_roles, check_table_schema

    check_credentials()
    ddb = command_client("dynamodb")
    check_table_schema(ddb, args.lease_table, settings["lease_table"])
    check_table_schema(ddb, args.checkpoint_table, settings["checkpoint_table"])
    names = SettingNames(settings["lease_table"], settings["checkpoint_table"], streams="", dlq_url="")
    check_table_roles(ddb, args.lease_table, args.checkpoint_table, names)
    return ddb


def _tables(args: argparse.Namespace) -> tuple[DynamoDBLeaseRepository, DynamoDBCheckpointStore]:
    ddb = checked_dynamodb(args)
    return _repositories(ddb, args)


def _repositories(
    ddb: Any, args: argparse.Namespace
) -> tuple[DynamoDBLeaseRepository, DynamoDBCheckpointStore]:
    from consumer.checkpoint.dynamodb import DynamoDBCheckpointStore
    from consumer.leases.dynamodb import DynamoDBLeaseRepository

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


def _print_status(status: FleetStatus, out: TextIO) -> None:
    out.write(f"leases ({len(status.leases)})\n")
    _table(
        [
            {
                "stream": x.stream,
                "shard": x.shard_id,
                "state": x.detail,
                "owner": x.owner,
                "epoch": x.epoch,
                "checkpoint": x.checkpoint,
                "lag_ms": x.millis_behind_latest if x.millis_behind_latest is not None else f"? {x.lag_note}",
                "lag_age_s": x.lag_age_s,
            }
            for x in status.leases
        ],
        out,
    )
    out.write(f"\nworkers ({len(status.workers)}; dead: no heartbeat for {status.lease_duration_s:g}s)\n")
    _table(
        [
            {
                "worker": w.worker_id,
                "state": w.state,
                "since": w.since,
                "leases": w.leases,
                "heartbeat_age_s": w.heartbeat_age_s,
                "leads": "yes" if w.leads else "",
            }
            for w in status.workers
        ],
        out,
    )


def _lease_duration(args: argparse.Namespace) -> float:
    """The lease duration by which a worker is judged dead: ``--lease-duration`` when the command has it and
    it is given, else ``CONSUMER_LEASE_DURATION_SECONDS`` (default 10), checked as `run` checks it."""
    if getattr(args, "lease_duration", None) is not None:
        duration, setting = args.lease_duration, "--lease-duration"
    else:
        setting = "CONSUMER_LEASE_DURATION_SECONDS"
        duration = env_float(os.environ, setting, field_default("lease.lease_duration"))
    positive(setting, duration)  # the check `run` makes (LeaseConfig), named as the operator set it
    return float(duration)


def _status(args: argparse.Namespace) -> int:
    duration = _lease_duration(args)
    if args.count is not None and not args.watch:
        raise ConfigError("--count", "only counts the redraws of --watch: give --watch too, or leave it out")
    if args.count is not None and args.count < 1:
        raise ConfigError("--count", f"must be >= 1, got {args.count}")
    from consumer.admin.status import fleet_status, scanned_checkpoints
    from consumer.aws_errors import aws_call

    tables = table_settings(args)
    ddb = checked_dynamodb(args, tables)
    repo, _ = _repositories(ddb, args)
    checkpoints = scanned_checkpoints(ddb, args.checkpoint_table)

    def read() -> FleetStatus:  # DynamoDB only: the lag comes from the owners' heartbeats
        with aws_call("dynamodb", f"scan {args.lease_table!r}", tables["lease_table"]):
            return fleet_status(repo, checkpoints, lease_duration=duration)

    if args.watch:
        from consumer.admin.watch import require_rich, watch

        require_rich()
        watch(read, count=args.count)
        return 0
    status = read()
    if args.json:
        json.dump(asdict(status), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        _print_status(status, sys.stdout)
    return 0


def _drain(args: argparse.Namespace) -> int:
    if not args.worker.strip():
        raise ConfigError("worker", "must not be empty (the worker id, see `status`)")
    duration = _lease_duration(args)
    from consumer.admin.ops import drain

    repo, _ = _tables(args)
    drain(repo, args.worker, lease_duration=duration)
    print(f"drain requested: {args.worker} hands its leases over and exits")
    return 0


def _parse_position(raw: str) -> Position:
    seq, _, sub = raw.partition("/")
    if not seq.isdigit() or (sub and not sub.lstrip("-").isdigit()):
        raise ConfigError("--checkpoint", f"expected SEQUENCE or SEQUENCE/SUB, got {raw!r}")
    return Position(seq, int(sub or 0))


def _timestamp(raw: str) -> datetime:
    value = parse_timestamp(raw, "--timestamp")
    now = datetime.now(UTC)
    if value > now:
        raise ConfigError(
            "--timestamp",
            f"{raw} is in the future (now is {now:%Y-%m-%dT%H:%M:%SZ}); give a past time to replay from",
        )
    return value


def _answer(prompt: str) -> str:
    """The line typed after ``prompt`` (``EOFError`` at the end of input). Waits in short ``select`` calls, not
    in one read: Python runs a signal's handler only between two of its own steps, so a Ctrl-C that came just
    before a blocking read would wait for the read to end, and the prompt would ignore it."""
    print(prompt, end="", flush=True)
    while not select.select([sys.stdin], [], [], 0.2)[0]:
        pass
    line = sys.stdin.readline()
    if not line:
        raise EOFError
    return line.rstrip("\n")


def _confirmed() -> bool:
    if not sys.stdin.isatty():
        print("refusing to replay without confirmation: pass --yes, or run it in a terminal", file=sys.stderr)
        return False
    try:
        answer = _answer("replay? type 'yes' to continue: ")
    except (EOFError, KeyboardInterrupt):  # Ctrl-D, Ctrl-C: not a yes
        print(file=sys.stdout, flush=True)  # end the prompt's line
        answer = ""
    if answer.strip() != "yes":
        print("aborted", file=sys.stderr)
        return False
    return True


def _replay(args: argparse.Namespace) -> int:
    for flag in ("stream", "shard"):  # an empty --shard would mean every shard of the stream
        if getattr(args, flag) is not None and not getattr(args, flag).strip():
            raise ConfigError(f"--{flag}", "must not be empty")
    chosen = [x for x in (args.timestamp, args.sequence, args.checkpoint) if x]
    if len(chosen) != 1:
        raise ConfigError("replay", "give exactly one of --timestamp, --sequence or --checkpoint")
    timestamp = _timestamp(args.timestamp) if args.timestamp else None
    if args.sequence and not args.sequence.isdigit():
        raise ConfigError("--sequence", f"must be a sequence number (digits), got {args.sequence!r}")
    checkpoint = _parse_position(args.checkpoint) if args.checkpoint else None
    from consumer.admin.ops import plan_replay, replay
    from consumer.aws import command_client
    from consumer.aws_errors import aws_call

    repo, store = _tables(args)
    with aws_call("kinesis", f"read stream {args.stream!r}", "--stream"):
        plans = plan_replay(
            repo,
            store,
            command_client("kinesis"),
            args.stream,
            args.shard,
            timestamp=timestamp,
            sequence=args.sequence,
            checkpoint=checkpoint,
        )
    if not plans:
        print("nothing to replay")
        return 0
    for p in plans:
        print(
            f"{p.lease.stream}/{p.lease.shard_id}: checkpoint {p.old_checkpoint or 'none'} -> {p.new_checkpoint} "
            f"(owner {p.lease.owner or '-'} loses the lease and the next owner restarts there)"
        )
    if not args.yes and not _confirmed():
        return EXIT_NOT_CONFIRMED
    for line in replay(repo, plans, lease_table=args.lease_table, checkpoint_table=args.checkpoint_table):
        print(f"undo: {line}")
    return 0


def _add_tables(p: argparse.ArgumentParser) -> None:
    """``--lease-table`` and ``--checkpoint-table``; unset, each is read from its variable when the command
    runs (``table_settings``), so that an error names the setting the operator actually used."""
    p.add_argument("--lease-table", help="the lease table (default: $CONSUMER_LEASE_TABLE)")
    p.add_argument("--checkpoint-table", help="the checkpoint table (default: $CONSUMER_CHECKPOINT_TABLE)")


def add_admin_commands(sub: Any) -> None:
    """Register ``status``, ``drain`` and ``replay`` on the CLI's subparsers."""
    st = sub.add_parser(
        "status",
        help="every shard (owner, epoch, state, checkpoint, lag) and every worker (alive, draining, dead)",
        description="Per shard: owner, epoch, state (running, handing over, halted at X since T, owner dead, "
        "waiting for its parent shards, released, ended), checkpoint and lag (as its owner last read it, and how long ago). Per worker: "
        "alive, draining or dead (and since when). Reads DynamoDB only: no Kinesis call.",
    )
    _add_tables(st)
    st.add_argument("--json", action="store_true", help="print one JSON document (for scripts)")
    st.add_argument(
        "--no-lag",
        action="store_true",
        help="ignored, kept for old scripts: the lag now comes with the workers' heartbeats, at no cost",
    )
    st.add_argument(
        "--lease-duration",
        type=float,
        help="a worker silent this long is shown dead, and a lag observed this long ago stale "
        "(default: $CONSUMER_LEASE_DURATION_SECONDS or 10)",
    )
    st.add_argument("--watch", action="store_true", help="a live view, redrawn every second (Ctrl-C quits)")
    st.add_argument("--count", type=int, help="with --watch: stop after this many redraws")
    st.set_defaults(func=_status)
    dr = sub.add_parser(
        "drain",
        help="ask one worker to hand its leases away and exit",
        description="The worker hands every lease to the others (or releases it) and exits 0. A worker "
        "that status shows dead (no heartbeat for $CONSUMER_LEASE_DURATION_SECONDS, default 10) is refused "
        "(exit 2): its leases are taken over once they expire.",
    )
    _add_tables(dr)
    dr.add_argument("worker", help="the worker id (see `status`)")
    dr.set_defaults(func=_drain)
    rp = sub.add_parser(
        "replay",
        help="move a shard's (or a stream's) checkpoint back; asks for confirmation",
        description="Moves the checkpoint; the owner loses the lease and the next owner restarts there. "
        "Prints the command that undoes it. Exit 3 when not confirmed.",
    )
    _add_tables(rp)
    rp.add_argument("--stream", required=True, help="the stream whose shards to replay")
    rp.add_argument("--shard", help="only this shard (default: every open shard of the stream)")
    rp.add_argument(
        "--timestamp",
        help="replay records from this time: ISO-8601 with a time zone, e.g. 2024-05-01T12:00:00Z",
    )
    rp.add_argument(
        "--sequence", help="replay from this sequence number (inclusive; it must be in the shard)"
    )
    rp.add_argument("--checkpoint", help="set the checkpoint exactly (SEQUENCE/SUB), e.g. to undo a replay")
    rp.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    rp.set_defaults(func=_replay)
