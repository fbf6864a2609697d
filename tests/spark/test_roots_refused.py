"""Roots and payload columns the jobs refuse before they read anything: roots Hadoop or Spark reads as more
than one folder (a glob character, a comma), roots that are one folder through a symlink, and a payload column
named twice. All but the last test are pure argument checks: no Spark session starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import types as T

from spark_jobs import aggregate, compact, storage
from spark_jobs.transforms import CURATED_COLUMNS, payload_struct

HOURS = ["--start", "2026-11-21T01", "--end", "2026-11-21T01"]


def _refused(job: Any, argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one line ``job.parse_args(argv)`` prints as it exits 2."""
    with pytest.raises(SystemExit) as caught:
        job.parse_args([*argv, *HOURS])
    err = capsys.readouterr().err
    assert caught.value.code == 2 and len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize(
    ("roots", "words"),
    [
        # binaryFiles (the corrupt-object check) read this as two paths, "t19/lake" and "v2/raw"
        (["--input", "t19/lake,v2/raw", "--output", "cur", "--quarantine", "q"],
         "--input 't19/lake,v2/raw': Spark reads , in a path as a separator of paths"),
        (["--input", "raw", "--output", "cur,v2", "--quarantine", "q"], "--output 'cur,v2': Spark reads ,"),
        # the recovery's <root>/_trash-* under 'c?r' is also cur's trash: it moved cur's partitions into c?r
        (["--input", "raw", "--output", "t17/c?r", "--quarantine", "q"], "--output 't17/c?r': Hadoop reads ?"),
        (["--input", "t3/r?w", "--output", "cur", "--quarantine", "q"], "--input 't3/r?w': Hadoop reads ?"),
        (["--input", "raw", "--output", "cur", "--quarantine", "q*"], "--quarantine 'q*': Hadoop reads *"),
        (["--input", "r\\aw", "--output", "cur", "--quarantine", "q"], "--input 'r\\\\aw': Hadoop reads \\"),
        (["--input", "raw", "--output", "c{a,b}", "--quarantine", "q"],
         "--output 'c{a,b}': Hadoop reads { } in a path as a pattern and Spark reads , in a path"),
    ],
)  # fmt: skip
def test_a_root_with_a_glob_character_or_a_comma_is_refused_naming_its_flag(roots, words, capsys):
    assert words in _refused(compact, roots, capsys)


def test_the_aggregation_refuses_them_too(capsys):
    comma = _refused(aggregate, ["--input", "cur,v2", "--output", "m"], capsys)
    assert "--input 'cur,v2': Spark reads ," in comma
    pattern = _refused(aggregate, ["--input", "cur", "--output", "m?"], capsys)
    assert "--output 'm?': Hadoop reads ?" in pattern


def test_characters_hadoop_reads_as_they_are_still_work(tmp_path, monkeypatch):
    """Spaces, ``%``, ``#``, ``+``, ``=`` and non-ASCII letters are no pattern: accepted."""
    monkeypatch.chdir(tmp_path)
    options = compact.parse_args(
        ["--input", "my raw/%20#x", "--output", "cur+é=1", "--quarantine", "q ü", *HOURS]
    )
    assert (options.input, options.output, options.quarantine) == ("my raw/%20#x", "cur+é=1", "q ü")


@pytest.fixture
def linked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``tmp_path`` as the working folder, holding ``cur/`` and ``cur-link`` -> ``cur``."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cur").mkdir()
    (tmp_path / "cur-link").symlink_to("cur")
    return tmp_path


