"""One synth of the whole CDK app (every environment) per test session; tests read the cloud assembly.

The app is built exactly as ``app.py`` builds it, from the real ``cdk.json``. Two differences: the assembly goes
to a temporary directory, and validation errors (cdk-nag findings) are recorded instead of failing the synth,
so ``test_security`` can name every finding instead of the fixture crashing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
ENVIRONMENTS = ("dev", "staging", "prod")
UNITS = ("streaming", "state", "analytics", "consumer", "monitoring")


@dataclass
class Synth:
    """The synthesized assembly: templates and cdk-nag/CDK messages per (environment, unit)."""

    outdir: Path
    settings: dict[str, Any]
    templates: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    template_paths: dict[tuple[str, str], Path] = field(default_factory=dict)
    messages: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)

    def template(self, env: str, unit: str) -> dict[str, Any]:
        return self.templates[(env, unit)]

    def resources(self, env: str, unit: str, type_: str) -> dict[str, dict[str, Any]]:
        """Logical id -> resource, for every resource of ``type_`` in the stack."""
        return {k: r for k, r in self.template(env, unit)["Resources"].items() if r["Type"] == type_}

    def one(self, env: str, unit: str, type_: str) -> dict[str, Any]:
        found = list(self.resources(env, unit, type_).values())
        assert len(found) == 1, f"{env}/{unit}: expected one {type_}, found {len(found)}"
        return found[0]


def arn_parts(settings: dict[str, Any], env: str) -> tuple[str, str, str]:
    """(partition, region, account) as ``cfn.render`` shows them in ``env``'s templates: CloudFormation's pseudo
    parameters in an environment-agnostic stage, literals where cdk.json names the account and region."""
    body = settings[env]
    if body.get("account") and body.get("region"):
        return "aws", body["region"], body["account"]
    return "AWS::Partition", "AWS::Region", "AWS::AccountId"


def _spark_jobs_dir(tmp: Path) -> Path:
    """The real spark_jobs package once its entry files exist; until then a placeholder in the tmp dir."""
    real = REPO_ROOT / "spark_jobs"
    if (real / "compact.py").is_file() and (real / "aggregate.py").is_file():
        return real
    placeholder = tmp / "spark_jobs"
    placeholder.mkdir()
    for name in ("__init__.py", "compact.py", "aggregate.py"):
        (placeholder / name).write_text("")
    return placeholder


def _read_assembly(outdir: Path, synth: Synth) -> None:
    for env in ENVIRONMENTS:
        nested = outdir / f"assembly-{env}"
        manifest = json.loads((nested / "manifest.json").read_text())
        for artifact in manifest["artifacts"].values():
            if artifact["type"] != "aws:cloudformation:stack":
                continue
            unit = artifact["properties"]["stackName"].removeprefix(f"kinesis-fleet-{env}-")
            path = nested / artifact["properties"]["templateFile"]
            synth.template_paths[(env, unit)] = path
            synth.templates[(env, unit)] = json.loads(path.read_text())
            metadata: dict[str, list[dict[str, Any]]] = dict(artifact.get("metadata", {}))
            if extra := artifact.get("additionalMetadataFile"):  # newer assemblies keep metadata aside
                metadata.update(json.loads((nested / extra).read_text()))
            synth.messages[(env, unit)] = [
                {"path": p, **entry} for p, entries in metadata.items() for entry in entries
            ]


def image_context(synth: Synth, env: str) -> Path:
    """The build context cdk.out staged for ``env``'s consumer image (what ``docker build`` would be given)."""
    manifest = next(synth.outdir.glob(f"assembly-{env}/*ConsumerService*.assets.json"))
    (image,) = json.loads(manifest.read_text())["dockerImages"].values()
    assert image["source"]["dockerFile"] == "consumer/Dockerfile"
    return (manifest.parent / image["source"]["directory"]).resolve()


@dataclass(frozen=True)
class ImageVenv:
    """A fresh virtualenv holding what ``env``'s image holds, installed by the Dockerfile's own build script."""

    env: str
    context: Path
    venv: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"


def install_image(
    context: Path, venv: Path, builder: Path, build_args: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """consumer/Dockerfile's build stage without Docker: ``sh consumer/install-image.sh CONTEXT VENV BUILDER``
    with a Python 3.11 and the build arguments as environment variables (a Dockerfile ARG reaches RUN so)."""
    env = {
        **os.environ,
        **(build_args or {}),
        "PYTHON": str(Path(getattr(sys, "_base_executable", sys.executable))),
    }
    env.pop("PYTHONPATH", None)
    return subprocess.run(
        ["sh", str(context / "consumer" / "install-image.sh"), str(context), str(venv), str(builder)],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="session")
def dev_image_venv(synth: Synth, tmp_path_factory: pytest.TempPathFactory) -> ImageVenv:
    """dev's image without Docker: its staged context, installed as consumer/Dockerfile's build stage does
    (:func:`install_image`), into a fresh virtualenv."""
    context = image_context(synth, "dev")
    tmp = tmp_path_factory.mktemp("image")
    done = install_image(context, tmp / "venv", tmp / "b")
    assert done.returncode == 0, f"the image's install failed:\n{done.stdout}\n{done.stderr}"
    return ImageVenv("dev", context, tmp / "venv")


@pytest.fixture(scope="session")
def synth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synth]:
    from aws_cdk import App

    import app as entry

    tmp = tmp_path_factory.mktemp("cdk")
    outdir = tmp / "cdk.out"
    context = {**entry.cdk_json_context(REPO_ROOT), "@aws-cdk/core:failSynthOnValidationErrors": False}
    cdk_app = App(context=context, outdir=str(outdir))
    entry.build(cdk_app, REPO_ROOT, spark_jobs=_spark_jobs_dir(tmp))
    cdk_app.synth()
    result = Synth(outdir=outdir, settings=context["environments"])
    _read_assembly(outdir, result)
    assert set(result.templates) == {(e, u) for e in ENVIRONMENTS for u in UNITS}
    yield result
    shutil.rmtree(outdir, ignore_errors=True)


@pytest.fixture
def worker_processes() -> Iterator[list[Any]]:
    """Worker processes a test starts (anything with a ``proc``: ``subprocess.Popen``), killed after it."""
    started: list[Any] = []
    yield started
    for worker in started:
        if worker.proc.poll() is None:
            worker.proc.kill()
            worker.proc.wait(timeout=10)
