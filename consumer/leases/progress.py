"""What an owner last read of each of its shards, as it publishes it with its heartbeat (for ``status``).

Per shard: ``MillisBehindLatest`` of the owner's last fetch, the last sequence number it has read (or started
after), and how long before the heartbeat that carries it the fetch was taken (the worker's monotonic
clock). The worker item's ``heartbeat_ms`` dates the heartbeat, so a reader gets both the wall time of the
observation (``heartbeat_ms - age_ms``) and its age now (``now - heartbeat_ms + age_ms``).

On the worker item it is one binary attribute, ``progress``: zlib-compressed JSON
``{"v": 1, "s": {stream: {shard_id: [millis_behind_latest, age_ms, last_sequence]}}}``, about 40 bytes a shard
(a 56-digit sequence number is most of it), so that a worker with hundreds of shards keeps its item small:
every write to the item (its heartbeat) is billed by the item's size. See docs/protocol.md.
"""

from __future__ import annotations

import json
import logging
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["MAX_PUBLISHED", "ShardLag", "decode_progress", "encode_progress"]

logger = logging.getLogger(__name__)

#: At most this many shards are published per worker (the most behind first): about 80 KB compressed at
#: worst, well under DynamoDB's 400 KB item limit. Shards past it are shown "not published".
MAX_PUBLISHED = 2000

_VERSION = 1


@dataclass(frozen=True)
class ShardLag:
    """One shard's progress as its owner last read it."""

    millis_behind_latest: int | None  # None: the fetch carried none
    last_sequence: str | None  # the last sequence number read (or started after); None: none yet
    age_ms: int  # how long before the heartbeat that publishes it it was observed


def encode_progress(progress: Mapping[tuple[str, str], ShardLag]) -> bytes:
    """The ``progress`` attribute for ``{(stream, shard_id): ShardLag}`` (b"" for none)."""
    if not progress:
        return b""
    streams: dict[str, dict[str, list[Any]]] = {}
    for (stream, shard_id), lag in progress.items():
        streams.setdefault(stream, {})[shard_id] = [lag.millis_behind_latest, lag.age_ms, lag.last_sequence]
    doc = json.dumps({"v": _VERSION, "s": streams}, separators=(",", ":"), sort_keys=True)
    return zlib.compress(doc.encode(), 9)


def decode_progress(blob: bytes) -> dict[tuple[str, str], ShardLag]:
    """``{(stream, shard_id): ShardLag}`` from a ``progress`` attribute; {} for none, or one this version
    cannot read (logged: status then shows those shards "not published" rather than failing)."""
    if not blob:
        return {}
    try:
        doc = json.loads(zlib.decompress(blob))
        if doc.get("v") != _VERSION:
            raise ValueError(f"version {doc.get('v')!r}")
        return {
            (stream, shard_id): ShardLag(
                None if lag is None else int(lag), None if seq is None else str(seq), int(age)
            )
            for stream, shards in doc["s"].items()
            for shard_id, (lag, age, seq) in shards.items()
        }
    except (ValueError, TypeError, KeyError, AttributeError, zlib.error) as exc:
        logger.warning("unreadable progress attribute (%d bytes): %r", len(blob), exc)
        return {}
