"""The Makefile's type check covers what pyproject.toml says mypy checks (it runs it in two halves), and
follows every aws_cdk module the stacks use."""

from __future__ import annotations

import ast
import importlib.util
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


def _cdk_modules_imported() -> set[str]:
    """The aws_cdk modules that stacks/ and app.py import (``from aws_cdk import aws_x``, ``import aws_cdk.x``,
    ``from aws_cdk.x import ...``, or ``cdk.aws_x`` on an imported ``aws_cdk``)."""
    spec = importlib.util.find_spec("aws_cdk")
    assert spec is not None and spec.submodule_search_locations
    package = Path(next(iter(spec.submodule_search_locations)))
    submodules = {p.name for p in package.iterdir() if (p / "__init__.py").is_file()}
    found: set[str] = set()
    for source in [*sorted((REPO / "stacks").rglob("*.py")), REPO / "app.py"]:
        tree = ast.parse(source.read_text(), str(source))
        aliases: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for name in node.names:
                    if name.name.split(".")[0] == "aws_cdk":
                        found.add(name.name)
                        aliases.add(name.asname or "aws_cdk")
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "aws_cdk":
                assert node.module is not None
                found.update(
                    f"aws_cdk.{n.name}" if node.module == "aws_cdk" and n.name in submodules else node.module
                    for n in node.names
                )
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and node.attr in submodules
            ):
                found.add(f"aws_cdk.{node.attr}")
    return found


def test_the_stacks_type_check_follows_exactly_the_aws_cdk_modules_they_import() -> None:
    """mypy skips aws_cdk's modules but the ones pyproject.toml lists: a module the stacks import that is not
    listed would be Any to mypy (nothing about its use checked), so the list must be exactly the imports."""
    overrides = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]["overrides"]
    by_mode: dict[str, list[str]] = {}
    for override in overrides:
        if "follow_imports" in override:
            by_mode.setdefault(override["follow_imports"], []).extend(override["module"])
    assert "aws_cdk.*" in by_mode["skip"]
    followed = [m for m in by_mode["normal"] if m.split(".")[0] == "aws_cdk"]
    assert len(followed) == len(set(followed))
    assert set(followed) == _cdk_modules_imported() | {"aws_cdk"}
