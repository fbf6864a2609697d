"""Spark I/O shared by the job entry files: the session, listing hour partitions, staged partitioned writes.

Paths are Hadoop URIs, so the same code reads ``file://`` (or plain local paths) on a laptop and
``s3://`` on EMR. The globs here (``<root>/_trash-*``, ``<root>/stream=*/...``) put a root in front of a pattern
as it is: a root holding none of ``[ ] { } * ? \\ ,`` (refused by :func:`spark_jobs.args.check_roots` for the
jobs, and by :class:`Staging` itself) names one folder, so each glob matches only that root's own children.

A job writes every output to a staging folder first (``<root>/_staging-<run>``, hidden from readers by its
``_``) and only when all of them are written moves the partitions into place (:func:`commit`); so a job that
fails leaves every output as it was, and one that succeeds replaces each partition it wrote whole.
"""

from __future__ import annotations

import fnmatch
import logging
import uuid
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from spark_jobs.args import check_literal

__all__ = [
    "JOB_SQL_CONF",
    "HourFiles",
    "Staging",
    "check_root",
    "configure",
    "existing",
    "get_session",
    "glob",
    "gzip_error",
    "hour_files",
    "join",
    "move",
    "unreadable_objects",
    "write_partitioned",
]

log = logging.getLogger(__name__)

#: SQL settings every job relies on (set at run time, so they apply to a shared or an EMR session too).
JOB_SQL_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.sources.partitionOverwriteMode": "dynamic",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.variant.allowDuplicateKeys": "false",  # strict JSON: an object with a repeated key is refused
    # The JVM does not JIT-compile a method past 8,000 bytes of bytecode. The compaction's line checks are
    # split into two generated stages to stay under it (rawlines._stage_break; tests/spark/test_codegen.py);
    # should a stage grow past it, Spark runs that stage operator by operator (each projection compiled on
    # its own) instead of interpreting the big method.
    "spark.sql.codegen.hugeMethodLimit": "8000",
}


def configure(spark: SparkSession) -> SparkSession:
    """Apply :data:`JOB_SQL_CONF` to ``spark`` (every job's ``run`` does, whoever built the session)."""
    for key, value in JOB_SQL_CONF.items():
        spark.conf.set(key, value)
    return spark


def get_session(app_name: str) -> SparkSession:
    """The active session (spark-submit, EMR, tests) or a new one, with :data:`JOB_SQL_CONF` applied."""
    return configure(SparkSession.builder.appName(app_name).getOrCreate())


def join(root: str, *parts: str) -> str:
    """``root`` and ``parts`` joined with single slashes (URIs, not OS paths)."""
    return "/".join([root.rstrip("/"), *parts])


def _fs(spark: SparkSession, uri: str) -> tuple[Any, Any]:
    """(Hadoop file system, Hadoop path) of ``uri``."""
    jvm: Any = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(uri)
    return path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), path


def check_root(spark: SparkSession, flag: str, root: str) -> None:
    """``root`` can be a job's input or output: on a file system this Spark knows, a folder or nothing yet.
    ``ValueError`` names ``flag``, in one line."""
    try:
        fs, path = _fs(spark, root)
        is_file = bool(fs.exists(path) and fs.getFileStatus(path).isFile())
    except Exception as err:  # Py4JJavaError: e.g. no FileSystem for the scheme (s3:// off EMR)
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise ValueError(f"{flag} {root!r}: {first}") from None
    if is_file:
        raise ValueError(f"{flag} {root!r} is a file: give a folder")


def existing(spark: SparkSession, patterns: list[str]) -> list[str]:
    """The glob patterns that match at least one path, asking the Hadoop file system of each pattern (built on
    a root that names one folder: see the module's docstring)."""
    found = []
    for pattern in patterns:
        fs, path = _fs(spark, pattern)
        statuses = fs.globStatus(path)
        if statuses is not None and len(statuses) > 0:
            found.append(pattern)
    return found


def glob(spark: SparkSession, pattern: str) -> list[str]:
    """The paths ``pattern`` matches (URIs, sorted), asking its Hadoop file system; none: an empty list. The
    jobs' patterns are built on a root that names one folder (see the module's docstring)."""
    fs, path = _fs(spark, pattern)
    return sorted(str(status.getPath().toString()) for status in fs.globStatus(path) or [])


