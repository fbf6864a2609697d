"""stacks/image_context.py on processor projects of every shape a team may have: what reaches the build context,
which build systems the image's offline builder can build, and ``python -m stacks.image_context`` for teams that
build the image themselves."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from stacks.config import ConfigError
from stacks.image_context import assemble, check_project

from .conftest import REPO_ROOT

pytestmark = pytest.mark.infra

SETUPTOOLS = (
    '[build-system]\nrequires = ["setuptools>=61", "wheel"]\nbuild-backend = "setuptools.build_meta"\n'
)
HATCHLING = '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n'


def _project(root: Path, pyproject: str = SETUPTOOLS) -> Path:
    files = {
        "pyproject.toml": pyproject + '[project]\nname = "acme"\nversion = "1"\n',
        "acme/__init__.py": "",
        "acme/build/__init__.py": "",
        "acme/build/proc.py": "class P: ...\n",
        "acme/tests/__init__.py": "",
        "acme/__pycache__/x.cpython-311.pyc": "",
        "tests/test_acme.py": "",
        "build/lib/acme/__init__.py": "",
        "dist/acme-1.whl": "",
        ".git/HEAD": "",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_subpackages_named_build_or_tests_reach_the_context_the_projects_own_do_not(tmp_path: Path) -> None:
    context = assemble(REPO_ROOT, _project(tmp_path / "acme"), tmp_path / "context")
    copied = sorted(str(p.relative_to(context / "processor")) for p in (context / "processor").rglob("*"))
    assert copied == [
        "acme",
        "acme/__init__.py",
        "acme/build",
        "acme/build/__init__.py",
        "acme/build/proc.py",
        "acme/tests",
        "acme/tests/__init__.py",
        "pyproject.toml",
    ]


@pytest.mark.parametrize(
    ("pyproject", "refused"),
    [
        (SETUPTOOLS, False),
        ("", False),  # no [build-system]: pip's default, setuptools
        ('[build-system]\nrequires = ["setuptools"]\n', False),
        (HATCHLING, True),
        (
            '[build-system]\nrequires = ["setuptools", "setuptools-scm>=8"]\nbuild-backend = "setuptools.build_meta"\n',
            True,
        ),
        ('[build-system]\nrequires = ["poetry-core"]\nbuild-backend = "poetry.core.masonry.api"\n', True),
        ("[build-system\n", True),
    ],
)
def test_only_what_the_offline_builder_can_build_is_accepted(
    tmp_path: Path, pyproject: str, refused: bool
) -> None:
    project = _project(tmp_path / "acme", pyproject)
    if not refused:
        check_project(project, "environments.dev.consumer.processor_project", "acme")
        return
    with pytest.raises(ConfigError) as caught:
        check_project(project, "environments.dev.consumer.processor_project", "acme")
    assert caught.value.setting == "environments.dev.consumer.processor_project"
    assert "acme/pyproject.toml" in str(caught.value)


def test_the_context_command_assembles_or_refuses_in_one_line(tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "stacks.image_context", *args],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )

    good = run(str(tmp_path / "ctx"), "--project", str(_project(tmp_path / "acme")))
    assert good.returncode == 0 and "docker build -f" in good.stdout, good.stderr
    assert (tmp_path / "ctx" / "processor" / "acme" / "build" / "proc.py").is_file()
    assert (tmp_path / "ctx" / "requirements" / "consumer.lock").is_file()
    hatch = run(str(tmp_path / "ctx2"), "--project", str(_project(tmp_path / "hatch", HATCHLING)))
    again = run(str(tmp_path / "ctx"))
    for out, words in ((hatch, "error: --project: "), (again, "error: INTO: ")):
        assert out.returncode == 2 and out.stderr.startswith(words), out.stderr
        assert len(out.stderr.splitlines()) == 1 and "Traceback" not in out.stderr
