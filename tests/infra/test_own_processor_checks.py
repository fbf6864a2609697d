"""A team's own processor project, wrong in the ways a team gets it wrong: ``make synth`` (``python app.py``, the
team's ``cdk.json`` given as CLI context) refuses each in one line naming the ``cdk.json`` key and the file,
instead of the image build failing at deploy or the tasks crash-looping in ECS; and the image build itself
refuses a processor that does not import.

The project lives outside the repository (``processor_project`` relative to cdk.json, as a team's may be).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .conftest import REPO_ROOT, install_image

pytestmark = pytest.mark.infra

KEY = "environments.dev.consumer"
HASH = "--hash=sha256:" + "0" * 64  # synth checks that a line is hashed; the build checks the hash itself
PROCESSOR = "from consumer.sinks.raw_s3 import RawS3Sink\n\n\nclass Proc(RawS3Sink):\n    pass\n"


def _project(root: Path, files: dict[str, str | None]) -> Path:
    base = {
        "pyproject.toml": '[project]\nname = "acme"\nversion = "1"\ndependencies = ["msgpack"]\n'
        '[tool.setuptools]\npackages = ["acme"]\n',
        "acme/__init__.py": "",
        "acme/proc.py": PROCESSOR,
        "requirements.txt": f"msgpack==1.1.0 \\\n    {HASH}\n",
    }
    for name, text in {**base, **files}.items():
        if text is None:
            continue
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def _synth(consumer: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """``make synth`` (``python app.py``) for dev with these ``consumer`` settings, given as the CDK CLI gives
    context (which wins over cdk.json's)."""
    dev = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]["environments"]["dev"]
    dev["consumer"].update(consumer)
    env = {
        **os.environ,
        "CDK_CONTEXT_JSON": json.dumps({"environments": {"dev": dev}, "env": "dev"}),
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",  # as the Makefile sets it
    }
    return subprocess.run(
        [sys.executable, "app.py"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _one_line(done: subprocess.CompletedProcess[str], setting: str, *words: str) -> None:
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stderr.startswith(f"error: cdk.json context {setting}: "), done.stderr
    for word in words:
        assert word in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("files", "words"),
    [
        ({"requirements.txt": "msgpack==1.1.0\n"}, ("requirements.txt", "'msgpack==1.1.0'", "hash")),
        ({"requirements.txt": f"msgpack>=1 {HASH}\n"}, ("requirements.txt", "'msgpack>=1'", "pinned")),
        (
            {"requirements.txt": f"msgpack==1.1.0 {HASH}\nboto3==1.40.0 \\\n    {HASH}\n"},
            ("requirements.txt", "boto3==1.40.0", "requirements/consumer.lock"),
        ),
        ({"requirements.txt": None}, ("pyproject.toml", "'msgpack'", "requirements.txt")),
    ],
    ids=["not-hashed", "not-pinned", "conflicts-with-the-consumer-lock", "dependency-not-provided"],
)
def test_synth_refuses_requirements_the_image_build_would_refuse(
    tmp_path: Path, files: dict[str, str | None], words: tuple[str, ...]
) -> None:
    project = _project(tmp_path / "acme", files)
    folder = os.path.relpath(project, REPO_ROOT)
    done = _synth({"processor": "acme.proc:Proc", "processor_project": folder})
    _one_line(done, f"{KEY}.processor_project", f"{folder}/", *words)


def test_the_context_command_refuses_them_too(tmp_path: Path) -> None:
    """Teams building their own image (``consumer.image``) get the same check from ``stacks.image_context``."""
    project = _project(tmp_path / "acme", {"requirements.txt": "msgpack==1.1.0\n"})
    done = subprocess.run(
        [sys.executable, "-m", "stacks.image_context", str(tmp_path / "ctx"), "--project", str(project)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and done.stderr.startswith("error: --project: "), done.stderr
    assert "requirements.txt" in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr


@pytest.mark.parametrize(
    "variable", ["PYTHONHOME", "PYTHONPATH", "PATH", "HOME", "ECS_CONTAINER_METADATA_URI"]
)
def test_synth_refuses_a_table_variable_the_container_already_uses(variable: str) -> None:
    """PYTHONHOME set to a table name stops the interpreter before the worker starts: every task would crash."""
    table = {"variable": variable, "partition_key": "key", "actions": ["UpdateItem"]}
    done = _synth({"processor_table": table})
    _one_line(done, f"{KEY}.processor_table.variable", repr(variable), "is taken")


def test_the_image_build_refuses_a_processor_that_does_not_import(tmp_path: Path) -> None:
    """The context installed as consumer/Dockerfile's build stage does, with the PROCESSOR build argument the
    app passes (a Dockerfile ARG reaches RUN as an environment variable): a module importing what the image
    does not hold fails the build in one line naming the processor, instead of every task at start."""
    from stacks.image_context import assemble

    project = _project(
        tmp_path / "acme",
        {
            "pyproject.toml": '[project]\nname = "acme"\nversion = "1"\n',
            "requirements.txt": None,
            "acme/proc.py": "import not_in_the_image\n" + PROCESSOR,
        },
    )
    context = assemble(REPO_ROOT, project, tmp_path / "context")
    done = install_image(context, tmp_path / "v", tmp_path / "b", {"PROCESSOR": "acme.proc:Proc"})
    assert done.returncode != 0, "the build accepted a processor that does not import"
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("error: ")]
    assert "acme.proc:Proc" in line and "not_in_the_image" in line, done.stderr
    assert "Traceback" not in done.stderr, done.stderr


def test_the_context_command_checks_the_processor_and_passes_it_to_the_build(tmp_path: Path) -> None:
    """With ``consumer.image`` synth checks nothing of the image: ``--processor`` is the team's check that
    the project defines it (a typo in one line, exit 2), and the build argument that makes the build import it."""
    project = _project(tmp_path / "acme", {})

    def context(into: str, processor: str) -> subprocess.CompletedProcess[str]:
        argv = ["-m", "stacks.image_context", str(tmp_path / into), "--project", str(project)]
        return subprocess.run(
            [sys.executable, *argv, "--processor", processor],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    typo = context("typo", "acme.proc:Porc")
    assert typo.returncode == 2 and typo.stderr.startswith("error: --processor: 'acme.proc:Porc' "), (
        typo.stderr
    )
    assert len(typo.stderr.splitlines()) == 1 and not (tmp_path / "typo").exists(), typo.stderr
    good = context("good", "acme.proc:Proc")
    assert good.returncode == 0, good.stderr
    assert "--build-arg PROCESSOR=acme.proc:Proc " in good.stdout, good.stdout


@pytest.mark.parametrize(
    ("consumer", "setting", "words"),
    [
        ({"processor_environment": {"PYTHONHOME": "/x"}}, "processor_environment.PYTHONHOME", ("is taken",)),
        (
            {"processor_environment": {"ORDERS_DB_PASSWORD": "hunter2"}},
            "processor_environment.ORDERS_DB_PASSWORD",
            ("consumer.processor_secrets",),
        ),
        (
            {
                "processor_secrets": {
                    "ORDERS_KEY": "arn:aws:secretsmanager:eu-west-1:123456789012:secret:orders"
                }
            },
            "processor_secrets.ORDERS_KEY",
            ("6-character suffix",),
        ),
        (
            {"processor_environment": {"LATEST_TABLE": "mine"}},
            "processor_environment.LATEST_TABLE",
            ("consumer.processor_table.variable",),
        ),
        ({"processor_environment": ["ORDERS_URL=x"]}, "processor_environment", ("object",)),
    ],
    ids=["reserved", "secret-in-plain-text", "partial-secret-arn", "set-twice", "not-an-object"],
)
def test_synth_refuses_processor_settings_that_would_break_or_leak(
    consumer: dict[str, Any], setting: str, words: tuple[str, ...]
) -> None:
    """A processor's own settings (``consumer.processor_environment``, ``consumer.processor_secrets``): one
    line naming the key for a name the container already uses, a secret in plain text, an ARN ECS cannot
    read, or a variable set twice (dev's cdk.json sets LATEST_TABLE for its table)."""
    _one_line(_synth(consumer), f"{KEY}.{setting}", *words)