@pytest.mark.parametrize(
    ("roots", "words"),
    [
        # the audit's case: the quarantine over the curated table through a symlink
        (["--input", "raw", "--output", "cur", "--quarantine", "cur-link"],
         "--output and --quarantine are the same folder ({tmp}/cur)"),
        # an absolute spelling, and a file: URI, of the link
        (["--input", "raw", "--output", "{tmp}/cur-link/", "--quarantine", "file://{tmp}/cur"],
         "--output and --quarantine are the same folder ({tmp}/cur)"),
        # roots not created yet, under the link: the existing part is resolved, the rest appended
        (["--input", "raw", "--output", "cur", "--quarantine", "cur-link/q/new"],
         "--quarantine is inside --output ({tmp}/cur/q/new in {tmp}/cur)"),
        (["--input", "cur-link/raw", "--output", "cur/raw/", "--quarantine", "q"],
         "--input and --output are the same folder ({tmp}/cur/raw)"),
        # .. is taken as text first, as Hadoop's Path does: cur-link/x/.. is cur-link
        (["--input", "raw", "--output", "cur-link/x/../t", "--quarantine", "cur/t/q"],
         "--quarantine is inside --output ({tmp}/cur/t/q in {tmp}/cur/t)"),
    ],
)  # fmt: skip
def test_roots_that_are_one_folder_through_a_symlink_are_refused(roots, words, linked, capsys):
    tmp = linked.resolve()
    err = _refused(compact, [root.format(tmp=linked) for root in roots], capsys)
    assert words.format(tmp=tmp) in err, err
    assert sorted(p.name for p in linked.iterdir()) == ["cur", "cur-link"]  # nothing created


def test_the_aggregation_compares_roots_through_symlinks_too(linked, capsys):
    err = _refused(aggregate, ["--input", "cur-link", "--output", "cur/metrics"], capsys)
    assert "--output is inside --input" in err


def test_a_symlink_to_another_folder_is_another_root(linked):
    (linked / "q").mkdir()
    (linked / "q-link").symlink_to("q")
    options = compact.parse_args(["--input", "raw", "--output", "cur-link", "--quarantine", "q-link", *HOURS])
    assert (options.output, options.quarantine) == ("cur-link", "q-link")


@pytest.mark.parametrize(
    "names", [("qty", "qty"), ("amount", "AMOUNT"), ("a", "b", "A")], ids=["same", "case", "third"]
)
def test_payload_columns_naming_one_column_twice_are_refused(names):
    """Spark's names are case-blind: ``amount`` and ``AMOUNT`` are one column, which from_json could not
    resolve (AMBIGUOUS_REFERENCE_TO_FIELDS, a traceback, exit 1)."""
    struct = T.StructType([T.StructField(name, T.StringType()) for name in names])
    with pytest.raises(ValueError, match="name one column more than once") as caught:
        payload_struct(struct, CURATED_COLUMNS)
    repeated = [name for name in names if name.lower() == names[0].lower()]
    assert str(caught.value).startswith(f"payload columns {repeated} ")
    assert "\n" not in str(caught.value)


def test_payload_columns_that_differ_are_kept():
    struct = T.StructType([T.StructField("qty", T.LongType()), T.StructField("qty2", T.StringType())])
    assert payload_struct(struct, CURATED_COLUMNS) is struct


def test_the_output_staging_refuses_a_root_holding_a_pattern(tmp_path):
    """Staging globs ``<root>/_trash-*`` to put back a crashed commit's partitions: under ``c?r`` that is also
    ``cur``'s trash, whose partitions it used to move into ``c?r``. It refuses such a root before it lists
    anything (no Spark call: the session is not even looked at)."""
    trash = tmp_path / "cur" / "_trash-0123456789ab" / "date=2026-11-21" / "hour=02"
    trash.mkdir(parents=True)
    (trash / "part-0.parquet").write_bytes(b"table A")
    with pytest.raises(ValueError, match=r"output root '.*/c\?r': Hadoop reads \?"):
        storage.Staging(None, [str(tmp_path / "c?r")])  # type: ignore[arg-type]
    assert (trash / "part-0.parquet").read_bytes() == b"table A"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cur"]


@pytest.mark.spark
def test_payload_columns_naming_one_column_twice_are_one_line_and_exit_2(spark, tmp_path, capsys):
    """Through the job's entry point (Spark parses the list): one line, exit 2, nothing written."""
    roots = ["--input", str(tmp_path / "raw"), "--output", str(tmp_path / "cur")]
    roots += ["--quarantine", str(tmp_path / "q")]
    for columns, repeated in [("qty BIGINT, qty STRING", "['qty', 'qty']"), ("amount DECIMAL(38,20), AMOUNT STRING", "['amount', 'AMOUNT']")]:  # fmt: skip
        assert compact.main([*roots, *HOURS, "--payload-columns", columns]) == 2
        err = capsys.readouterr().err
        assert f"compact: error: payload columns {repeated} name one column more than once" in err
        assert len([x for x in err.splitlines() if "error" in x]) == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == []
