"""The compaction's command line as an analyst or an operator runs it (``python -m spark_jobs.compact`` in a
subprocess): the one-hour run the hourly schedule makes, on objects the real sink wrote, and roots that name
the same folders in other spellings."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from consumer.sinks.raw_s3 import encode_line
from spark_jobs import storage
from tests.spark.helpers import HOUR, launcher_args, sink_objects, sink_records

pytestmark = pytest.mark.spark

_ONE_HOUR = ["--start", "2026-11-21T01", "--end", "2026-11-21T01"]


def _run(job: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")}
    env.update(PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    # The settings that make tiny jobs fast, given as an analyst's own would be: on the launcher's command line
    # (pyspark splits it as a shell does). The job's code and its own session are unchanged.
    env["PYSPARK_SUBMIT_ARGS"] = shlex.join([*launcher_args(), "pyspark-shell"])
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    return subprocess.run(
        [sys.executable, "-m", f"spark_jobs.{job}", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def test_a_one_hour_run_logs_no_java_stack_trace_and_names_the_files_it_does_not_read(spark, lake):
    """The scheduled run covers one hour. Spark used to look for a streaming log under the one glob path it
    was given and log ``java.io.FileNotFoundException: File .../stream=*/date=.../hour=01 does not exist``
    with a stack trace on every such run, a false alarm; and a file in the hour folder that is not a raw
    object (an object re-uploaded uncompressed) was skipped without a word."""
    records = sink_records([b'{"n": 1}', b'{"n": 2}', b"\x00binary"])
    sink_objects(lake, records, epoch=1)
    sink_objects(lake, records[1:], epoch=2)  # a redelivery after a hand-off: other bounds, a second object
    hour = lake / "raw" / "stream=orders" / HOUR
    uncompressed = hour / "shardId-000000000001_9_0_9_0.jsonl"
    uncompressed.write_bytes(encode_line(records[0], 3) + b"\n")
    (hour / "_SUCCESS").write_bytes(b"")  # hidden: neither read nor named
    (hour / "extra").mkdir()  # a folder: not a file of the hour
    roots = ["--input", str(lake / "raw"), "--output", str(lake / "curated")]

    done = _run("compact", [*roots, "--quarantine", str(lake / "quarantine"), *_ONE_HOUR], lake)

    assert done.returncode == 0, done.stderr[-3000:]
    assert "Exception" not in done.stderr and "Traceback" not in done.stderr, done.stderr[-3000:]
    [found] = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    summary = json.loads(found)
    assert (summary["lines"], summary["curated"], summary["duplicates"], summary["malformed"]) == (5, 3, 2, 0)
    assert summary["ignored_files"] == [f"file:{uncompressed}"]
    assert "1 files in the hour folders are not raw objects (*.jsonl.gz) and are not read" in done.stderr
    rows = spark.read.parquet(str(lake / "curated")).collect()
    assert sorted((r.sequence_number[-1:], r.epoch, r.payload) for r in rows) == [
        ("0", 1, '{"n": 1}'),
        ("1", 1, '{"n": 2}'),
        ("2", 1, None),
    ]


@pytest.mark.parametrize(
    ("job", "roots", "words"),
    [
        # a relative root and an absolute one inside it
        ("compact", ["--input", "raw", "--output", "cur", "--quarantine", "{tmp}/cur/q"], "--quarantine is inside --output"),
        # a file: URI and a plain path of the same folder
        ("compact", ["--input", "raw", "--output", "file://{tmp}/cur", "--quarantine", "{tmp}/cur"], "--output and --quarantine are the same folder"),
        # a path that goes up and down again
        ("compact", ["--input", "raw", "--output", "{tmp}/x/../cur", "--quarantine", "cur/q"], "--quarantine is inside --output"),
        ("compact", ["--input", "", "--output", "cur", "--quarantine", "q"], "--input is empty"),
        ("aggregate", ["--input", "./cur", "--output", "{tmp}/cur/metrics"], "--output is inside --input"),
    ],
)  # fmt: skip
def test_roots_are_compared_as_the_folders_they_name(job, roots, words, tmp_path):
    """A quarantine written inside the curated table makes the table unreadable (Spark: conflicting directory
    structures): refused however the roots are spelled, in one line, exit 2, before Spark starts."""
    args = [root.format(tmp=tmp_path) for root in roots]
    done = _run(job, [*args, *_ONE_HOUR], tmp_path)
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert words in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr
    assert not (tmp_path / "cur").exists()


def test_a_partition_moved_in_only_in_part_is_replaced_by_the_old_one(spark, lake):
    """On S3 a move copies object by object: a job killed while moving a new partition in leaves it in part
    (one of its two files here), the old one in the trash and the new one still in the run's staging. The next
    job puts the old, complete partition back; it used to keep the part and delete the old one."""
    root = lake / "curated"
    hour = "date=2026-11-21/hour=01"
    (root / "_trash-cut" / hour).mkdir(parents=True)
    (root / "_trash-cut" / hour / "part-0.parquet").write_bytes(b"old rows")
    (root / "_staging-cut" / hour).mkdir(parents=True)
    (root / "_staging-cut" / hour / "part-1.parquet").write_bytes(b"new rows, second file")
    (root / hour).mkdir(parents=True)
    (root / hour / "part-0.parquet").write_bytes(b"new rows, first file")

    storage.Staging(spark, [str(root)])

    assert {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()} == {
        f"{hour}/part-0.parquet": b"old rows"
    }
