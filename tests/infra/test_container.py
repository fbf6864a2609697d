"""consumer/Dockerfile and the root .dockerignore: what the image runs and what its build context holds."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from .conftest import REPO_ROOT, Synth

pytestmark = pytest.mark.infra

DOCKERFILE = REPO_ROOT / "consumer" / "Dockerfile"


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    lines = [line.strip() for line in text.splitlines()]
    return [
        (parts[0].upper(), parts[1] if len(parts) > 1 else "")
        for parts in (line.split(None, 1) for line in lines if line and not line.startswith("#"))
    ]


def test_image_is_slim_python_311_non_root_with_exec_form_entrypoint() -> None:
    instructions = _instructions()
    (base,) = [args for op, args in instructions if op == "FROM"]
    assert re.fullmatch(r"python:3\.11(\.\d+)?-slim(-\w+)?(@sha256:[0-9a-f]{64})?", base)
    users = [args for op, args in instructions if op == "USER"]
    assert users and users[-1].split(":")[0] not in {"root", "0"}
    (entrypoint,) = [args for op, args in instructions if op == "ENTRYPOINT"]
    assert json.loads(entrypoint) == ["python", "-m", "consumer", "run"]
    assert not [args for op, args in instructions if op == "CMD"]


def test_image_installs_the_pinned_requirements_and_the_package() -> None:
    instructions = _instructions()
    copies = [args.split() for op, args in instructions if op == "COPY"]
    copied = {src for args in copies for src in args[:-1]}
    assert {"pyproject.toml", "requirements/consumer.txt", "consumer/"} <= copied
    runs = " ".join(args for op, args in instructions if op == "RUN")
    assert "pip install -r requirements/consumer.txt" in runs
    # The build backend is pinned and used as installed: an isolated build would fetch the newest setuptools,
    # so two builds of the same commit could differ.
    assert re.search(r"pip install setuptools==\d+\.\d+\.\d+", runs)
    assert "pip install --no-deps --no-build-isolation ." in runs


def test_build_context_holds_only_what_the_image_needs(synth: Synth) -> None:
    """The context CDK staged for the image (after .dockerignore) has the package and nothing else."""
    manifest = next(synth.outdir.glob("assembly-prod/*Consumer*.assets.json"))
    (image,) = json.loads(manifest.read_text())["dockerImages"].values()
    assert image["source"]["dockerFile"] == "consumer/Dockerfile"
    context = (manifest.parent / image["source"]["directory"]).resolve()
    staged = {p.relative_to(context).as_posix() for p in context.rglob("*") if p.is_file()}
    assert {
        "pyproject.toml",
        "requirements/consumer.txt",
        "consumer/Dockerfile",
        "consumer/__init__.py",
    } <= staged
    top_level = {Path(p).parts[0] for p in staged}
    assert top_level == {".dockerignore", "pyproject.toml", "requirements", "consumer"}
    assert not [p for p in staged if "__pycache__" in p or p.endswith(".pyc")]
    assert [p for p in staged if p.startswith("requirements/")] == ["requirements/consumer.txt"]
