"""Build what spark-submit needs: ``python -m spark_jobs.package dist/spark_jobs.zip``.

Writes the zip (the ``spark_jobs`` package at its root, for ``--py-files``) and, beside it, the entry files
``compact.py`` and ``aggregate.py`` (copies of the package's own, which import everything else from the zip):

    spark-submit --py-files dist/spark_jobs.zip dist/compact.py --input ... --output ...

Entries are sorted and timestamped 1980-01-01, so identical sources give a byte-identical zip.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path

__all__ = ["ENTRY_POINTS", "build", "main"]

#: The job entry files shipped beside the zip.
ENTRY_POINTS = ("compact", "aggregate")
_ZIP_DATE = (1980, 1, 1, 0, 0, 0)
_PACKAGE = Path(__file__).resolve().parent


def build(zip_path: Path, source: Path = _PACKAGE) -> list[Path]:
    """Write the zip and the entry files; returns every file written (the zip first)."""
    zip_path.parent.mkdir(parents=True, exist_ok=True)
    files = sorted(p for p in source.rglob("*") if p.is_file() and p.suffix in {".py", ".typed"})
    files = [p for p in files if "__pycache__" not in p.parts]
    with zipfile.ZipFile(zip_path, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in files:
            info = zipfile.ZipInfo(f"{source.name}/{path.relative_to(source).as_posix()}", _ZIP_DATE)
            info.external_attr = 0o644 << 16
            archive.writestr(info, path.read_bytes(), zipfile.ZIP_DEFLATED)
    written = [zip_path]
    for name in ENTRY_POINTS:
        target = zip_path.parent / f"{name}.py"
        shutil.copyfile(source / f"{name}.py", target)
        written.append(target)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m spark_jobs.package <zip path>``; prints the files written."""
    parser = argparse.ArgumentParser(prog="spark_jobs.package", description="Build the spark-submit bundle.")
    parser.add_argument("zip", type=Path, help="where to write the zip, e.g. dist/spark_jobs.zip")
    ns = parser.parse_args(argv)
    for path in build(ns.zip):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
