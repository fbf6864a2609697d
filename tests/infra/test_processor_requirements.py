"""A team's processor requirements that synth used to accept and the image build (or the task) then failed on:
``make synth`` (``python app.py``) now refuses each in one line naming ``consumer.processor_project``, the file
and the requirement. Each was tried as a deploying team would: synth passed, then ``consumer/install-image.sh``
on the staged context failed at its ``pip check`` (a range, a marker, the consumer's own version), installed a
different boto3 than the consumer's lock (``-r``, a direct reference), or built an image whose task then missed
the extra's dependencies (``requests[socks]``: "Missing dependencies for SOCKS support")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO_ROOT
from .test_own_processor_checks import HASH, KEY, _one_line, _project, _synth

pytestmark = pytest.mark.infra


def _pyproject(*dependencies: str) -> str:
    listed = ", ".join(f"'{d}'" for d in dependencies)
    return (
        f'[project]\nname = "acme"\nversion = "1"\ndependencies = [{listed}]\n'
        '[tool.setuptools]\npackages = ["acme"]\n'
    )


MSGPACK = f"msgpack==1.1.0 {HASH}\n"
REQUESTS = "".join(
    f"{pin} {HASH}\n"
    for pin in ("requests==2.32.3", "certifi==2024.8.30", "charset-normalizer==3.4.0", "idna==3.10")
)


@pytest.mark.parametrize(
    ("files", "words"),
    [
        ({"pyproject.toml": _pyproject("msgpack<1")}, ("'msgpack<1'", "msgpack 1.1.0", "requirements.txt")),
        (
            {"pyproject.toml": _pyproject("msgpack", "boto3<1.40")},
            ("'boto3<1.40'", "boto3 1.44.5", "requirements/consumer.lock"),
        ),
        (
            {"pyproject.toml": _pyproject("msgpack", "kinesis-fleet-consumer>=99")},
            ("'kinesis-fleet-consumer>=99'", "the consumer package"),
        ),
        (
            {"pyproject.toml": _pyproject('msgpack; python_version >= "3.8"'), "requirements.txt": None},
            ("pyproject.toml", "'msgpack; python_version >= \"3.8\"'", "would not hold"),
        ),
        (
            {
                "pyproject.toml": _pyproject("requests"),
                "requirements.txt": REQUESTS.replace("requests==", "requests[socks]=="),
            },
            ("requirements.txt", "'requests[socks]==2.32.3'", "[socks]", "--no-deps"),
        ),
        (
            {"pyproject.toml": _pyproject("requests[socks]"), "requirements.txt": REQUESTS},
            ("pyproject.toml", "'requests[socks]'", "pip check"),
        ),
        (
            {"requirements.txt": MSGPACK + "-r more.txt\n", "more.txt": f"boto3==1.40.0 {HASH}\n"},
            ("more.txt", "boto3==1.40.0", "requirements/consumer.lock"),
        ),
        (
            {"requirements.txt": MSGPACK + "-r more.txt\n", "more.txt": "urllib3>=2\n"},
            ("more.txt", "'urllib3>=2'", "hashed"),
        ),
        (
            {"requirements.txt": MSGPACK + "-r ../shared.txt\n"},
            ("requirements.txt", "'-r ../shared.txt'", "does not hold"),
        ),
        (
            {
                "requirements.txt": MSGPACK
                + f"boto3 @ https://example.invalid/boto3-1.40.0-py3-none-any.whl {HASH}\n"
            },
            ("requirements.txt", "boto3 @ https://example.invalid/", "requirements/consumer.lock"),
        ),
    ],
    ids=[
        "range-against-its-own-pin",
        "range-against-the-consumer-lock",
        "range-against-the-consumer",
        "dependency-with-a-marker",
        "extra-in-requirements",
        "extra-in-dependencies",
        "included-file-conflicts-with-the-lock",
        "included-file-not-hashed",
        "included-file-outside-the-project",
        "direct-reference-to-a-locked-distribution",
    ],
)
def test_synth_refuses_what_the_build_or_the_task_would_fail_on(
    tmp_path: Path, files: dict[str, str | None], words: tuple[str, ...]
) -> None:
    (tmp_path / "shared.txt").write_text(f"boto3==1.40.0 {HASH}\n")
    project = _project(tmp_path / "acme", files)
    folder = os.path.relpath(project, REPO_ROOT)
    done = _synth({"processor": "acme.proc:Proc", "processor_project": folder})
    _one_line(done, f"{KEY}.processor_project", f"{folder}/", *words)


def test_requirements_the_image_satisfies_are_accepted(tmp_path: Path) -> None:
    """Ranges the pins satisfy, a dependency whose marker excludes the image's Python 3.11, a pin equal to the
    lock's in another spelling (1.17.0.0 is 1.17.0), a file included from inside the project: all accepted."""
    project = _project(
        tmp_path / "acme",
        {
            "pyproject.toml": _pyproject(
                "msgpack>=1,<2", "boto3>=1.40", 'tomli>=2; python_version < "3.11"', "kinesis-fleet-consumer"
            ),
            "requirements.txt": MSGPACK + f"six==1.17.0.0 {HASH}\n-r pins/more.txt\n",
            "pins/more.txt": f"urllib3==2.8.0 {HASH}\n",
        },
    )
    done = subprocess.run(
        [sys.executable, "-m", "stacks.image_context", str(tmp_path / "ctx"), "--project", str(project)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "ctx" / "processor" / "pins" / "more.txt").is_file()


_ON_AN_ARM_LAPTOP = """
import platform, sys
from pathlib import Path
platform.machine = lambda: "arm64"  # synth on an Apple laptop: packaging reads the host's machine
from stacks.config import ConfigError
from stacks.image_requirements import check_requirements
try:
    check_requirements(Path(sys.argv[1]), "environments.dev.consumer", "acme", Path.cwd())
except ConfigError as exc:
    print(exc)
    sys.exit(3)
"""


@pytest.mark.parametrize(("machine", "refused"), [("x86_64", True), ("arm64", False)])
def test_markers_are_read_for_the_images_machine_not_the_one_that_synths(
    tmp_path: Path, machine: str, refused: bool
) -> None:
    """The tasks run on x86_64 instances: a dependency for that machine must be in the image, one for another
    machine is not the image's concern, whatever machine runs synth."""
    project = _project(
        tmp_path / "acme",
        {"pyproject.toml": _pyproject("msgpack", f'absent-dist; platform_machine == "{machine}"')},
    )
    done = subprocess.run(
        [sys.executable, "-c", _ON_AN_ARM_LAPTOP, str(project)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if refused:
        assert done.returncode == 3 and "absent-dist" in done.stdout, done.stdout + done.stderr
    else:
        assert done.returncode == 0, done.stdout + done.stderr
