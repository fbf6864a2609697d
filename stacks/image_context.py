"""The consumer image's build context, assembled at synth: the consumer, its locks and your processor's code.

``cdk.json`` -> ``consumer.processor_project`` names a Python project (a folder with a ``pyproject.toml`` or a
``requirements.txt``, relative to ``cdk.json``). Synth checks it without importing it (stacks never import
processor or consumer code): the folder exists, holds one of the two files, and defines the module and the
name of ``consumer.processor``. Then it copies, into one folder that CDK stages as the image asset::

    consumer/            the package, its Dockerfile and install-image.sh (caches and tests left out)
    pyproject.toml  README.md  LICENSE
    requirements/consumer.lock  requirements/build.lock     hashed pins of the runtime and the build backend
    processor/           your project (empty without one)

``consumer/Dockerfile`` runs ``consumer/install-image.sh``, which installs exactly that into a virtualenv.
Nothing else of the repository reaches the image, and the asset's hash changes only with these files.
"""

from __future__ import annotations

import ast
import atexit
import shutil
import tempfile
from pathlib import Path

from stacks.config import ConfigError, EnvironmentSettings

__all__ = ["CONTEXT_FILES", "assemble", "check_processor_code", "processor_project"]

# Files of the repository the image needs besides consumer/ (README and LICENSE: the package metadata).
CONTEXT_FILES = (
    "pyproject.toml",
    "README.md",
    "LICENSE",
    "requirements/consumer.lock",
    "requirements/build.lock",
)
_SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", "tests", "*.egg-info", "build", "dist", ".*")
_PROJECT_FILES = ("pyproject.toml", "requirements.txt")


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
    module, _, name = consumer.processor.partition(":")
    if consumer.processor_project is None:
        if not _defines(root, module, name):
            raise ConfigError(
                f"{key}.processor",
                f"{consumer.processor!r} is not shipped in the consumer package: set "
                f"{key}.processor_project to the folder of the Python project that defines it",
            )
        return
    project = (root / consumer.processor_project).resolve()
    if not project.is_dir():
        raise ConfigError(
            f"{key}.processor_project",
            f"{consumer.processor_project!r} does not exist (relative to cdk.json): set it to the folder of "
            f"your processor's Python project",
        )
    if not any((project / f).is_file() for f in _PROJECT_FILES):
        raise ConfigError(
            f"{key}.processor_project",
            f"{consumer.processor_project!r} has no pyproject.toml or requirements.txt: add one (the image "
            f"build installs the project with it)",
        )
    if module.split(".")[0] == "consumer" or not any(
        _defines(base, module, name) for base in _bases(project)
    ):
        raise ConfigError(
            f"{key}.processor",
            f"{consumer.processor!r} is not defined by {consumer.processor_project}: set it to "
            f"'<module>:<Class>' of a class in that project (e.g. a module file <module>.py with class <Class>)",
        )


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
    shutil.copytree(root / "consumer", into / "consumer", ignore=_SKIP)
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
        shutil.copytree(project, target, ignore=_SKIP)
    return into
