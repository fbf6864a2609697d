"""Imports go one way: bench/ may use tools/, tools/ never imports bench/, and no test imports bench/.

What the tests share with the benchmarks lives in tools/ (or in the tests' own support modules), so that a
benchmark can change without breaking a test and the demo never needs the benchmarks. The imports are read
with ``ast`` (nothing is executed), including those inside functions.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def imported_modules(path: Path) -> set[str]:
    """Every absolute module name ``path`` imports, anywhere in it (relative imports stay in their package)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def imports_bench(path: Path) -> list[str]:
    return sorted(n for n in imported_modules(path) if n == "bench" or n.startswith("bench."))


def _modules(folder: str) -> list[Path]:
    found = sorted((ROOT / folder).rglob("*.py"))
    assert found, f"no modules under {folder}/"
    return found


@pytest.mark.parametrize("folder", ["tools", "tests"])
def test_no_module_imports_bench(folder: str) -> None:
    offenders = {str(p.relative_to(ROOT)): imports_bench(p) for p in _modules(folder)}
    assert {p: n for p, n in offenders.items() if n} == {}


def test_the_walk_sees_imports_at_any_depth(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "import os\n"
        "from . import bench\n"
        "def f():\n"
        "    import bench.fleet\n"
        "    from bench.coordination import report\n"
        "from benchmarks import x\n"
    )
    assert imports_bench(module) == ["bench.coordination", "bench.fleet"]


@pytest.mark.parametrize("module", ["tools.fleet.runner", "tools.demo", "tools.demo_spark"])
def test_modules_that_start_processes_in_the_repository_find_its_root(module: str) -> None:
    """Worker processes run with the repository as their working directory, so that ``tools`` imports there
    (the demo's processor is ``tools.demo_processor``): a module moved to another depth must not lose it."""
    assert importlib.import_module(module).REPO == ROOT
