"""The Makefile's type check covers what pyproject.toml says mypy checks (it runs it in two halves)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _make_variable(name: str) -> list[str]:
    match = re.search(rf"^{name} := (.*)$", (REPO / "Makefile").read_text(), re.MULTILINE)
    assert match, f"{name} is not set in the Makefile"
    return match.group(1).split()


def test_the_two_type_check_halves_are_exactly_the_configured_files() -> None:
    configured = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]["files"]
    halves = _make_variable("MYPY_APP") + _make_variable("MYPY_STACKS")
    assert sorted(halves) == sorted(configured)
    assert len(halves) == len(set(halves))
