"""Plumbing for the demo: the fleet with demo-style progress lines, a progress ticker, S3 transfers and
stopping child processes within a bounded time."""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tools.fleet.runner import Fleet

__all__ = [
    "DemoFleet",
    "ProgressTicker",
    "download_prefix",
    "lease_owners",
    "stop_process_group",
    "stop_workers",
    "upload_tree",
]


class DemoFleet(Fleet):
    """A :class:`Fleet` whose event lines show seconds since the demo began instead of wall-clock time, and
    whose producer writes a fixed set of partition keys over and over (so a key has a newest record).

    The producer is the benchmark's (every PutRecords call puts one record into each slice of the hash-key
    space, explicitly), except that record ``n`` has partition key ``k<n mod keys>``, where ``keys`` is
    :attr:`key_count` rounded up to a multiple of the batch size: a key is always in the same slot of a call,
    so always on the same shard, as Kinesis routes a partition key. :attr:`keyed` keeps each produced
    record's key and data."""

    began: float = 0.0  # epoch seconds; set by the demo
    key_count: int = 20  # distinct partition keys (rounded up to a multiple of the batch); set by the demo
    keyed: dict[tuple[str, str], tuple[str, bytes]]  # (shard, sequence number) -> (partition key, data)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.keyed = {}

    def partition_key(self, n: int, batch: int) -> str:
        return f"k{n % (math.ceil(max(1, self.key_count) / batch) * batch)}"

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
        return [w for w, p in self.procs.items() if p.poll() is None]

    def lease_holders(self, candidates: list[str]) -> list[str]:
        """``candidates`` that delivered a shard last (so hold a lease now), most shards first."""
        owners = self.last_owners(time.time())
        holding = [w for w in candidates if owners.get(w)]
        return sorted(holding, key=lambda w: -len(owners[w]))


def stop_workers(fleet: Fleet, timeout: float) -> dict[str, int]:
    """SIGTERM every live worker (graceful: flush, final checkpoint, hand over), SIGKILL what is left after
    ``timeout`` seconds; returns each stopped worker's exit code."""
    alive = {w: p for w, p in fleet.procs.items() if p.poll() is None}
    for p in alive.values():
        with contextlib.suppress(ProcessLookupError):
            p.send_signal(signal.SIGCONT)
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    codes: dict[str, int] = {}
    for w, p in alive.items():
        try:
            codes[w] = p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            codes[w] = p.wait()
    return codes


def stop_process_group(proc: subprocess.Popen[bytes] | None, timeout: float = 5.0) -> None:
    """Stop a child started with ``start_new_session=True`` and everything in its group (e.g. Spark's JVM)."""
    if proc is None:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            proc.poll()
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                return
            except PermissionError:
                pass
            time.sleep(0.05)
    proc.poll()


def lease_owners(ddb: Any, table: str) -> dict[str, tuple[str | None, int]]:
    """shard id -> (owner, epoch) from one consistent scan of the lease table."""
    out: dict[str, tuple[str | None, int]] = {}
    for page in ddb.get_paginator("scan").paginate(TableName=table, ConsistentRead=True):
        for item in page["Items"]:
            if "shard_id" in item:
                owner = item.get("owner", {}).get("S")
                out[item["shard_id"]["S"]] = (owner, int(item.get("epoch", {}).get("N", "0")))
    return out


def count_objects(s3: Any, bucket: str, prefix: str = "") -> int:
    return sum(
        page.get("KeyCount", 0)
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    )


def download_prefix(s3: Any, bucket: str, prefix: str, into: Path) -> int:
    """Copy every object under ``prefix`` to ``into/<key>``; returns the number of objects."""
    n = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            target = into / obj["Key"]
            target.parent.mkdir(parents=True, exist_ok=True)
            s3.download_file(bucket, obj["Key"], str(target))
            n += 1
    return n


def upload_tree(s3: Any, bucket: str, root: Path, prefix: str) -> int:
    """Upload the files under ``root`` (not Hadoop's ``.crc`` side files) to ``prefix/<relative path>``."""
    n = 0
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.name.endswith(".crc"):
            s3.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(root).as_posix()}")
            n += 1
    return n


class ProgressTicker:
    """Prints ``status()`` every ``every`` seconds from a daemon thread until stopped."""

    def __init__(self, every: float, status: Callable[[], str], began: float) -> None:
        self._every = every
        self._status = status
        self._began = began
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="demo-progress")

    def start(self) -> ProgressTicker:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(5)

    def _loop(self) -> None:
        while not self._stop.wait(self._every):
            try:
                line = self._status()
            except Exception as exc:  # the emulators may be going away; progress is best effort
                line = f"(status unavailable: {type(exc).__name__})"
            if not self._stop.is_set():
                print(f"  [{time.time() - self._began:5.1f}s]   .. {line}", flush=True)
