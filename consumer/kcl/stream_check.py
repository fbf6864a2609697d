"""Which KCL leases an import takes: each held to the stream as it is now, the rest left out (with why) or refused.

A lease of a former stream of the same name, a finished lease whose shard has expired, and (when allowed) an
unfinished one whose shard has expired are left out; a wrong stream, a checkpoint that is not a position in its
shard, or two leases for one shard are refused before anything is written. ``consumer.kcl.cutover`` plans and
applies the import of what is kept.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from consumer.admin.ops import position_refused, shard_spans
from consumer.aws_errors import aws_call
from consumer.errors import ConfigError, MissingResourceError
from consumer.kcl.lease_table import KclLease
from consumer.logs import log_event

__all__ = ["LeftOut", "check_streams", "kcl_position"]

logger = logging.getLogger(__name__)


def kcl_position(kcl: KclLease) -> str:
    """The KCL lease's position as the reports show it: its checkpoint, and its sub-sequence number if any."""
    return kcl.checkpoint + (f"/{kcl.sub_sequence}" if kcl.sentinel is None else "")


@dataclass(frozen=True)
class LeftOut:
    """A KCL lease the import leaves out, and why: one line of the plan."""

    kcl: KclLease
    why: str

    def line(self) -> str:
        """The report line: the shard, the KCL lease and why nothing is imported for it."""
        owner = f", owner {self.kcl.owner}" if self.kcl.owner else ""
        return (
            f"{self.kcl.stream}/{self.kcl.shard_id}: KCL {kcl_position(self.kcl)}{owner}: left out "
            f"(lease {self.kcl.lease_key}): {self.why}"
        )


def _shard_spans(kinesis: Any, stream: str, setting: str) -> dict[str, tuple[int, int | None]]:
    """``shard_spans`` of ``stream``; a stream that does not exist names ``setting``."""
    try:
        with aws_call("kinesis", f"list the shards of {stream}"):
            return shard_spans(kinesis, stream)
    except MissingResourceError:
        raise ConfigError(setting, f"Kinesis stream {stream!r} does not exist") from None


def _created(kinesis: Any, stream: str, setting: str) -> datetime:
    """When ``stream`` (as it is now) was created: its ``StreamCreationTimestamp``."""
    try:
        with aws_call("kinesis", f"describe {stream}"):
            summary = kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]
    except MissingResourceError:
        raise ConfigError(setting, f"Kinesis stream {stream!r} does not exist") from None
    created: datetime = summary["StreamCreationTimestamp"]
    return created


def _epoch_text(seconds: float) -> str:
    """``1714564800 = 2024-05-01T12:00:00Z`` (the number alone past any date, e.g. milliseconds)."""
    try:
        when = datetime.fromtimestamp(int(seconds), UTC).isoformat().replace("+00:00", "Z")
    except (OverflowError, OSError, ValueError):
        return str(int(seconds))
    return f"{int(seconds)} = {when}"


def _former_incarnation(kcl: KclLease, epoch: int, created: datetime, setting: str) -> str | None:
    """Why a multi-stream lease (its key's creation ``epoch``) belongs to a former stream of the same name (None:
    to the stream as it is now). The KCL's creationEpoch is whole seconds; the creation time has a fraction."""
    now = created.timestamp()
    if abs(epoch - now) < 1:
        return None
    if epoch > now:
        raise ConfigError(
            setting,
            f"KCL lease {kcl.lease_key}: creationEpoch {_epoch_text(epoch)} is after stream "
            f"{kcl.stream!r} was created ({_epoch_text(now)}): not a lease of this stream "
            "(the KCL's creationEpoch is epoch seconds)",
        )
    return (
        f"a former stream {kcl.stream!r} (creationEpoch {_epoch_text(epoch)}; the stream now was "
        f"created {_epoch_text(now)})"
    )


def _shard_number(shard_id: str) -> int | None:
    prefix, _, number = shard_id.rpartition("-")
    return int(number) if prefix and number.isdigit() else None


def _oldest_if_older(shard_id: str, spans: dict[str, tuple[int, int | None]]) -> str | None:
    """The oldest shard the stream lists, when ``shard_id`` is older still (Kinesis numbers a stream's shards in
    the order it makes them): a shard the stream no longer lists that is older than all it lists has expired."""
    number = _shard_number(shard_id)
    listed = [(n, s) for s in spans if (n := _shard_number(s)) is not None]
    if number is None or not listed:
        return None
    oldest_number, oldest = min(listed)
    return oldest if number < oldest_number else None


