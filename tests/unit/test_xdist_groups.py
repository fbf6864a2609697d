"""``make test``'s grouping (``-n N --dist loadgroup``, tests/conftest.py) run by the pinned pytest and
pytest-xdist: every test of a group in one process. Under pytest 9 with xdist
3.8 the groups were silently ignored (xdist names the group on an attribute pytest 9 no longer reads)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

_TESTS = "\n".join(f"def test_{i}() -> None:\n    assert True\n" for i in range(6))


def test_a_groups_tests_share_one_process(tmp_path: Path) -> None:
    # A miniature suite laid out like tests/: a spark tier, and other tests wherever a process is free.
    (tmp_path / "conftest.py").write_text(
        f"import sys\nsys.path.insert(0, {str(REPO)!r})\n"
        "from tests.conftest import pytest_collection_modifyitems  # noqa: F401\n"
    )
    for folder in ("spark", "other"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / f"test_{folder}.py").write_text(_TESTS)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "3", "--dist", "loadgroup", "-v", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ran = re.findall(r"^\[(gw\d+)\] \[\s*\d+%\] PASSED (\S+)", done.stdout, re.M)
    assert len(ran) == 12, done.stdout[-3000:]
    spark = [(worker, test) for worker, test in ran if test.startswith("spark/")]
    assert len(spark) == 6 and all(test.endswith("@spark") for _, test in spark)
    assert len({worker for worker, _ in spark}) == 1, spark  # one process: one JVM


def test_the_second_spark_jvm_names_spark_modules_that_exist() -> None:
    from tests.conftest import _SPARK_B

    spark = {p.name for p in (REPO / "tests" / "spark").glob("test_*.py")}
    # A renamed module would fall back to the first JVM; every module there would leave the first empty.
    assert _SPARK_B.issubset(spark), sorted(_SPARK_B - spark)
    assert spark - _SPARK_B