def gzip_error(content: bytes) -> str | None:
    """Why ``content`` is not complete gzip data, as Hadoop reads it, or None: one or more whole members back
    to back (CRC and length checked) and nothing else: no empty object, no trailing bytes, not even zeros
    (Python's gzip module skips trailing zeros; Hadoop's reader fails on them)."""
    if not content:
        return "empty object: no gzip member"
    rest, members = content, 0
    while rest:
        if rest[:2] != b"\x1f\x8b":
            if not members:
                return "not gzip data: it does not start with a gzip header"
            return f"{len(rest)} bytes after gzip member {members} are not another member"
        member = zlib.decompressobj(wbits=31)  # the gzip wrapper: header, deflate data, CRC and length
        data = rest
        try:
            while not member.eof:
                out = member.decompress(data, 1 << 20)
                data = member.unconsumed_tail
                if not out and not data:
                    break
        except zlib.error as err:
            return f"gzip member {members + 1}: {err}"
        if not member.eof:
            return f"gzip member {members + 1} is cut short"
        rest, members = member.unused_data, members + 1
    return None


@dataclass(frozen=True)
class HourFiles:
    """What the hour folders of a range hold, from one listing of each: see :func:`hour_files`."""

    #: The patterns that match at least one object (file): the hours to read.
    patterns: list[str]
    #: Objects that hold no byte at all: {URI as in ``_metadata.file_path``: why}. Hadoop reads such an object
    #: as empty rather than failing, but it is no gzip data: the sink never writes one, so something cut it short.
    empty: dict[str, str]
    #: Files that the name glob does not match, hidden ones (``_*``, ``.*``, as Spark hides them) left out, as
    #: URIs, sorted: not read (an object re-uploaded uncompressed as ``.jsonl``, a ``.jsonl.gz.tmp``).
    ignored: list[str]
    #: The newest modification time of the objects each pattern of :attr:`patterns` matches, ms since the epoch,
    #: as the file system reports it.
    newest: dict[str, int] = field(default_factory=dict)


def hour_files(spark: SparkSession, patterns: list[str]) -> HourFiles:
    """Sort the files right in the folders of ``patterns`` (``<folder glob>/<name glob>``), listing each folder
    glob once through the Hadoop file system."""
    found, empty, ignored = [], {}, set()
    newest: dict[str, int] = {}
    for pattern in patterns:
        folder, name = pattern.rsplit("/", 1)
        # the folder glob is the jobs' input root (no pattern character, no comma) + stream=*/date=D/hour=H
        fs, path = _fs(spark, join(folder, "*"))
        matched = False
        for status in fs.globStatus(path) or []:
            file, uri = status.getPath().getName(), str(status.getPath().toUri().toString())
            if not status.isFile():
                continue
            if fnmatch.fnmatchcase(file, name):
                matched = True
                newest[pattern] = max(newest.get(pattern, 0), int(status.getModificationTime()))
                if status.getLen() == 0:
                    empty[uri] = "empty object: no gzip member"
            elif not file.startswith(("_", ".")):
                ignored.add(uri)
        if matched:
            found.append(pattern)
    return HourFiles(found, empty, sorted(ignored), newest)


def unreadable_objects(spark: SparkSession, patterns: list[str]) -> dict[str, str]:
    """Objects matched by ``patterns`` that are not complete gzip data: {URI as in ``_metadata.file_path``:
    the error}. Reads every object once more; the jobs call it only after a read failed."""
    context = spark.sparkContext
    # binaryFiles reads a comma as a separator of paths and the rest as globs: the patterns are the input root
    # (which holds neither a comma nor a pattern character) + stream=*/date=D/hour=H/*.jsonl.gz
    files = context.union([context.binaryFiles(pattern) for pattern in patterns])
    checked = files.map(lambda item: (item[0], gzip_error(item[1]) or ""))
    jvm: Any = context._jvm
    return {
        str(jvm.org.apache.hadoop.fs.Path(path).toUri().toString()): error
        for path, error in checked.filter(lambda item: item[1] != "").collect()
    }


