"""The package's public surface: every exported name, and every public method of an exported class, says
what it is (a docstring); the version is one value everywhere."""

from __future__ import annotations

import inspect
import tomllib
from pathlib import Path

import consumer
from consumer.cli import parser

REPO = Path(__file__).resolve().parents[2]


def _undocumented(name: str, obj: object) -> list[str]:
    missing = [] if inspect.getdoc(obj) else [name]
    if inspect.isclass(obj):
        for attr, member in vars(obj).items():
            if attr.startswith("_"):
                continue
            target = getattr(member, "__func__", None) or getattr(member, "fget", None) or member
            if callable(target) and not target.__doc__:
                missing.append(f"{name}.{attr}")
    return missing


def test_every_public_name_has_a_docstring() -> None:
    missing = [
        m
        for name in consumer.__all__
        if name not in {"SHARD_END", "__version__"}
        for m in _undocumented(name, getattr(consumer, name))
    ]
    assert not missing, f"undocumented public names: {missing}"


def test_the_version_is_one_value() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "consumer._version.__version__"}
    assert parser().parse_known_args(["run"])[0] is not None
    version = [a for a in parser()._actions if "--version" in a.option_strings]
    assert version and version[0].version.endswith(consumer.__version__)  # type: ignore[attr-defined]
