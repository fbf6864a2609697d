"""The package's public surface: every exported name, and every public method of an exported class, says
what it is (a docstring); the version is one value everywhere."""

from __future__ import annotations

import importlib
import inspect
import os
import socket
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

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


def test_every_exported_name_is_found_lazily_and_is_its_modules_own() -> None:
    exports = consumer._EXPORTS  # the table behind the lazy names
    assert set(consumer.__all__) == {*exports, "__version__"}
    for name, module in exports.items():
        assert getattr(consumer, name) is getattr(importlib.import_module(module), name), name
    assert set(consumer.__all__) <= set(dir(consumer))
    with pytest.raises(AttributeError, match="no attribute 'NoSuchName'"):
        consumer.NoSuchName  # type: ignore[attr-defined]  # noqa: B018


def test_the_cli_starts_without_boto3_or_the_worker_until_a_command_needs_them() -> None:
    probe = (
        "import sys\n"
        "from consumer.cli import main\n"
        "code = main(sys.argv[1:])\n"
        "heavy = sorted(m for m in ('boto3', 'botocore', 'consumer.lifecycle.worker') if m in sys.modules)\n"
        "print(code, ','.join(heavy) or 'none')\n"
    )

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]  # nothing listens there once the block ends

    def run(*args: str) -> str:
        env = {
            **os.environ,
            "CONSUMER_LOG_LEVEL": "ERROR",
            "CONSUMER_HEALTH_FILE": "/nonexistent/health",
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{closed}",
            "AWS_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
        }
        out = subprocess.run(
            [sys.executable, "-c", probe, *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )
        return out.stdout.strip().splitlines()[-1]

    # a health check (every few seconds in a container), and a setting refused before anything is called
    assert run("health") == "1 none"
    assert run("status", "--lease-duration", "-1") == "2 none"
    # a command that calls AWS imports what it needs; an endpoint that does not answer is exit 4 as ever
    assert run("status", "--lease-table", "l", "--checkpoint-table", "c") == "4 boto3,botocore"
