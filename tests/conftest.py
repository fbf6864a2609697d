"""Shared pytest fixtures.

Local AWS emulators (see the ``tools/emulators`` package) for integration tests:

* ``emulators`` (session): :class:`tools.emulators.AwsEndpoints` of kinesis-local + moto server. They start
  on first use only, so unit tests never pay for them, and stop at the end of the session. To reuse emulators
  that are already running (``python -m tools.emulators --format env``), export
  ``EMULATORS_KINESIS_ENDPOINT`` and ``EMULATORS_AWS_ENDPOINT``.
* ``kinesis_client``, ``dynamodb_client``, ``sqs_client``, ``s3_client``: boto3 clients for them.
  Any other service: ``emulators.client("dynamodbstreams", session=boto_session)``.
* ``unique_name``: ``unique_name("orders")`` -> ``"orders-put-and-get-1a2b3c4d"``; unique per call, valid as a
  stream, table, queue and bucket name, so tests sharing the session emulators never collide.

Tests that use ``emulators`` are marked ``integration`` automatically (mark them explicitly anyway).
"""

from __future__ import annotations

import logging
import re
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # `tools` is not an installed package; make it importable for tests
    sys.path.insert(0, str(REPO_ROOT))

_STARTUP_KEY = pytest.StashKey[dict[str, float]]()
_FIRST = {"spark": 0, "spark-b": 0, "infra": 1}  # see pytest_collection_modifyitems
#: The Spark modules of the second local JVM (``spark-b``); the others share the first (``spark``). Two JVMs
#: halve the longest group of ``make test``, which otherwise ran alone at the end; the split balances their
#: CPU (about 2 minutes each on a quiet machine). A new Spark module goes with the first unless listed here.
_SPARK_B = frozenset(
    {
        "test_compact_files.py",
        "test_raw_roundtrip.py",
        "test_codegen.py",
        "test_transforms.py",
        "test_analyst_cli.py",
    }
)
_MAX_NAME = 63  # the tightest limit of the lot: S3 bucket names (3-63 chars, lowercase, digits, hyphens)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's, which turns each item's xdist_group into its nodeid
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if (
            "emulators" in getattr(item, "fixturenames", ())
            and item.get_closest_marker("integration") is None
        ):
            item.add_marker(pytest.mark.integration)
        if (group := _xdist_group(item)) is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    if config.getoption("dist", "no") == "loadgroup":
        # xdist hands work out in collection order: the longest groups (Spark's two, infra's) go out first, so
        # that none of them starts last and runs alone at the end.
        items.sort(key=lambda item: _FIRST.get(_xdist_group(item) or "", len(_FIRST)))


def _xdist_group(item: pytest.Item) -> str | None:
    """With ``-n N --dist loadgroup`` (``make test``), the tests that must share one process: the Spark tests
    (two local JVMs, ``spark`` and ``spark-b``, rather than one per process), every infra test (they synthesize into the same cdk.out), and the
    tests of a module with a module-scoped fixture (e.g. emulators of its own). Any other test goes wherever a
    process is free."""
    path = Path(str(item.fspath))
    if "spark" in path.parts:
        return "spark-b" if path.name in _SPARK_B else "spark"
    if "infra" in path.parts:
        return "infra"
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info is not None else ()
    if any(d[-1].scope in ("module", "package", "class") for d in defs if d):
        return str(path)
    return None


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    startup = config.stash.get(_STARTUP_KEY, None)
    if startup:
        timings = ", ".join(f"{name} {seconds:.2f}s" for name, seconds in startup.items())
        terminalreporter.write_line(f"emulators start-up: {timings}")


@pytest.fixture(autouse=True)
def _root_logging_restored() -> Iterator[None]:
    """Whatever a test does to the root logger (``python -m consumer``'s ``main`` run in-process routes it to
    the ``sys.stderr`` of the moment, which under ``capsys`` is closed when the test ends) is undone after it:
    later log lines, py4j's at the session's end among them, never go to a closed stream."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture(scope="session")
def _emulator_processes(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The running :class:`tools.emulators.Emulators`, or None when reusing external ones."""
    from tools.emulators import AwsEndpoints, Emulators

    if AwsEndpoints.from_env() is not None:
        yield None
        return
    with Emulators() as emulators:
        request.config.stash[_STARTUP_KEY] = dict(emulators.startup_seconds)
        yield emulators


@pytest.fixture(scope="session")
def emulators(_emulator_processes: Any) -> Any:
    """:class:`tools.emulators.AwsEndpoints`: ``kinesis_endpoint``, ``aws_endpoint``, ``client(service)``."""
    from tools.emulators import AwsEndpoints

    if _emulator_processes is None:
        external = AwsEndpoints.from_env()
        assert external is not None
        return external
    return _emulator_processes.endpoints


@pytest.fixture(scope="session")
def boto_session() -> Any:
    """One boto3 Session for the test session: clients made from it share loaded service models (faster)."""
    import boto3

    return boto3.session.Session()


@pytest.fixture
def _emulators_alive(_emulator_processes: Any) -> None:
    """Fail with the emulator's log tail, rather than a connection error, if one of them has died."""
    if _emulator_processes is not None:
        _emulator_processes.check_alive()


def _make_client(service: str, emulators: Any, boto_session: Any) -> Any:
    return emulators.client(service, session=boto_session)


@pytest.fixture
def kinesis_client(emulators: Any, boto_session: Any, _emulators_alive: None) -> Any:
    return _make_client("kinesis", emulators, boto_session)


@pytest.fixture
def dynamodb_client(emulators: Any, boto_session: Any, _emulators_alive: None) -> Any:
    return _make_client("dynamodb", emulators, boto_session)


@pytest.fixture
def sqs_client(emulators: Any, boto_session: Any, _emulators_alive: None) -> Any:
    return _make_client("sqs", emulators, boto_session)


@pytest.fixture
def s3_client(emulators: Any, boto_session: Any, _emulators_alive: None) -> Any:
    return _make_client("s3", emulators, boto_session)


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> Callable[..., str]:
    """``unique_name(prefix="t")``: ``<prefix>-<test name>-<8 hex>``, at most 63 chars of ``[a-z0-9-]``."""
    test_part = re.sub(r"^test[-_]*", "", request.node.name.lower())
    test_part = re.sub(r"[^a-z0-9]+", "-", test_part).strip("-")

    def make(prefix: str = "t") -> str:
        head = re.sub(r"[^a-z0-9]+", "-", prefix.lower()).strip("-") or "t"
        suffix = uuid.uuid4().hex[:8]
        room = _MAX_NAME - len(head) - len(suffix) - 2
        middle = test_part[: max(room - 1, 0)].strip("-")
        return "-".join(part for part in (head[: _MAX_NAME - 9], middle, suffix) if part)

    return make
