"""The consumer image's build context, assembled at synth: the consumer, its locks and your processor's code.

``cdk.json`` -> ``consumer.processor_project`` names a Python project (a folder with a ``pyproject.toml`` or a
``requirements.txt``, relative to ``cdk.json``). Synth checks it without importing it (stacks never import
processor or consumer code): the folder exists, holds one of the two files, defines the module and the
name of ``consumer.processor``, and its requirements are what the build installs (hashed pins that agree with
the consumer's lock, and every declared dependency among them). Then it copies, into one folder that CDK stages as the image asset::

    consumer/            the package, its Dockerfile and install-image.sh (caches and tests left out)
    pyproject.toml  README.md  LICENSE
    requirements/consumer.lock  requirements/build.lock     hashed pins of the runtime and the build backend
    processor/           your project (empty without one; its top-level tests/, build/, dist/ and, anywhere,
                         caches and dot-files left out)

``consumer/Dockerfile`` runs ``consumer/install-image.sh``, which installs exactly that into a virtualenv and
imports the processor named by the build argument ``PROCESSOR`` (the consumer service passes it).
Nothing else of the repository reaches the image, and the asset's hash changes only with these files.
"""

from __future__ import annotations

import argparse
import ast
import atexit
import re
import shutil
import sys
import tempfile
import tomllib
from collections.abc import Callable
from pathlib import Path

from stacks.config import ConfigError, EnvironmentSettings
from stacks.image_requirements import check_requirements

__all__ = [
    "CONTEXT_FILES",
    "assemble",
    "check_defined",
    "check_processor_code",
    "check_project",
    "main",
    "processor_project",
]

# Files of the repository the image needs besides consumer/ (README and LICENSE: the package metadata).
CONTEXT_FILES = (
    "pyproject.toml",
    "README.md",
    "LICENSE",
    "requirements/consumer.lock",
    "requirements/build.lock",
)
_SKIP_EVERYWHERE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", ".*")
_SKIP_AT_TOP = frozenset(
    {"tests", "build", "dist"}
)  # a project's own tests and build output, not a subpackage
# The build backends the image's builder holds (requirements/build.lock): it fetches nothing while it builds.
_BACKENDS = frozenset({"setuptools.build_meta", "setuptools.build_meta:__legacy__"})
_BUILD_REQUIRES = frozenset({"setuptools", "wheel"})
_PROJECT_FILES = ("pyproject.toml", "requirements.txt")
_REPOSITORY = Path(__file__).resolve().parents[1]
_PROCESSOR = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")  # as stacks.config reads consumer.processor


def processor_project(settings: EnvironmentSettings, root: Path) -> Path | None:
    """The processor project's folder, checked (see :func:`check_processor_code`), or None."""
    check_processor_code(settings, root)
    project = settings.consumer.processor_project
    return None if project is None else (root / project).resolve()


def check_processor_code(settings: EnvironmentSettings, root: Path) -> None:
    """Refuse, naming the ``cdk.json`` key and the fix, a processor whose code the image would not hold."""
    consumer = settings.consumer
    key = f"environments.{settings.name}.consumer"
    if consumer.image is not None:
        return  # your own image: its contents are yours to check
    folder = consumer.processor_project
    project = None if folder is None else (root / folder).resolve()
    if project is not None and folder is not None:
        check_project(project, f"{key}.processor_project", folder, " (relative to cdk.json)", root=root)
    check_defined(consumer.processor, project, f"{key}.processor", consumer.processor_project, root)


def check_defined(processor: str, project: Path | None, setting: str, folder: str | None, root: Path) -> None:
    """Refuse, naming ``setting``, a ``<module>:<Class>`` that ``project`` (or, without one, the consumer package
    in ``root``) does not define, read without importing it."""
    module, _, name = processor.partition(":")
    if project is None or folder is None:
        if not _defines(root, module, name):
            key = setting.rpartition(".")[0]
            where = f"{key}.processor_project" if key else "--project"
            raise ConfigError(
                setting,
                f"{processor!r} is not shipped in the consumer package: set {where} to the folder of the "
                "Python project that defines it",
            )
        return
    if module.split(".")[0] == "consumer" or not any(
        _defines(base, module, name) for base in _bases(project)
    ):
        raise ConfigError(
            setting,
            f"{processor!r} is not defined by {folder}: set it to '<module>:<Class>' of a class in that project "
            "(e.g. a module file <module>.py with class <Class>)",
        )


def check_project(
    project: Path, setting: str, folder: str, relative: str = "", *, root: Path = _REPOSITORY
) -> None:
    """Refuse, naming ``setting``, a processor project folder the image build could not install: missing, with
    neither a ``pyproject.toml`` nor a ``requirements.txt``, built with a backend the builder lacks, or with
    requirements the build would refuse (see :func:`stacks.image_requirements.check_requirements`); ``root`` holds the consumer's lock."""
    if not project.is_dir():
        raise ConfigError(
            setting,
            f"{folder!r} does not exist{relative}: set it to the folder of your processor's Python project",
        )
    if not any((project / f).is_file() for f in _PROJECT_FILES):
        raise ConfigError(
            setting,
            f"{folder!r} has no pyproject.toml or requirements.txt: add one (the image build installs the "
            f"project with it)",
        )
    _check_build_system(project / "pyproject.toml", setting, folder)
    check_requirements(project, setting, folder, root)


