"""A processor project's requirements, checked at synth against what the consumer image's build will hold.

``consumer/install-image.sh`` installs, without resolving anything: ``requirements/consumer.lock`` (hashed), the
consumer's wheel, the project's ``requirements.txt`` with ``--require-hashes --no-deps``, then the project itself
without dependencies, and runs ``pip check``. So the image holds exactly the lock, the consumer and the project's
own pins, one version of each distribution, and no extra's dependencies unless they are pinned themselves.
:func:`check_requirements` refuses, in one line naming the setting and the file, what the build (or, for an
extra, the running task) would fail on. It cannot see a pinned distribution's own dependencies (that needs
the distribution's metadata, which synth, offline, does not have): a pin whose dependency is missing from the
file still fails the build's ``pip check``, naming both.
"""

from __future__ import annotations

import codecs
import re
import sys
import tomllib
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from stacks.config import ConfigError

__all__ = ["IMAGE_MARKERS", "canonical", "check_requirements", "decode", "logical_lines"]

# The image's interpreter (consumer/Dockerfile: python:3.11-slim, Linux), for environment markers.
IMAGE_MARKERS: dict[str, str] = {
    **{key: str(value) for key, value in default_environment().items()},
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "os_name": "posix",
    "platform_machine": "x86_64",  # the ECS-optimized AL2023 AMI on the x86 types of INSTANCE_TYPES, whatever synths
    "sys_platform": "linux",
    "platform_system": "Linux",
    "python_version": "3.11",
    "python_full_version": sys.version.split()[0] if sys.version_info[:2] == (3, 11) else "3.11.0",
    "extra": "",
}
# An exact pin (== or ===) of a name, with optional extras and marker: what --require-hashes accepts.
_PIN = re.compile(
    r"^\s*[A-Za-z0-9][A-Za-z0-9._-]*\s*(?:\[[^\]]*\])?\s*===?\s*([A-Za-z0-9.!+_-]+)\s*(?:;.*)?$"
)
_NAME = re.compile(r"^\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)")
_INCLUDE = re.compile(r"^(?:-r|--requirement)(?:\s*=\s*|\s+|(?=[^\s=]))(?P<file>\S+)$")
_CONSUMER_VERSION = re.compile(r"""^__version__\s*=\s*["']([^"']+)["']""", re.MULTILINE)
# How pip decodes a requirements file (pip._internal.req.req_file): a byte-order mark first (UTF-32 before
# UTF-16, whose little-endian mark begins UTF-32's), then a PEP 263 coding line among the first two, then UTF-8
# (pip's last resort, the locale's encoding, is UTF-8 too in the image's python:3.11-slim).
_BOMS = (
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF32, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF16, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
)
_CODING = re.compile(rb"coding[:=]\s*([-\w.]+)")


def canonical(name: str) -> str:
    """A distribution's normalized name (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def decode(data: bytes) -> str:
    """A requirements file's text, decoded as pip decodes it: by its byte-order mark (a file PowerShell 5 or
    Notepad wrote: UTF-16, UTF-8 with a BOM), else by a ``# -*- coding: ... -*-`` line among the first two, else as
    UTF-8. Raises :class:`UnicodeError` (or :class:`LookupError`, for an unknown coding) when pip could not read
    it either."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return data[len(bom) :].decode(encoding)
    for line in data.split(b"\n")[:2]:
        if line[:1] == b"#" and (coding := _CODING.search(line)):
            return data.decode(coding[1].decode("ascii"))
    return data.decode("utf-8")


def logical_lines(path: Path) -> list[str]:
    """A requirements file's lines, decoded (:func:`decode`), continuations joined and comments dropped (pip's
    own reading)."""
    text = re.sub(r"\\\r?\n", " ", decode(path.read_bytes()))
    lines = (re.sub(r"(^|\s)#.*$", "", line).strip() for line in text.splitlines())
    return [line for line in lines if line]


def _same_version(a: str, b: str) -> bool:
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


