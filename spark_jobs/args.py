"""The jobs' command lines before Spark starts (pure Python): one-line errors, and the roots of a run."""

from __future__ import annotations

import argparse
import os
import posixpath
import sys
from collections.abc import Mapping
from itertools import combinations
from typing import NoReturn
from urllib.parse import urlsplit

__all__ = ["OneLineParser", "check_roots"]


class OneLineParser(argparse.ArgumentParser):
    """argparse whose errors are one line on stderr (exit 2), without the usage block."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


# Hadoop reads these in a path as a glob pattern ([abc], {a,b}): a root holding one matches no folder, or
# other folders, so the job would read nothing or write where it does not look again.
_PATTERN_CHARACTERS = frozenset("[]{}")


def _folder(root: str) -> str:
    """The folder ``root`` names, in one form for comparing roots: a local root (a plain path, relative or not,
    or a ``file:`` URI) as an absolute, normalized path; any other URI with its path normalized (``s3a://``
    and ``s3n://`` are ``s3://``)."""
    parts = urlsplit(root)
    if len(parts.scheme) <= 1 or parts.scheme == "file":  # no scheme (a one-letter one is a drive)
        local = root if len(parts.scheme) <= 1 else parts.path
        return os.path.abspath(os.path.normpath(local or "."))
    scheme = "s3" if parts.scheme in ("s3a", "s3n") else parts.scheme
    path = posixpath.normpath(parts.path) if parts.path.strip("/") else ""
    return f"{scheme}://{parts.netloc}{path}".rstrip("/")


def check_roots(roots: Mapping[str, str]) -> None:
    """``roots`` (flag -> root) of one run: no root is empty or holds ``[ ] { }``, and no two are the same
    folder or one inside the other, however each is written (``cur`` and ``/work/cur``, ``file:///x`` and
    ``/x``): a quarantine written over the curated table would replace its partitions; a table under another
    would be read as part of it. ``ValueError`` names the flags."""
    for flag, root in roots.items():
        if not root.strip():
            raise ValueError(f"{flag} is empty: give a folder")
        if bad := sorted(set(root) & _PATTERN_CHARACTERS):
            raise ValueError(
                f"{flag} {root!r}: Hadoop reads {' '.join(bad)} in a path as a pattern; use a folder without them"
            )
    folders = {flag: _folder(root) for flag, root in roots.items()}
    for (a, ra), (b, rb) in combinations(folders.items(), 2):
        if ra == rb:
            raise ValueError(f"{a} and {b} are the same folder ({ra}): give each its own")
        if rb.startswith(ra + "/") or ra.startswith(rb + "/"):
            inner, outer = (b, a) if rb.startswith(ra + "/") else (a, b)
            raise ValueError(
                f"{inner} is inside {outer} ({folders[inner]} in {folders[outer]}): give each its own"
            )
