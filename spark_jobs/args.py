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

__all__ = ["OneLineParser", "check_literal", "check_roots"]


class OneLineParser(argparse.ArgumentParser):
    """argparse whose errors are one line on stderr (exit 2), without the usage block."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


# Hadoop reads these in a path as a glob pattern ([abc], {a,b}, *, ?, and \ escaping the next character):
# a root holding one matches no folder, or other folders (``c?r`` is also ``cur``), so the job would read
# nothing or another table, and its recovery (spark_jobs.storage, which globs ``_trash-*`` under its roots)
# would move or delete another table's partitions.
_PATTERN_CHARACTERS = frozenset("[]{}*?\\")
# Spark reads a comma in a path as a separator of paths (SparkContext.binaryFiles, Hadoop's input paths): a
# root holding one is two paths, neither of them the root.
_LIST_SEPARATOR = ","


def _folder(root: str) -> str:
    """The folder ``root`` names, in one form for comparing roots: a local root (a plain path, relative or
    not, or a ``file:`` URI) as an absolute, normalized path with its symlinks resolved; any other URI with its
    path normalized (``s3a://`` and ``s3n://`` are ``s3://``)."""
    parts = urlsplit(root)
    if len(parts.scheme) <= 1 or parts.scheme == "file":  # no scheme (a one-letter one is a drive)
        local = root if len(parts.scheme) <= 1 else parts.path
        # Hadoop's Path normalizes ``..`` as text (x/link/.. is x) before the OS follows symlinks
        return _resolved(os.path.abspath(os.path.normpath(local or ".")))
    scheme = "s3" if parts.scheme in ("s3a", "s3n") else parts.scheme
    path = posixpath.normpath(parts.path) if parts.path.strip("/") else ""
    return f"{scheme}://{parts.netloc}{path}".rstrip("/")


def _resolved(path: str) -> str:
    """The absolute, normalized ``path`` with the symlinks of its longest existing prefix resolved (the rest,
    not created yet, appended as it is): two roots that are one folder through a symlink compare equal."""
    head, rest = path, []
    while not os.path.exists(head) and os.path.dirname(head) != head:
        head, name = os.path.split(head)
        rest.append(name)
    return os.path.join(os.path.realpath(head), *reversed(rest))


def check_literal(flag: str, root: str) -> None:
    """``root`` names one folder to Hadoop and Spark: it holds none of ``[ ] { } * ? \\`` (a glob pattern) nor
    ``,`` (a list of paths); so a glob under it (``<root>/_trash-*``) matches only its own children.
    ``ValueError`` names ``flag``, in one line."""
    reasons = []
    if bad := sorted(set(root) & _PATTERN_CHARACTERS):
        reasons.append(f"Hadoop reads {' '.join(bad)} in a path as a pattern")
    if _LIST_SEPARATOR in root:
        reasons.append(f"Spark reads {_LIST_SEPARATOR} in a path as a separator of paths")
    if reasons:
        raise ValueError(f"{flag} {root!r}: {' and '.join(reasons)}; use a folder without them")


def check_roots(roots: Mapping[str, str]) -> None:
    """``roots`` (flag -> root) of one run: no root is empty or holds a character Hadoop or Spark reads as
    more than a path (:func:`check_literal`), and no two are the same folder or one inside the other, however
    each is written (``cur`` and ``/work/cur``, ``file:///x`` and ``/x``, a symlink and its target): a
    quarantine written over the curated table would replace its partitions; a table under another would be
    read as part of it. ``ValueError`` names the flags."""
    for flag, root in roots.items():
        if not root.strip():
            raise ValueError(f"{flag} is empty: give a folder")
        check_literal(flag, root)
    folders = {flag: _folder(root) for flag, root in roots.items()}
    for (a, ra), (b, rb) in combinations(folders.items(), 2):
        if ra == rb:
            raise ValueError(f"{a} and {b} are the same folder ({ra}): give each its own")
        if rb.startswith(ra + "/") or ra.startswith(rb + "/"):
            inner, outer = (b, a) if rb.startswith(ra + "/") else (a, b)
            raise ValueError(
                f"{inner} is inside {outer} ({folders[inner]} in {folders[outer]}): give each its own"
            )
