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
import tokenize
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
    in ``root``) does not define, read without importing it (see :func:`_may_define`): without a project the
    image holds the consumer package alone, so the module must be one of ``consumer``'s."""
    module, _, name = processor.partition(":")
    if project is None or folder is None:
        if module.split(".")[0] != "consumer" or not _defines(root, module, name, setting, root, ""):
            key = setting.rpartition(".")[0]
            where = f"{key}.processor_project" if key else "--project"
            raise ConfigError(
                setting,
                f"{processor!r} is not shipped in the consumer package (the image holds no other code without a "
                f"project): set {where} to the folder of the Python project that defines it",
            )
        return
    if module.split(".")[0] == "consumer" or not any(
        _defines(base, module, name, setting, project, folder) for base in _bases(project)
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
    one in requirements/build.lock), the default when ``[build-system]`` names none. A ``[build-system]`` pip
    would refuse (not a table, without ``requires``, ``requires`` not a list of strings, ``build-backend`` not a
    string) is refused here, in one line."""
    if not pyproject.is_file():
        return
    where = f"{folder}/pyproject.toml"
    try:
        document = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(setting, f"{where} is not valid TOML ({exc})") from None
    fix = 'write [build-system] requires = ["setuptools"], build-backend = "setuptools.build_meta"'
    if "build-system" not in document:
        system: dict[str, object] = {"requires": []}  # pip's default: setuptools' legacy backend
    elif isinstance(document["build-system"], dict):
        system = document["build-system"]
    else:
        raise ConfigError(
            setting,
            f"{where}: build-system is a {_toml_type(document['build-system'])}, not a table: {fix}",
        )
    if "requires" not in system:
        raise ConfigError(setting, f"{where}: [build-system] has no requires, which pip refuses: {fix}")
    requires, backend = system["requires"], system.get("build-backend", "setuptools.build_meta:__legacy__")
    if not isinstance(requires, list) or not all(isinstance(r, str) for r in requires):
        raise ConfigError(
            setting,
            f"{where}: [build-system] requires must be a list of strings, got a {_toml_type(requires)}: {fix}",
        )
    if not isinstance(backend, str):
        raise ConfigError(
            setting,
            f"{where}: [build-system] build-backend must be a string, got a {_toml_type(backend)}: {fix}",
        )
    extra = [
        r
        for r in requires
        if re.split(r"[\s<>=!~;\[(]", r.strip(), maxsplit=1)[0].lower() not in _BUILD_REQUIRES
    ]
    if backend not in _BACKENDS or extra:
        raise ConfigError(
            setting,
            f"{where} builds with {backend} (requires {', '.join(requires) or 'nothing'}); the "
            "image builds processor projects with its pinned setuptools only (requirements/build.lock), offline: "
            'set [build-system] requires = ["setuptools"], build-backend = "setuptools.build_meta", or ship '
            "a requirements.txt and the code without a pyproject.toml",
        )


def _toml_type(value: object) -> str:
    """What TOML calls the type of a value ``tomllib`` read."""
    kinds = (
        (bool, "boolean"),
        (str, "string"),
        (int, "integer"),
        (float, "float"),
        (list, "array"),
        (dict, "table"),
    )
    return next((kind for cls, kind in kinds if isinstance(value, cls)), "date or time")


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


def _defines(base: Path, module: str, name: str, setting: str, top: Path, folder: str) -> bool:
    """Whether ``base`` holds ``module`` (a package or a file, in the order Python looks for them) that may
    define the top-level ``name`` (:func:`_may_define`); ``top`` and ``folder`` name its files in errors."""
    relative = Path(*module.split("."))
    for path in (base / relative / "__init__.py", base / relative.with_suffix(".py")):
        if path.is_file():
            shown = path.relative_to(top).as_posix()
            return _may_define(path, name, setting, f"{folder}/{shown}" if folder else shown)
    return False


# What a module that binds names this check cannot list "binds": anything (the image build's import decides).
_ANY = "*"


def _may_define(path: Path, name: str, setting: str, shown: str) -> bool:
    """Whether the module at ``path`` may bind ``name`` at its top level, read without importing it: a class,
    function, assignment or import, also inside a top-level ``if``, ``try``, ``with`` or loop, counts; so does
    anything when it has ``from x import *`` or a module ``__getattr__`` (the build's import check decides
    then). Read as Python reads it (``tokenize.open``: a BOM or a PEP 263 coding line); a module Python could
    not compile is refused, naming ``setting``, the file (``shown``) and the line."""
    try:
        with tokenize.open(path) as source:
            tree = ast.parse(source.read(), filename=str(path))
    except SyntaxError as exc:
        line = f", line {exc.lineno}" if exc.lineno else ""
        raise ConfigError(
            setting,
            f"{shown}{line}: {exc.msg}: the image build cannot import a module that does not compile: fix it",
        ) from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(
            setting,
            f"{shown} is not Python source Python can read ({exc}): save it as UTF-8, or declare its encoding "
            "in a '# -*- coding: <encoding> -*-' first line",
        ) from None
    names = _bound(tree.body)
    return name in names or _ANY in names or "__getattr__" in names


def _bound(body: list[ast.stmt]) -> set[str]:
    """The names ``body`` may bind when it runs (``_ANY`` for ``import *``), recursing into compound
    statements other than definitions."""
    names: set[str] = set()
    for node in body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                names.update(_targets(target))
        elif isinstance(node, ast.AnnAssign | ast.AugAssign | ast.For | ast.AsyncFor):
            names.update(_targets(node.target))
        elif isinstance(node, ast.Import):
            names.update(a.asname or a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.update(_ANY if a.name == "*" else a.asname or a.name for a in node.names)
        elif isinstance(node, ast.With | ast.AsyncWith):
            for item in node.items:
                if item.optional_vars is not None:
                    names.update(_targets(item.optional_vars))
        elif isinstance(node, ast.Try | ast.TryStar):
            for handler in node.handlers:
                names.update(_bound(handler.body))
        elif isinstance(node, ast.Match):
            for case in node.cases:
                names.update(_bound(case.body))
        for field in ("body", "orelse", "finalbody"):
            nested = getattr(node, field, None)
            if isinstance(nested, list) and not isinstance(
                node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
            ):
                names.update(_bound(nested))
    return names


def _targets(target: ast.expr) -> set[str]:
    """The names an assignment target binds (``a``, ``a, *b``; not ``a.b`` or ``a[0]``)."""
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, ast.Starred):
        return _targets(target.value)
    if isinstance(target, ast.Tuple | ast.List):
        return {name for element in target.elts for name in _targets(element)}
    return set()


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