def _check_build_system(pyproject: Path, setting: str, folder: str) -> None:
    """A project with a ``pyproject.toml`` builds with what the image's builder holds: setuptools (the pinned
    one in requirements/build.lock), the default when ``[build-system]`` names none."""
    if not pyproject.is_file():
        return
    try:
        system = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("build-system", {})
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(setting, f"{folder}/pyproject.toml is not valid TOML ({exc})") from None
    backend = system.get("build-backend", "setuptools.build_meta:__legacy__")
    requires = [str(r) for r in system.get("requires", [])]
    extra = [
        r
        for r in requires
        if re.split(r"[\s<>=!~;\[(]", r.strip(), maxsplit=1)[0].lower() not in _BUILD_REQUIRES
    ]
    if backend not in _BACKENDS or extra:
        raise ConfigError(
            setting,
            f"{folder}/pyproject.toml builds with {backend} (requires {', '.join(requires) or 'nothing'}); the "
            "image builds processor projects with its pinned setuptools only (requirements/build.lock), offline: "
            'set [build-system] requires = ["setuptools"], build-backend = "setuptools.build_meta", or ship '
            "a requirements.txt and the code without a pyproject.toml",
        )


def _skip(top: Path) -> Callable[[str, list[str]], set[str]]:
    """What a copy into the context leaves out: caches and dot-files anywhere; tests and build output only at
    the top of the copied folder (a subpackage may well be called ``build``)."""

    def ignore(folder: str, names: list[str]) -> set[str]:
        skipped = set(_SKIP_EVERYWHERE(folder, names))
        if Path(folder) == top:
            skipped.update(n for n in names if n in _SKIP_AT_TOP)
        return skipped

    return ignore


def _bases(project: Path) -> tuple[Path, ...]:
    """Where a project's importable modules live: its root, or ``src/`` (the src layout)."""
    return (project, project / "src")


def _defines(base: Path, module: str, name: str) -> bool:
    """Whether ``base`` holds ``module`` (a file or a package) defining the top-level ``name`` (by parsing)."""
    relative = Path(*module.split("."))
    for path in (base / relative.with_suffix(".py"), base / relative / "__init__.py"):
        if path.is_file():
            return name.split(".", maxsplit=1)[0] in _top_level_names(path)
    return False


def _top_level_names(path: Path) -> set[str]:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (SyntaxError, UnicodeDecodeError):
        return set()
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def assemble(root: Path, project: Path | None, into: Path | None = None) -> Path:
    """Copy what the image needs into ``into`` (a fresh temporary folder by default) and return it."""
    if into is None:
        into = Path(tempfile.mkdtemp(prefix="kinesis-fleet-image-"))
        atexit.register(shutil.rmtree, into, True)
    missing = [f for f in CONTEXT_FILES if not (root / f).is_file()]
    if missing:
        raise ConfigError("image", f"the repository lacks {', '.join(missing)} (see docs/infrastructure.md)")
    shutil.copytree(root / "consumer", into / "consumer", ignore=_skip(root / "consumer"))
    for name in CONTEXT_FILES:
        (into / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, into / name)
    target = into / "processor"
    if project is None:
        target.mkdir()
        (target / "NONE").write_text(
            "no processor project: the processor is shipped in the consumer package\n"
        )
    else:
        shutil.copytree(project, target, ignore=_skip(project))
    return into


def main(argv: list[str] | None = None) -> int:
    """``python -m stacks.image_context INTO [--project DIR] [--processor MODULE:CLASS]``: the same build context,
    for building the image yourself (``consumer.image``); one line and exit 2 for a folder the build could not
    use, or a processor the project does not define."""
    parser = argparse.ArgumentParser(
        prog="python -m stacks.image_context",
        description="Assemble consumer/Dockerfile's build context (the consumer, its hashed locks and your "
        "processor project as processor/) into INTO, for `docker build -f INTO/consumer/Dockerfile INTO`.",
    )
    parser.add_argument("into", help="an empty or new folder")
    parser.add_argument(
        "--project", help="your processor's Python project (pyproject.toml or requirements.txt)"
    )
    parser.add_argument(
        "--processor",
        help="<module>:<Class>, your cdk.json consumer.processor: checked to be defined by the project, and "
        "the build argument PROCESSOR, with which the build imports it",
    )
    args = parser.parse_args(argv)
    into = Path(args.into)
    root = Path(__file__).resolve().parents[1]
    try:
        if into.exists() and (not into.is_dir() or any(into.iterdir())):
            raise ConfigError("INTO", f"{into} exists and is not an empty folder")
        project = Path(args.project).resolve() if args.project else None
        if project is not None:
            check_project(project, "--project", args.project, root=root)
        if args.processor is not None:
            if not _PROCESSOR.match(args.processor):
                raise ConfigError("--processor", f"must be '<module>:<Class>', got {args.processor!r}")
            check_defined(args.processor, project, "--processor", args.project, root)
        assemble(root, project, into)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    build_arg = "" if args.processor is None else f"--build-arg PROCESSOR={args.processor} "
    print(
        f"build context in {into}: docker build -f {into}/consumer/Dockerfile {build_arg}-t <repository>:<tag> "
        f"{into}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
