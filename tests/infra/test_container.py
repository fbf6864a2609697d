"""consumer/Dockerfile, its assembled build context and the hashed locks: what the image runs and holds."""

from __future__ import annotations

import json
import re
import subprocess
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from stacks.consumer_service import HEALTH_CHECK_COMMAND

from .conftest import REPO_ROOT, ImageVenv, Synth, image_context

pytestmark = pytest.mark.infra

DOCKERFILE = REPO_ROOT / "consumer" / "Dockerfile"


def _stages() -> list[list[tuple[str, str]]]:
    """Each stage's (INSTRUCTION, arguments) pairs, continuation lines joined and comments dropped; the
    instructions before the first FROM (ARGs) form stage 0."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    stages: list[list[tuple[str, str]]] = [[]]
    for line in (raw.strip() for raw in text.splitlines()):
        if not line or line.startswith("#"):
            continue
        op, _, args = line.partition(" ")
        if op.upper() == "FROM":
            stages.append([])
        stages[-1].append((op.upper(), args.strip()))
    return stages


def test_two_stages_on_slim_python_311_the_last_non_root_with_exec_form_entrypoint() -> None:
    preamble, build, runtime = _stages()
    (arg,) = [a for op, a in preamble if op == "ARG"]
    name, _, base = arg.partition("=")
    assert name == "PYTHON_IMAGE"
    assert re.fullmatch(r"python:3\.11(\.\d+)?-slim(-\w+)?(@sha256:[0-9a-f]{64})?", base)
    assert build[0] == ("FROM", "${PYTHON_IMAGE} AS build")
    assert runtime[0] == ("FROM", "${PYTHON_IMAGE} AS runtime")
    users = [a for op, a in runtime if op == "USER"]
    assert users and users[-1].split(":")[0] not in {"root", "0"}
    (entrypoint,) = [a for op, a in runtime if op == "ENTRYPOINT"]
    assert json.loads(entrypoint) == ["/opt/venv/bin/python", "-m", "consumer", "run"]
    assert not [a for op, a in runtime if op == "CMD"]


def test_the_runtime_stage_has_no_installer_and_only_the_virtualenv() -> None:
    _, build, runtime = _stages()
    assert ("RUN", "sh consumer/install-image.sh /src /opt/venv /opt/builder") in build
    runs = " ".join(a for op, a in runtime if op == "RUN")
    assert "pip uninstall --yes --quiet pip setuptools wheel" in runs
    assert "pip install" not in runs
    copies = [a for op, a in runtime if op == "COPY"]
    assert copies == ["--from=build /opt/venv /opt/venv"]


def test_image_health_check_is_the_task_definitions(synth: Synth) -> None:
    """The image's HEALTHCHECK and every task definition's health check run the same `health` command."""
    _, _, runtime = _stages()
    (check,) = [a for op, a in runtime if op == "HEALTHCHECK"]
    assert check.endswith(f"CMD {json.dumps(list(HEALTH_CHECK_COMMAND))}")
    env = dict(pair.split("=", 1) for op, a in runtime if op == "ENV" for pair in a.split())
    assert env["CONSUMER_HEALTH_FILE"] == "/tmp/consumer.heartbeat"
    for name in ("dev", "staging", "prod"):
        task = synth.one(name, "consumer", "AWS::ECS::TaskDefinition")
        (container,) = task["Properties"]["ContainerDefinitions"]
        assert container["HealthCheck"]["Command"] == ["CMD", *HEALTH_CHECK_COMMAND], name
        assert container["HealthCheck"]["StartPeriod"] >= 30, name  # the worker's checks and first step
        variables = {e["Name"]: e["Value"] for e in container["Environment"]}
        assert variables["CONSUMER_HEALTH_FILE"] == env["CONSUMER_HEALTH_FILE"], name


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_build_context_holds_only_what_the_image_needs(synth: Synth, env: str) -> None:
    """The context CDK staged for the image: the package, the locks and the processor project, nothing else."""
    context = image_context(synth, env)
    staged = {p.relative_to(context).as_posix() for p in context.rglob("*") if p.is_file()}
    assert {"pyproject.toml", "README.md", "LICENSE", "consumer/Dockerfile", "consumer/__init__.py"} <= staged
    assert {Path(p).parts[0] for p in staged} == {
        "pyproject.toml",
        "README.md",
        "LICENSE",
        "requirements",
        "consumer",
        "processor",
    }
    assert not [p for p in staged if "__pycache__" in p or p.endswith(".pyc") or "egg-info" in p]
    assert sorted(p for p in staged if p.startswith("requirements/")) == [
        "requirements/build.lock",
        "requirements/consumer.lock",
    ]
    processor = {p for p in staged if p.startswith("processor/")}
    if env == "dev":  # cdk.json: consumer.processor_project = examples/latest-per-key
        assert {"processor/pyproject.toml", "processor/latest_per_key/processor.py"} <= processor
    else:
        assert processor == {"processor/NONE"}


def test_staging_and_prod_share_one_image_dev_has_its_own(synth: Synth) -> None:
    contexts = {env: image_context(synth, env) for env in ("dev", "staging", "prod")}
    assert contexts["staging"] == contexts["prod"] != contexts["dev"]


def test_the_image_installs_from_hashes_without_pip(dev_image_venv: ImageVenv) -> None:
    """dev's context installed as the Dockerfile's build stage installs it: the consumer, the example project
    and the locked pins, and no pip or setuptools in the virtualenv the runtime stage copies."""
    site = next(dev_image_venv.venv.glob("lib/python3*/site-packages"))
    installed = {canonicalize_name(d.name.split("-")[0]) for d in site.glob("*.dist-info")}
    assert {"kinesis-fleet-consumer", "latest-per-key", "boto3"} <= installed
    assert not installed & {"pip", "setuptools", "wheel", "rich"}
    assert not (dev_image_venv.venv / "bin" / "pip").exists()
    locked = set(_lock(REPO_ROOT / "requirements" / "consumer.lock"))
    assert installed == locked | {"kinesis-fleet-consumer", "latest-per-key"}
    out = subprocess.run(
        [str(dev_image_venv.python), "-c", "import latest_per_key.processor, consumer.health"],
        check=False,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr


# ---------------------------------------------------------------------------------------------- the locks


def _lock(path: Path) -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes) of a pip-compile --generate-hashes file."""
    text = re.sub(r"\\\n", " ", path.read_text())
    pins: dict[str, tuple[str, list[str]]] = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        spec, *options = line.split()
        name, _, version = spec.partition("==")
        pins[canonicalize_name(name)] = (version, [o.removeprefix("--hash=") for o in options])
    return pins


