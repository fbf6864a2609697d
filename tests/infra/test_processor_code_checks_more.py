"""The synth checks of a processor's code (stacks/image_context.py, stacks/image_requirements.py) on what they
got wrong: a module outside the ``consumer`` package accepted as "shipped in the consumer package" (the image
build then failed at deploy), valid processors refused as "not defined" and a syntax error reported as one, a
``requirements.txt`` pip reads (UTF-16, UTF-8 with a BOM) crashing synth or refused as unpinned, and a malformed
``[build-system]`` crashing synth. The checks are called directly (as app.py calls them before the CDK starts);
``python -m stacks.image_context`` shows the one line and exit 2 the CLI promises."""

from __future__ import annotations

import codecs
import copy
import subprocess
import sys
from pathlib import Path

import pytest

import app as entry
from stacks.config import ConfigError
from stacks.image_context import check_defined, check_project

from .conftest import REPO_ROOT

pytestmark = pytest.mark.infra

SETTING = "environments.dev.consumer.processor"
PROJECT_SETTING = "environments.dev.consumer.processor_project"
HASH = "--hash=sha256:" + "0" * 64  # synth checks that a line is hashed; the build checks the hash itself
PYPROJECT = (
    '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
    '[project]\nname = "p"\nversion = "1"\ndependencies = ["msgpack"]\n'
)
REQUIREMENTS = f"msgpack==1.1.0 \\\n    {HASH}\n"
PROCESSOR = "from consumer import BaseProcessor\n\n\nclass P(BaseProcessor):\n    pass\n"


