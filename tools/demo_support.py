"""Plumbing for the demo: its fleet and S3 transfers."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.fleet.runner import Fleet

__all__ = ["DemoFleet", "count_objects", "download_prefix", "upload_tree"]


@dataclass
class DemoFleet(Fleet):
    """A :class:`Fleet` whose event lines show seconds since the demo began, and whose producer writes
    ``key_count`` partition keys (rounded up to a multiple of its batch) over and over: record ``n`` has key
    ``k<n mod keys>``, so a key keeps its slot in a call, hence its shard (the benchmark's producer puts one
    record into each slice of the hash-key space), and each key has a newest record."""

    began: float = 0.0  # epoch seconds
    key_count: int = 20
    #: (shard, sequence number) -> (partition key, data) of every record produced.
    keyed: dict[tuple[str, str], tuple[str, bytes]] = field(default_factory=dict)

    def partition_key(self, n: int, batch: int) -> str:
        return f"k{n % (math.ceil(self.key_count / batch) * batch)}"

    def note_produced(self, shard: str, sequence: str, key: str, data: bytes) -> None:
        self.keyed[(shard, sequence)] = (key, data)

    def produced_records(self) -> list[tuple[str, str, str, bytes]]:
        """(shard, sequence number, partition key, data) of every record the producer wrote."""
        return [(shard, seq, *self.keyed[(shard, seq)]) for shard, seq, _ in self.produced]

    def mark(self, label: str) -> float:
        t = time.time()
        self.events.append((t, label))
        print(f"  [{t - self.began:5.1f}s] {label}", flush=True)
        return t

    def live_workers(self) -> list[str]:
        """The workers still running."""
        return [w for w, p in self.procs.items() if p.poll() is None]

    def lease_holder(self, candidates: list[str]) -> str:
        """The candidate that delivered the most shards last (so holds leases now), else the first."""
        owners = self.last_owners(time.time())
        return max(candidates, key=lambda w: len(owners.get(w, [])))


def _objects(s3: Any, bucket: str, prefix: str = "") -> list[dict[str, Any]]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return [obj for page in pages for obj in page.get("Contents", [])]


def count_objects(s3: Any, bucket: str) -> int:
    """How many objects ``bucket`` holds."""
    return len(_objects(s3, bucket))


def download_prefix(s3: Any, bucket: str, prefix: str, into: Path) -> int:
    """Copy every object under ``prefix`` to ``into/<key without the prefix>``; returns how many there were."""
    objects = _objects(s3, bucket, prefix)
    for obj in objects:
        target = into / obj["Key"].removeprefix(prefix)
        target.parent.mkdir(parents=True, exist_ok=True)
        s3.download_file(bucket, obj["Key"], str(target))
    return len(objects)


def upload_tree(s3: Any, bucket: str, root: Path, prefix: str) -> int:
    """Upload the files under ``root`` (not Hadoop's ``.crc`` side files) to ``prefix/<relative path>``."""
    files = [p for p in sorted(root.rglob("*")) if p.is_file() and not p.name.endswith(".crc")]
    for path in files:
        s3.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(root).as_posix()}")
    return len(files)
