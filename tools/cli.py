"""Command lines of the benchmarks and tools (``python -m bench.<x>``, ``python -m tools.demo``) in the form of
the product's CLI: a bad flag or value is one line on stderr naming it, exit 2, no usage block or traceback."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Final

from consumer.cli import OneLineParser as Parser

__all__ = ["COUNT", "SECONDS", "Parser", "at_least"]


def at_least(low: float, kind: type[float] = int, *, above: bool = False) -> Callable[[str], float]:
    """An argparse ``type``: a finite ``kind`` (``int`` or ``float``) of at least ``low`` (``above``: more)."""
    noun, bound = (
        "an integer" if kind is int else "a number",
        f"{'more than' if above else 'at least'} {low:g}",
    )

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {noun}") from None
        if not math.isfinite(value) or value < low or (above and value == low):
            raise argparse.ArgumentTypeError(f"{text} is not {noun} of {bound}")
        return value

    return parse


COUNT: Final = at_least(1)  # records, runs, shards ...
SECONDS: Final = at_least(0, float, above=True)