def _project(root: Path, files: dict[str, str | bytes]) -> Path:
    base: dict[str, str | bytes] = {
        "pyproject.toml": PYPROJECT,
        "requirements.txt": REQUIREMENTS,
        "pkg/__init__.py": "",
        "pkg/proc.py": PROCESSOR,
    }
    for name, content in {**base, **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            (root / name).write_bytes(content)
        else:
            (root / name).write_text(content, encoding="utf-8")
    return root


def _one_line(error: ConfigError, setting: str, *words: str) -> None:
    assert error.setting == setting, error
    assert "\n" not in str(error), error
    for word in words:
        assert word in str(error), error


# -- D3: without a processor project, only the consumer package's own processors ---------------------------


def _staging_with(processor: str) -> dict[str, object]:
    context = copy.deepcopy(entry.app_context(environ={}))
    context["environments"]["staging"]["consumer"]["processor"] = processor
    context["env"] = "staging"
    return context


@pytest.mark.parametrize(
    "processor", ["stacks.config:ConfigError", "app:main", "tools.demo:main", "consumer.sinks.raw_s3:Nope"]
)
def test_without_a_project_a_module_outside_the_consumer_package_is_refused(processor: str) -> None:
    """The image holds the consumer package and nothing else of the repository: ``app:main`` or a module of
    ``stacks`` passed synth, and the image build's import check failed at ``cdk deploy``."""
    with pytest.raises(ConfigError) as caught:
        entry.checked_environments(_staging_with(processor), REPO_ROOT)
    _one_line(
        caught.value,
        "environments.staging.consumer.processor",
        f"{processor!r} is not shipped in the consumer package",
        "environments.staging.consumer.processor_project",
    )


def test_without_a_project_the_consumers_own_processor_is_accepted() -> None:
    (staging,) = entry.checked_environments(_staging_with("consumer.sinks.raw_s3:RawS3Sink"), REPO_ROOT)
    assert staging.consumer.processor == "consumer.sinks.raw_s3:RawS3Sink"


def test_a_module_next_to_app_py_is_not_in_the_image(tmp_path: Path) -> None:
    """A team's ``myproc.py`` beside app.py, with ``processor_project`` forgotten: refused at synth."""
    (tmp_path / "myproc.py").write_text(PROCESSOR.replace("class P", "class Handler"))
    with pytest.raises(ConfigError) as caught:
        check_defined("myproc:Handler", None, SETTING, None, tmp_path)
    _one_line(caught.value, SETTING, "'myproc:Handler' is not shipped in the consumer package")


# -- D4: what a project's module may define, and a module that does not compile -----------------------------

ACCEPTED_MODULES = {
    "star-import": ("pkg:P", {"pkg/__init__.py": "from pkg.proc import *\n"}),
    "import-in-try": (
        "pkg:P",
        {"pkg/__init__.py": "try:\n    from pkg.proc import P\nexcept ImportError:\n    raise\n"},
    ),
    "definition-in-if": (
        "pkg.proc:P",
        {
            "pkg/proc.py": "import sys\nfrom consumer import BaseProcessor\n\nif sys.version_info >= (3, 11):\n"
            "    class P(BaseProcessor):\n        pass\nelse:\n    P = None\n"
        },
    ),
    "definition-in-except": (
        "pkg.proc:P",
        {
            "pkg/proc.py": "try:\n    import orjson\nexcept ImportError:\n    "
            + PROCESSOR.replace("\n", "\n    ")
        },
    ),
    "tuple-assignment": ("pkg.proc:P", {"pkg/proc.py": PROCESSOR + "Q, P = P, P\n"}),
    "module-getattr": (
        "pkg:P",
        {"pkg/__init__.py": "def __getattr__(name):\n    raise AttributeError(name)\n"},
    ),
    "latin-1-with-coding-line": (
        "pkg.proc:P",
        {"pkg/proc.py": ("# -*- coding: latin-1 -*-\n# Café\n" + PROCESSOR).encode("latin-1")},
    ),
    "utf-8-with-bom": ("pkg.proc:P", {"pkg/proc.py": codecs.BOM_UTF8 + PROCESSOR.encode()}),
    "package-before-module": (
        "pkg.proc:P",
        {"pkg/proc.py": "", "pkg/proc/__init__.py": PROCESSOR},  # Python imports the package
    ),
}


@pytest.mark.parametrize(("processor", "files"), ACCEPTED_MODULES.values(), ids=ACCEPTED_MODULES.keys())
def test_a_module_that_may_define_the_processor_is_accepted(
    tmp_path: Path, processor: str, files: dict[str, str | bytes]
) -> None:
    """Each of these loads with consumer.loader.load_processor; synth refused them as "not defined"."""
    project = _project(tmp_path / "acme", files)
    check_defined(processor, project, SETTING, "acme", REPO_ROOT)


def test_a_module_that_does_not_define_it_is_still_refused(tmp_path: Path) -> None:
    project = _project(
        tmp_path / "acme", {"pkg/__init__.py": "from pkg.proc import Other\nif True:\n    Q = 1\n"}
    )
    with pytest.raises(ConfigError) as caught:
        check_defined("pkg:P", project, SETTING, "acme", REPO_ROOT)
    _one_line(caught.value, SETTING, "'pkg:P' is not defined by acme")


def test_a_syntax_error_is_reported_with_its_file_and_line_not_as_undefined(tmp_path: Path) -> None:
    project = _project(
        tmp_path / "acme", {"pkg/proc.py": PROCESSOR.replace("(BaseProcessor):", "(BaseProcessor)")}
    )
    with pytest.raises(ConfigError) as caught:
        check_defined("pkg.proc:P", project, SETTING, "acme", REPO_ROOT)
    _one_line(caught.value, SETTING, "acme/pkg/proc.py, line 4", "expected ':'")
    assert "not defined" not in str(caught.value)


@pytest.mark.parametrize(
    "source",
    [b"# caf\xe9\n" + PROCESSOR.encode(), b"# -*- coding: no-such-codec -*-\n" + PROCESSOR.encode()],
    ids=["latin-1-without-coding-line", "unknown-coding"],
)
def test_a_module_python_cannot_decode_is_its_own_error(tmp_path: Path, source: bytes) -> None:
    project = _project(tmp_path / "acme", {"pkg/proc.py": source})
    with pytest.raises(ConfigError) as caught:
        check_defined("pkg.proc:P", project, SETTING, "acme", REPO_ROOT)
    _one_line(caught.value, SETTING, "acme/pkg/proc.py")
    assert "not defined" not in str(caught.value)


# -- D1: requirements.txt decoded as pip decodes it ----------------------------------------------------------


@pytest.mark.parametrize(
    "encoded",
    [
        REQUIREMENTS.encode("utf-16"),  # PowerShell 5's `>` (a BOM, little-endian)
        codecs.BOM_UTF16_BE + REQUIREMENTS.encode("utf-16-be"),
        codecs.BOM_UTF8 + REQUIREMENTS.encode(),  # Notepad's "UTF-8 with BOM"
        REQUIREMENTS.encode("utf-32"),
        ("# -*- coding: latin-1 -*-\n# Café\n" + REQUIREMENTS).encode("latin-1"),
        REQUIREMENTS.replace("\n", "\r\n").encode(),
    ],
    ids=["utf-16", "utf-16-be", "utf-8-bom", "utf-32", "coding-line", "crlf"],
)
def test_a_requirements_file_pip_reads_is_read(tmp_path: Path, encoded: bytes) -> None:
    """pip detects the byte-order mark (or a PEP 263 coding line) and installs these; synth crashed with a
    UnicodeDecodeError traceback on UTF-16 and refused UTF-8 with a BOM as "'\\ufeffmsgpack==1.1.0' is not
    pinned"."""
    check_project(_project(tmp_path / "acme", {"requirements.txt": encoded}), PROJECT_SETTING, "acme")


def test_a_requirements_file_pip_reads_is_still_checked(tmp_path: Path) -> None:
    """Decoded, an unpinned line is refused as before (the BOM is no part of the name)."""
    project = _project(tmp_path / "acme", {"requirements.txt": f"msgpack>=1 {HASH}\n".encode("utf-16")})
    with pytest.raises(ConfigError) as caught:
        check_project(project, PROJECT_SETTING, "acme")
    _one_line(caught.value, PROJECT_SETTING, "acme/requirements.txt: 'msgpack>=1' is not pinned")


@pytest.mark.parametrize(
    "encoded",
    [
        b"msgpack==1.1.0 \xe9\xff " + HASH.encode() + b"\n",
        b"# coding: no-such-codec\n" + REQUIREMENTS.encode(),
    ],
    ids=["not-utf-8", "unknown-coding"],
)
def test_a_requirements_file_pip_cannot_decode_is_one_line(tmp_path: Path, encoded: bytes) -> None:
    project = _project(tmp_path / "acme", {"requirements.txt": encoded})
    with pytest.raises(ConfigError) as caught:
        check_project(project, PROJECT_SETTING, "acme")
    _one_line(caught.value, PROJECT_SETTING, "acme/requirements.txt cannot be decoded", "UTF-8")


# -- D2: a malformed [build-system] ------------------------------------------------------------------------

MALFORMED_BUILD_SYSTEMS = {
    "build-system-a-string": ('build-system = "setuptools"\n', "build-system is a string, not a table"),
    "requires-a-string": (
        '[build-system]\nrequires = "setuptools"\n',
        "[build-system] requires must be a list of strings, got a string",
    ),
    "requires-not-strings": (
        '[build-system]\nrequires = ["setuptools", 68]\n',
        "[build-system] requires must be a list of strings, got a array",
    ),
    "no-requires": (
        '[build-system]\nbuild-backend = "setuptools.build_meta"\n',
        "[build-system] has no requires",
    ),
    "backend-not-a-string": (
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = ["setuptools.build_meta"]\n',
        "[build-system] build-backend must be a string, got a array",
    ),
}


@pytest.mark.parametrize(
    ("build_system", "words"), MALFORMED_BUILD_SYSTEMS.values(), ids=MALFORMED_BUILD_SYSTEMS.keys()
)
def test_a_malformed_build_system_is_one_line_naming_processor_project(
    tmp_path: Path, build_system: str, words: str
) -> None:
    pyproject = build_system + '[project]\nname = "p"\nversion = "1"\ndependencies = ["msgpack"]\n'
    project = _project(tmp_path / "acme", {"pyproject.toml": pyproject})
    with pytest.raises(ConfigError) as caught:
        check_project(project, PROJECT_SETTING, "acme")
    _one_line(caught.value, PROJECT_SETTING, "acme/pyproject.toml", words, 'requires = ["setuptools"]')
    assert "s, e, t" not in str(caught.value)


def test_the_context_command_says_one_line_where_it_crashed(tmp_path: Path) -> None:
    """``python -m stacks.image_context`` (teams building their own image) exited 1 with a traceback on both."""
    bad_toml = _project(tmp_path / "toml", {"pyproject.toml": 'build-system = "setuptools"\n'})
    bad_text = _project(tmp_path / "text", {"requirements.txt": b"msgpack==1.1.0 \xe9\xff\n"})
    utf16 = _project(tmp_path / "utf16", {"requirements.txt": REQUIREMENTS.encode("utf-16")})

    def context(name: str, project: Path) -> subprocess.CompletedProcess[str]:
        argv = ["-m", "stacks.image_context", str(tmp_path / f"ctx-{name}"), "--project", str(project)]
        return subprocess.run(
            [sys.executable, *argv, "--processor", "pkg.proc:P"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )

    runs = {
        name: context(name, project)
        for name, project in (("toml", bad_toml), ("text", bad_text), ("utf16", utf16))
    }
    for name in ("toml", "text"):
        done = runs[name]
        assert done.returncode == 2 and done.stderr.startswith("error: --project: "), done.stderr
        assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr, done.stderr
    assert runs["utf16"].returncode == 0, runs["utf16"].stderr
