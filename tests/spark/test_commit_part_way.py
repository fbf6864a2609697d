"""A commit move that fails part-way, on the real Hadoop local file system of the test session.

Hadoop's local rename falls back to copying and then deleting the source, and an S3 rename copies each object
and then deletes them: either can stop after moving part of a partition and return false. The commit must
move that part back before it undoes the moves made before it, and the next job's recovery must not take an
emptied partition for a committed one (it used to delete the trash, the only copy, on the next run). No Spark
job runs here: the partitions are written by hand and only the Hadoop FileSystem calls are made."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from spark_jobs import storage

pytestmark = pytest.mark.spark

HOUR = "date=2026-11-21/hour=01"


def _snapshot(root: Path) -> dict[str, bytes]:
    """The committed files of ``root`` (the hidden ``_staging-*``/``_trash-*`` folders left out)."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not str(p.relative_to(root)).startswith("_")
    }


def _partition(folder: Path, text: str) -> None:
    folder.mkdir(parents=True)
    for n in (0, 1):
        (folder / f"part-{n}.data").write_bytes(f"{text}, file {n}".encode())


class _RenameStopsPartWay:
    """A Hadoop FileSystem whose first rename into a path containing ``into`` does what the local rename's
    copy-then-delete does when the delete stops part-way: every file reaches the target, the source's first
    file is gone, the rest stay, and it returns false. Every other call goes to the real file system."""

    def __init__(self, fs: Any, into: str, failed: list[str]) -> None:
        self._fs, self._into, self._failed = fs, into, failed

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fs, name)

    def rename(self, source: Any, target: Any) -> bool:
        if self._failed or self._into not in str(target):
            return bool(self._fs.rename(source, target))
        self._failed.append(str(target))
        src, dst = Path(str(source.toUri().getPath())), Path(str(target.toUri().getPath()))
        shutil.copytree(src, dst)
        min(p for p in src.rglob("*") if p.is_file()).unlink()
        return False


@pytest.mark.parametrize(
    "into",
    [
        "/quarantine/_trash-",  # the old partition, aside (the audit's case: the quarantine's hour emptied)
        f"/quarantine/{HOUR}",  # the new partition, into place
    ],
)
def test_a_move_that_stops_part_way_is_moved_back_and_the_outputs_stay_as_they_were(
    spark, lake, monkeypatch, into
):
    curated, quarantine = lake / "curated", lake / "quarantine"
    for root in (curated, quarantine):
        _partition(root / HOUR, f"old {root.name}")
    before = {root: _snapshot(root) for root in (curated, quarantine)}
    staging = storage.Staging(spark, [str(curated), str(quarantine)])
    for root in (curated, quarantine):
        _partition(Path(staging.path(str(root))) / HOUR, f"new {root.name}")
    staged = {root: _snapshot(Path(staging.path(str(root)))) for root in (curated, quarantine)}
    failed: list[str] = []
    real = storage._fs

    def part_way(spark: Any, uri: str) -> tuple[Any, Any]:
        fs, path = real(spark, uri)
        return _RenameStopsPartWay(fs, into, failed), path

    monkeypatch.setattr(storage, "_fs", part_way)

    with pytest.raises(OSError, match="could not rename"):
        staging.commit()

    assert failed, "no rename failed"
    # the curated move made before was undone; the quarantine's part-way move was moved back first
    assert {root: _snapshot(root) for root in (curated, quarantine)} == before
    assert {root: _snapshot(Path(staging.path(str(root)))) for root in (curated, quarantine)} == staged
    staging.abort()
    storage.Staging(spark, [str(curated), str(quarantine)])  # the next job's recovery keeps them
    assert {root: _snapshot(root) for root in (curated, quarantine)} == before
    assert sorted(p.name for p in quarantine.iterdir()) == ["date=2026-11-21"]


@pytest.mark.parametrize(
    "left",
    [(), ("_inputs_listed_at-1700000000000", ".part-0.data.crc")],
    ids=["empty", "hidden-files-only"],
)
def test_a_partition_emptied_by_a_move_cut_short_is_put_back_from_the_trash(spark, lake, left):
    """The state a part-way move aside leaves: the partition in place emptied of its data files (the folder
    itself, or a marker, could not be removed), every file in the trash, no staging (the failed job dropped
    it). The next job's recovery used to see the partition "in place", keep it and delete the trash."""
    root = lake / "quarantine"
    _partition(root / "_trash-0123456789ab" / HOUR, "old quarantine")
    (root / HOUR).mkdir(parents=True)
    for name in left:
        (root / HOUR / name).write_bytes(b"")

    storage.Staging(spark, [str(root)])

    assert _snapshot(root) == {
        f"{HOUR}/part-0.data": b"old quarantine, file 0",
        f"{HOUR}/part-1.data": b"old quarantine, file 1",
    }
    assert sorted(p.name for p in root.iterdir()) == ["date=2026-11-21"]


def test_a_committed_partition_with_data_stays_and_the_trash_goes(spark, lake):
    """The other side: a partition in place with a data file, its run's staging gone, is the new one."""
    root = lake / "curated"
    _partition(root / "_trash-0123456789ab" / HOUR, "old")
    _partition(root / HOUR, "new")

    storage.Staging(spark, [str(root)])

    assert _snapshot(root) == {f"{HOUR}/part-0.data": b"new, file 0", f"{HOUR}/part-1.data": b"new, file 1"}
    assert sorted(p.name for p in root.iterdir()) == ["date=2026-11-21"]


def test_a_move_onto_a_folder_that_exists_is_refused_before_anything_moves(spark, lake):
    """Hadoop moves a folder *into* a folder that exists: a move never does, it fails with both as they were."""
    source, target = lake / "a" / HOUR, lake / "b" / HOUR
    _partition(source, "a")
    _partition(target, "b")
    fs, path = storage._fs(spark, str(source))
    jvm: Any = spark.sparkContext._jvm

    with pytest.raises(OSError, match="exists"):
        storage.move(fs, path, jvm.org.apache.hadoop.fs.Path(str(target)), jvm.org.apache.hadoop.fs.Path)

    assert _snapshot(lake / "a") == {f"{HOUR}/part-0.data": b"a, file 0", f"{HOUR}/part-1.data": b"a, file 1"}
    assert _snapshot(lake / "b") == {f"{HOUR}/part-0.data": b"b, file 0", f"{HOUR}/part-1.data": b"b, file 1"}