def _direct(path: Path) -> dict[str, str]:
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return {
        canonicalize_name(r.name): str(r.specifier) for r in (Requirement(line) for line in lines if line)
    }


@pytest.mark.parametrize(
    ("lock", "source"),
    [("consumer.lock", "consumer.txt"), ("build.lock", "build.in")],
    ids=["runtime", "build"],
)
def test_lock_is_hashed_and_current(lock: str, source: str) -> None:
    """Every pin is hashed; the direct requirements are pinned as requirements/ says; and the lock holds exactly
    their dependency closure (per the installed packages' own metadata), at versions every requirer accepts.
    A requirement added, removed or bumped without `make lock` fails here."""
    pins = _lock(REPO_ROOT / "requirements" / lock)
    direct = _direct(REPO_ROOT / "requirements" / source)
    assert all(hashes and all(h.startswith("sha256:") for h in hashes) for _, hashes in pins.values())
    for name, specifier in direct.items():
        assert name in pins, f"{name} is in requirements/{source} but not in {lock}: run make lock"
        assert specifier == f"=={pins[name][0]}", f"{name}: {lock} pins {pins[name][0]}: run make lock"
    closure, todo = set(), list(direct)
    while todo:
        name = todo.pop()
        if name in closure:
            continue
        closure.add(name)
        for requirement in map(Requirement, metadata.requires(name) or []):
            if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
                continue
            dependency = canonicalize_name(requirement.name)
            todo.append(dependency)
            if metadata.version(name) == pins[name][0] and dependency in pins:
                assert requirement.specifier.contains(pins[dependency][0], prereleases=True), (
                    f"{name} {pins[name][0]} requires {requirement}; {lock} pins {pins[dependency][0]}: run make lock"
                )
    assert set(pins) == closure, f"{lock} is stale (run make lock): {sorted(set(pins) ^ closure)}"
    assert "rich" not in pins  # status --watch's extra: not in the image