class _Image:
    """What the image will hold: canonical name -> (version, or None for a direct reference; where it comes
    from), starting with the consumer's lock and the consumer itself."""

    def __init__(self, root: Path) -> None:
        self.holds: dict[str, tuple[str | None, str]] = {}
        for line in logical_lines(root / "requirements" / "consumer.lock"):
            name, pin = _NAME.match(line), _PIN.match(line.split(" --hash", 1)[0])
            if name and pin:
                self.holds[canonical(name[1])] = (pin[1], "requirements/consumer.lock")
        version = _CONSUMER_VERSION.search((root / "consumer" / "_version.py").read_text(encoding="utf-8"))
        consumer = _project_name(root / "pyproject.toml") or "kinesis-fleet-consumer"
        self.holds[canonical(consumer)] = (version[1] if version else None, "the consumer package")
        self.locked = dict(self.holds)


def check_requirements(project: Path, setting: str, folder: str, root: Path) -> None:
    """Refuse, naming ``setting`` and the file, what the image's build would refuse or the task would miss:

    - a ``requirements.txt`` line (or one of a file it includes with ``-r``) not pinned with ``==`` and hashed
      (the build installs with ``--require-hashes``), or an editable one, or an include the image lacks;
    - a pin, or a direct reference, of a distribution the consumer's lock pins at another version (the image
      holds one; the consumer's would be replaced under it);
    - an extra (``pkg[extra]``), in ``requirements.txt`` or ``[project].dependencies``: nothing installs an
      extra's dependencies (``--no-deps``) and ``pip check`` does not look for them, so the task would miss them;
    - a ``[project].dependencies`` entry for the image's Python (markers evaluated) that the image does not
      hold, or holds at a version outside the entry's range (``pip check`` fails the build on either).
    """
    project = project.resolve()
    image = _Image(root)
    requirements = project / "requirements.txt"
    if requirements.is_file():
        _check_file(requirements, project, image, setting, folder, set())
    for dependency in _declared(project / "pyproject.toml", setting, folder):
        _check_dependency(dependency, image, setting, folder)


def _check_file(path: Path, project: Path, image: _Image, setting: str, folder: str, seen: set[Path]) -> None:
    seen.add(path.resolve())
    where = f"{folder}/{path.relative_to(project).as_posix()}"
    try:
        lines = logical_lines(path)
    except (UnicodeError, LookupError) as exc:
        raise ConfigError(
            setting,
            f"{where} cannot be decoded as pip decodes a requirements file (a byte-order mark, a '# -*- coding: "
            f"... -*-' line, or UTF-8): {exc}: save it as UTF-8 (pip-compile writes UTF-8)",
        ) from None
    for line in lines:
        if line.startswith("-"):
            if line.startswith(("-e", "--editable")):
                raise ConfigError(
                    setting,
                    f"{where}: {line!r}: an editable requirement cannot be installed with --require-hashes, as "
                    "the image build does",
                )
            if include := _INCLUDE.match(line):
                included = _included(path, include["file"], project, setting, where, line)
                if included.resolve() not in seen:
                    _check_file(included, project, image, setting, folder, seen)
            continue  # another option (an index, a constraints file): pip reads it
        _check_pin(line, image, setting, where)


def _included(path: Path, name: str, project: Path, setting: str, where: str, line: str) -> Path:
    """The file a ``-r`` line names, as pip finds it (relative to the including file), when the image's copy
    of the project holds it."""
    included = (path.parent / name).resolve()
    try:
        parts = included.relative_to(project.resolve()).parts
    except ValueError:
        parts = ()
    copied = (
        bool(parts)
        and parts[0] not in {"tests", "build", "dist"}
        and not any(p.startswith(".") or p == "__pycache__" for p in parts)
    )
    if not copied or not included.is_file():
        raise ConfigError(
            setting,
            f"{where}: {line!r}: the image's copy of the project does not hold that file (it must be inside the "
            "project, outside its top-level tests/, build/, dist/ and dot-folders): move it there, or write its "
            "lines into requirements.txt",
        )
    return included