class Staging:
    """Outputs of one run, written under ``<root>/_staging-<run>`` and then committed together.

    :meth:`commit` moves each staged ``date=/hour=`` partition of every root into place: the partition in
    place, if any, is first moved to ``<root>/_trash-<run>``, so at every moment a partition is either the old
    one, the new one, or (for the instant between two renames) in the trash, from where :meth:`recover` - run
    at the start of every job - puts it back. A move that fails undoes the moves before it, in every root. One
    job at a time per output root.

    Each root must name one folder (none of ``[ ] { } * ? \\ ,``, ``ValueError`` otherwise): the recovery and
    the commit glob ``_trash-*``, ``_staging-*`` and ``date=*/hour=*`` under it, and must match only its own.
    """

    def __init__(self, spark: SparkSession, roots: Iterable[str]) -> None:
        self.roots = list(roots)
        for root in self.roots:
            check_literal("output root", root)  # the jobs refuse such roots first (spark_jobs.args)
        self.spark = spark
        self.run = uuid.uuid4().hex[:12]
        for root in self.roots:
            self.recover(root)

    def path(self, root: str) -> str:
        """Where the run writes ``root``'s new partitions."""
        return join(root, f"_staging-{self.run}")

    def recover(self, root: str) -> None:
        """Put back partitions a crashed commit left in the trash; drop leftover staging and trash.

        A partition in the trash whose new one is in place stays new, unless that run's staging still holds
        the new one: then its move was cut short (on S3 a move copies object by object, then deletes), the
        partition in place may be in part, and the old one is put back. A partition in place that holds no
        data file (only hidden ones, or none: what a move cut short part-way leaves, its files gone) counts as
        absent, and the one in the trash is put back: no committed partition is without data."""
        fs, base = _fs(self.spark, root)
        jvm: Any = self.spark.sparkContext._jvm
        # The globs below match only this root's own children: it holds no pattern character (__init__).
        for trash in fs.globStatus(jvm.org.apache.hadoop.fs.Path(base, "_trash-*")) or []:
            run = trash.getPath().getName()[len("_trash-") :]
            for part in fs.globStatus(jvm.org.apache.hadoop.fs.Path(trash.getPath(), "date=*/hour=*")) or []:
                relative = f"{part.getPath().getParent().getName()}/{part.getPath().getName()}"
                target = jvm.org.apache.hadoop.fs.Path(base, relative)
                staged = jvm.org.apache.hadoop.fs.Path(base, f"_staging-{run}/{relative}")
                if fs.exists(target) and fs.exists(staged):
                    log.warning(
                        "dropping %s, moved in only in part, for the one in %s", relative, trash.getPath()
                    )
                    fs.delete(target, True)
                elif fs.exists(target) and not _holds_data(fs, target):
                    log.warning(
                        "dropping %s, which holds no data file, for the one in %s", relative, trash.getPath()
                    )
                    fs.delete(target, True)
                if not fs.exists(target):
                    log.warning("restoring %s from %s", relative, trash.getPath())
                    self._move(fs, part.getPath(), target)
            fs.delete(trash.getPath(), True)
        for staged in fs.globStatus(jvm.org.apache.hadoop.fs.Path(base, "_staging-*")) or []:
            fs.delete(staged.getPath(), True)

    def _move(self, fs: Any, source: Any, target: Any) -> None:
        jvm: Any = self.spark.sparkContext._jvm
        move(fs, source, target, jvm.org.apache.hadoop.fs.Path)

    def commit(
        self, drops: Mapping[str, Iterable[tuple[str, str]]] | None = None
    ) -> dict[str, list[tuple[str, str]]]:
        """Commit every root of the run together: each staged partition replaces its root's, and the ``drops``
        (root -> (date, hour) partitions) that have nothing staged are removed. If a move fails, what it moved
        is moved back (:func:`move`), then the moves made so far are undone, last first (the new partitions
        back to staging, the old ones back from the trash), and the error is raised: the outputs stay as they
        were. Returns each root's partitions written."""
        drops = drops or {}
        jvm: Any = self.spark.sparkContext._jvm
        done: list[tuple[Any, Any, Any]] = []  # (file system, from, to) of each move made
        plans = []
        for root in self.roots:
            fs, base = _fs(self.spark, root)
            staged = jvm.org.apache.hadoop.fs.Path(self.path(root))
            parts = {}
            # matches only this run's staged partitions: the root holds no pattern character (__init__)
            for status in fs.globStatus(jvm.org.apache.hadoop.fs.Path(staged, "date=*/hour=*")) or []:
                path = status.getPath()
                parts[(path.getParent().getName()[5:], path.getName()[5:])] = path
            plans.append((root, fs, base, staged, parts))
        try:
            for root, fs, base, _staged, parts in plans:
                trash = jvm.org.apache.hadoop.fs.Path(base, f"_trash-{self.run}")
                for date, hour in sorted(set(parts) | set(drops.get(root, ()))):
                    relative = f"date={date}/hour={hour}"
                    target = jvm.org.apache.hadoop.fs.Path(base, relative)
                    if fs.exists(target):
                        aside = jvm.org.apache.hadoop.fs.Path(trash, relative)
                        self._move(fs, target, aside)
                        done.append((fs, target, aside))
                    if (date, hour) in parts:
                        self._move(fs, parts[(date, hour)], target)
                        done.append((fs, parts[(date, hour)], target))
        except Exception:
            for fs, source, target in reversed(done):
                self._move(fs, target, source)  # if this fails too, recover() puts the trash back next run
            raise
        for _root, fs, base, staged, _parts in plans:
            fs.delete(jvm.org.apache.hadoop.fs.Path(base, f"_trash-{self.run}"), True)
            fs.delete(staged, True)
        return {root: sorted(parts) for root, _fs_, _base, _staged, parts in plans}

    def abort(self) -> None:
        """Drop whatever the run staged (the outputs stay as they were)."""
        for root in self.roots:
            fs, staged = _fs(self.spark, self.path(root))
            fs.delete(staged, True)


