"""The real amazon-kclpy client (its sdist on PyPI, pinned by version and sha256) for tests and benchmarks.

Only its pure-Python package and its samples are used: its ``setup.py install`` would download the KCL's jars
from Maven, which ``python -m consumer multilang`` replaces."""

from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

__all__ = ["KCLPY_SHA256", "KCLPY_VERSION", "fetch_kclpy"]

KCLPY_VERSION = "3.2.0"
KCLPY_SHA256 = "62e81cc84714c920fe6aa5d61837b298fe7e01f6326dcb564b12ab8e6c4aca4e"


def fetch_kclpy(into: Path) -> Path:
    """Download (hash-checked) and unpack amazon-kclpy's sdist into ``into``; returns the unpacked folder,
    which holds ``amazon_kclpy/`` (put it on PYTHONPATH) and ``samples/``."""
    req = into / "requirements.txt"
    req.write_text(f"amazon-kclpy=={KCLPY_VERSION} --hash=sha256:{KCLPY_SHA256}\n")
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--require-hashes"]
    out = subprocess.run(
        [*pip, "-r", req, "-d", into], capture_output=True, text=True, timeout=300, check=False
    )
    if out.returncode != 0:
        raise RuntimeError(f"pip download amazon-kclpy=={KCLPY_VERSION} failed: {out.stderr.strip()[-2000:]}")
    with tarfile.open(into / f"amazon_kclpy-{KCLPY_VERSION}.tar.gz") as tar:
        tar.extractall(into, filter="data")
    return into / f"amazon_kclpy-{KCLPY_VERSION}"