def check_streams(
    kcl_leases: list[KclLease], kinesis: Any, *, leave_out_expired: bool = False
) -> tuple[list[KclLease], list[LeftOut]]:
    """The leases worth importing, each held to its stream, and those left out (with why). A lease of a
    multi-stream table belongs to the stream as it is now only if its key's creationEpoch is the stream's
    ``StreamCreationTimestamp``: the KCL keeps the leases of a deleted stream, and a re-created stream of the
    same name has shards of the same ids, so an older epoch's lease (a former stream) is left out. The stream
    must list the lease's shard, and a sequence-number checkpoint must be a position in it. A wrong
    ``--stream`` (or a lease table of another application) is refused here, before anything is written, rather
    than leaving leases the fleet never reads or positions it cannot start from. A lease whose shard the stream
    no longer lists is left out when it is finished (``SHARD_END``: nothing is left to read there, and the KCL
    keeps such leases for a while), or, with ``leave_out_expired``, when the shard is older than every shard the
    stream lists (it expired past the retention period before the KCL finished it); otherwise it is refused,
    saying which. Two leases left for one shard are refused: which holds its position cannot be told."""
    spans: dict[str, dict[str, tuple[int, int | None]]] = {}
    created: dict[str, datetime] = {}
    keep: list[KclLease] = []
    left: list[LeftOut] = []
    former: dict[str, list[KclLease]] = {}  # per stream, its leases of an earlier creationEpoch
    live: set[str] = set()  # streams with a lease of their current creationEpoch
    for kcl in kcl_leases:
        setting = "--kcl-table" if ":" in kcl.lease_key else "--stream"  # where the stream's name came from
        if kcl.stream not in spans:
            spans[kcl.stream] = _shard_spans(kinesis, kcl.stream, setting)
        if kcl.creation_epoch is not None:
            if kcl.stream not in created:  # one DescribeStreamSummary per stream
                created[kcl.stream] = _created(kinesis, kcl.stream, setting)
            why = _former_incarnation(kcl, kcl.creation_epoch, created[kcl.stream], setting)
            if why is not None:
                left.append(LeftOut(kcl, why))
                former.setdefault(kcl.stream, []).append(kcl)
                continue
            live.add(kcl.stream)
        span = spans[kcl.stream].get(kcl.shard_id)
        if span is None:
            left.append(_unlisted(kcl, spans[kcl.stream], setting, leave_out_expired))
            continue
        _check_position(kcl, kinesis, span, setting)
        keep.append(replace(kcl, first_sequence=str(span[0])))
    _refuse_only_former(former, live, created)
    _refuse_two_for_one_shard(keep)
    for out in left:
        log_event(
            logger,
            "kcl_lease_skipped",
            stream=out.kcl.stream,
            shard=out.kcl.shard_id,
            lease=out.kcl.lease_key,
            why=out.why,
        )
    return keep, left


def _check_position(kcl: KclLease, kinesis: Any, span: tuple[int, int | None], setting: str) -> None:
    """The lease's checkpoint can be its shard's: a sequence number in the shard, a ``SHARD_END`` only of a
    closed shard (imported, it would end an open shard unread). Refused naming ``setting``."""
    if kcl.sentinel == "SHARD_END" and span[1] is None:
        raise ConfigError(
            setting,
            f"KCL lease {kcl.lease_key} is at SHARD_END, but stream {kcl.stream!r} lists shard {kcl.shard_id} "
            "as open (no ending sequence number): is it the KCL application's stream?",
        )
    if kcl.sentinel is None:
        with aws_call("kinesis", f"check {kcl.stream}/{kcl.shard_id}"):
            why = position_refused(kinesis, kcl.stream, kcl.shard_id, kcl.checkpoint, span)
        if why is not None:
            raise ConfigError(
                setting, f"KCL lease {kcl.lease_key}: {why}; is it the KCL application's stream?"
            )


def _unlisted(
    kcl: KclLease, spans: dict[str, tuple[int, int | None]], setting: str, leave_out_expired: bool
) -> LeftOut:
    """A lease whose shard the stream no longer lists: left out (finished, or expired and so allowed), else
    refused, saying whether the shard looks expired."""
    if kcl.sentinel == "SHARD_END":
        return LeftOut(kcl, "finished, and its shard is no longer listed (expired past the retention period)")
    oldest = _oldest_if_older(kcl.shard_id, spans)
    if oldest is not None and leave_out_expired:
        return LeftOut(
            kcl,
            f"its shard is no longer listed and is older than every listed shard (the oldest: {oldest}): expired "
            "past the retention period before the KCL finished it (--leave-out-expired)",
        )
    if oldest is not None:
        raise ConfigError(
            "--leave-out-expired",
            f"Kinesis stream {kcl.stream!r} no longer lists shard {kcl.shard_id} (KCL lease {kcl.lease_key}, at "
            f"{kcl.checkpoint}), which is older than every shard it lists (the oldest: {oldest}): it looks "
            "expired past the retention period before the KCL finished it; give --leave-out-expired to import "
            "without it (its unread records are gone)",
        )
    raise ConfigError(
        setting,
        f"Kinesis stream {kcl.stream!r} has no shard {kcl.shard_id} (KCL lease {kcl.lease_key}): "
        "is it the KCL application's stream?",
    )


def _refuse_only_former(
    former: dict[str, list[KclLease]], live: set[str], created: dict[str, datetime]
) -> None:
    """A stream none of whose leases carries its creation time is refused, not left out whole: its leases may
    be a deleted stream's, or the KCL application's stream configuration may give another number than the
    creation time; which, the import cannot tell, and leaving them all out would start every shard of a live
    application at the fleet's initial position (``LATEST`` skips what the KCL had not read)."""
    for stream, leases in sorted(former.items()):
        if stream in live:
            continue
        epochs = ", ".join(sorted({_epoch_text(k.creation_epoch or 0) for k in leases}))
        raise ConfigError(
            "--kcl-table",
            f"none of the {len(leases)} KCL leases of stream {stream!r} carries its creation time "
            f"({_epoch_text(created[stream].timestamp())}; theirs: {epochs}): if they are a deleted stream's, "
            f"there is nothing to import for {stream!r} (import the other streams with --stream); if the KCL "
            "application gives its streams another creationEpoch, this import cannot tell its leases apart",
        )


def _refuse_two_for_one_shard(leases: list[KclLease]) -> None:
    by_shard: dict[tuple[str, str], list[KclLease]] = {}
    for kcl in leases:
        by_shard.setdefault((kcl.stream, kcl.shard_id), []).append(kcl)
    for (stream, shard), same in sorted(by_shard.items()):
        if len(same) > 1:
            keys = ", ".join(kcl.lease_key for kcl in same)
            raise ConfigError(
                "--kcl-table",
                f"{len(same)} KCL leases map to {stream}/{shard} ({keys}): refusing to guess which holds its "
                "position",
            )