def _holds_data(fs: Any, folder: Any) -> bool:
    """Whether ``folder`` holds a data file: one, at any depth, whose name does not start with ``_`` or ``.``
    (markers, ``_SUCCESS`` and checksums do)."""
    files = fs.listFiles(folder, True)
    while files.hasNext():
        if not str(files.next().getPath().getName()).startswith(("_", ".")):
            return True
    return False


def move(fs: Any, source: Any, target: Any, path: Callable[[Any, str], Any]) -> None:
    """Rename ``source`` to ``target``, which must not exist yet, on the Hadoop file system ``fs``; ``path``
    builds a child path (``org.apache.hadoop.fs.Path(parent, name)``).

    A rename that fails may have moved part of ``source``: Hadoop's local rename falls back to copying and
    then deleting the source, an S3 rename copies each object and then deletes them, and either can stop
    part-way and return false. So on failure what reached ``target`` is moved back, file by file (a file
    still in ``source`` is whole, as a copy never changes its source: then the copy is deleted), ``target`` is
    removed, and ``OSError`` is raised: ``source`` is as it was."""
    if fs.exists(target):  # Hadoop would move the source into it
        raise OSError(f"could not rename {source} to {target}: {target} exists")
    fs.mkdirs(target.getParent())
    if fs.rename(source, target):
        return
    if fs.exists(target):
        log.warning("the rename of %s to %s failed part-way: moving back what it moved", source, target)
        _move_back(fs, target, source, path)
    raise OSError(f"could not rename {source} to {target}")


def _move_back(fs: Any, moved: Any, origin: Any, path: Callable[[Any, str], Any]) -> None:
    """Put what a failed rename of ``origin`` left at ``moved`` back into ``origin``; remove ``moved``."""
    if fs.getFileStatus(moved).isFile():
        if fs.exists(origin):  # the copy was made but the original not deleted: the original is whole
            fs.delete(moved, False)
        elif not fs.rename(moved, origin):
            raise OSError(f"could not move {moved} back to {origin}")
        return
    fs.mkdirs(origin)
    for status in fs.listStatus(moved):
        child = status.getPath()
        _move_back(fs, child, path(origin, str(child.getName())), path)
    fs.delete(moved, True)


def write_partitioned(df: DataFrame, path: str, fmt: str, **options: str) -> None:
    """Overwrite only the ``date``/``hour`` partitions present in ``df`` under ``path``.

    Parquet: ``options`` may turn dictionary encoding off for columns whose values are nearly all distinct
    (``{"parquet.enable.dictionary#payload": "false"}``): Parquet would build a dictionary for every page of
    them and throw it away."""
    (
        df.write.format(fmt)
        .mode("overwrite")
        .option("partitionOverwriteMode", "dynamic")
        .options(**options)
        .partitionBy("date", "hour")
        .save(path)
    )