def _check_pin(line: str, image: _Image, setting: str, where: str) -> None:
    text = line.split(" --", 1)[0].strip()
    name, pin = _NAME.match(text), _PIN.match(text)
    try:
        requirement = Requirement(text)
    except InvalidRequirement:
        requirement = None
    if (
        name is None
        or requirement is None
        or "--hash=" not in line
        or (pin is None and requirement.url is None)
    ):
        raise ConfigError(
            setting,
            f"{where}: {text!r} is not pinned with == and hashed: the image build installs it with "
            "--require-hashes (pip-compile --generate-hashes writes such a file)",
        )
    if requirement.marker is not None and not requirement.marker.evaluate(IMAGE_MARKERS):
        return  # pip skips it on the image's Python
    key = canonical(requirement.name)
    version = pin[1] if pin else None
    if requirement.extras:
        plain = f"{requirement.name}=={version}" if version else f"{requirement.name} @ {requirement.url}"
        raise ConfigError(
            setting,
            f"{where}: {text!r} asks for the extra [{','.join(sorted(requirement.extras))}], whose dependencies "
            f"the image build does not install (it installs each line with --no-deps): pin each of them with "
            f"hashes on a line of its own and write {plain} (pip-compile --strip-extras writes such a file)",
        )
    if key in image.locked:
        locked, source = image.locked[key]
        if locked is not None and (version is None or not _same_version(version, locked)):
            what = f"{requirement.name}=={version}" if version else f"{requirement.name} @ {requirement.url}"
            raise ConfigError(
                setting,
                f"{where} pins {what}, but the consumer runs {requirement.name}=={locked} ({source}) and the "
                f"image holds one: pin {locked}, or drop the line (the image has it)",
            )
    image.holds[key] = (version, where)


def _check_dependency(dependency: str, image: _Image, setting: str, folder: str) -> None:
    try:
        requirement = Requirement(dependency)
    except InvalidRequirement as exc:
        raise ConfigError(
            setting, f"{folder}/pyproject.toml: dependency {dependency!r} is not a valid requirement ({exc})"
        ) from None
    if requirement.marker is not None and not requirement.marker.evaluate(IMAGE_MARKERS):
        return  # not for the image's Python (or only with an extra of the project's own)
    if requirement.extras:
        raise ConfigError(
            setting,
            f"{folder}/pyproject.toml depends on {dependency!r}: the image holds an extra's dependencies only "
            "when they are pinned themselves, and the build's pip check does not look for them: list each as a "
            f"dependency of its own instead of [{','.join(sorted(requirement.extras))}] and pin it with hashes in "
            f"{folder}/requirements.txt",
        )
    held = image.holds.get(canonical(requirement.name))
    if held is None:
        raise ConfigError(
            setting,
            f"{folder}/pyproject.toml depends on {dependency!r}, which the image would not hold (the build "
            f"installs the project without dependencies): pin it with hashes in {folder}/requirements.txt",
        )
    version, source = held
    if version is not None and not requirement.specifier.contains(version, prereleases=True):
        fix = (
            f"widen the range to allow {version}, which the consumer fixes"
            if source in {"requirements/consumer.lock", "the consumer package"}
            else f"pin a version it allows in {folder}/requirements.txt"
        )
        raise ConfigError(
            setting,
            f"{folder}/pyproject.toml depends on {dependency!r}, but the image holds {requirement.name} "
            f"{version} ({source}), and its build's pip check refuses that: {fix}",
        )


def _project_name(pyproject: Path) -> str | None:
    try:
        name = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {}).get("name")
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return None
    return name if isinstance(name, str) else None


def _declared(pyproject: Path, setting: str, folder: str) -> list[str]:
    """``[project].dependencies`` (none when the file, or the table, is absent or they are ``dynamic``)."""
    if not pyproject.is_file():
        return []
    project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
    dependencies = project.get("dependencies", []) if isinstance(project, dict) else []
    if not isinstance(dependencies, list) or not all(isinstance(d, str) for d in dependencies):
        raise ConfigError(
            setting, f"{folder}/pyproject.toml: [project].dependencies must be a list of strings"
        )
    return dependencies
