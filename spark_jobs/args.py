"""The jobs' command lines before Spark starts (pure Python): one-line errors, and the roots of a run."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from itertools import combinations
from typing import NoReturn

__all__ = ["OneLineParser", "check_roots"]


class OneLineParser(argparse.ArgumentParser):
    """argparse whose errors are one line on stderr (exit 2), without the usage block."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


# Hadoop reads these in a path as a glob pattern ([abc], {a,b}): a root holding one matches no folder, or
# other folders, so the job would read nothing or write where it does not look again.
_PATTERN_CHARACTERS = frozenset("[]{}")


def check_roots(roots: Mapping[str, str]) -> None:
    """``roots`` (flag -> root) of one run: no root holds ``[ ] { }``, and no two are the same folder or one
    inside the other (a quarantine written over the curated table would replace its partitions; a table
    under another would be read as part of it). ``ValueError`` names the flags."""
    for flag, root in roots.items():
        if bad := sorted(set(root) & _PATTERN_CHARACTERS):
            raise ValueError(
                f"{flag} {root!r}: Hadoop reads {' '.join(bad)} in a path as a pattern; use a folder without them"
            )
    folders = {flag: root.rstrip("/") for flag, root in roots.items()}
    for (a, ra), (b, rb) in combinations(folders.items(), 2):
        if ra == rb:
            raise ValueError(f"{a} and {b} are the same folder ({ra}): give each its own")
        if rb.startswith(ra + "/") or ra.startswith(rb + "/"):
            inner, outer = (b, a) if rb.startswith(ra + "/") else (a, b)
            raise ValueError(
                f"{inner} is inside {outer} ({folders[inner]} in {folders[outer]}): give each its own"
            )
