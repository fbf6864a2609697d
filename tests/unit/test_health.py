"""The liveness check: healthy while the coordinator loop steps, unhealthy once it stops stepping."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from consumer.cli import main
from consumer.config import HealthConfig
from consumer.health import EXIT_UNHEALTHY, Heartbeat, attach_heartbeat, heartbeat_age
from consumer.leases.memory import InMemoryLeaseRepository, InMemoryTables
from consumer.retrieval.memory import InMemoryKinesis

from .helpers import Journal, make_worker, start, wait_until


class _Freezable:
    """The lease repository, whose read of a worker item blocks while ``frozen`` is set: the coordinator loop,
    which reads its own item (the inbox) itself, hangs in it (as it would on a network call that never
    returns). Heartbeats go on meanwhile: they have a lane of their own."""

    def __init__(self, repo: InMemoryLeaseRepository) -> None:
        self._repo = repo
        self.frozen = threading.Event()
        self.thawed = threading.Event()

    def get_worker(self, *args: Any, **kwargs: Any) -> Any:
        if self.frozen.is_set():
            self.thawed.wait(30)
        return self._repo.get_worker(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._repo, name)


def _health(path: Path, max_age: float) -> int:
    return main(["health", "--file", str(path), "--max-age", str(max_age)])


def test_health_follows_the_coordinator_loop(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "heartbeat"
    kinesis = InMemoryKinesis()
    kinesis.create_stream("s", 1)
    frozen: list[_Freezable] = []

    def wrap(repo: InMemoryLeaseRepository) -> _Freezable:
        frozen.append(_Freezable(repo))
        return frozen[0]

    worker = make_worker("w1", InMemoryTables(), kinesis, Journal(), wrap_repo=wrap)
    assert attach_heartbeat(worker, HealthConfig(str(path))) is not None
    assert _health(path, 1.0) == EXIT_UNHEALTHY  # not started: no heartbeat yet
    thread = start(worker)
    try:
        wait_until(path.exists, what="the first heartbeat")
        assert _health(path, 1.0) == 0
        assert "healthy" in capsys.readouterr().out
        frozen[0].frozen.set()  # the coordinator loop hangs in its next inbox read
        wait_until(lambda: (heartbeat_age(path) or 0) > 1.2, timeout=15, what="the heartbeat to go stale")
        assert _health(path, 1.0) == EXIT_UNHEALTHY
        assert "unhealthy: the coordinator loop last stepped" in capsys.readouterr().out
        frozen[0].thawed.set()  # the loop steps again: healthy again
        wait_until(lambda: (heartbeat_age(path) or 99) < 0.5, what="a fresh heartbeat")
        assert _health(path, 1.0) == 0
    finally:
        frozen[0].thawed.set()
        worker.request_shutdown()
        thread.join(10)
    assert not thread.is_alive()


def test_heartbeat_touches_at_most_twice_a_second(tmp_path: Path) -> None:
    path = tmp_path / "beat"
    beat = Heartbeat(path)
    beat(100.0)
    os.utime(path, (1.0, 1.0))
    beat(100.2)  # within half a second of the last touch: left alone
    assert path.stat().st_mtime == 1.0
    beat(100.6)
    assert abs(path.stat().st_mtime - time.time()) < 5


def test_health_without_a_file_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("CONSUMER_HEALTH_FILE", raising=False)
    assert main(["health"]) == 2
    assert "CONSUMER_HEALTH_FILE" in capsys.readouterr().err


def test_a_heartbeat_path_that_cannot_be_read_is_unhealthy_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    regular = tmp_path / "file"
    regular.write_text("")
    assert main(["health", "--file", str(regular / "x")]) == EXIT_UNHEALTHY  # NotADirectoryError
    assert capsys.readouterr().out.startswith(f"unhealthy: cannot read the heartbeat at {regular / 'x'}")


def _error(capsys: pytest.CaptureFixture[str]) -> str:
    """The one ``error:`` line on stderr (the structured log carries the same error as JSON)."""
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, lines
    return lines[0]


def test_a_bad_bound_names_the_flag_or_the_variable_that_set_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(tmp_path / "beat")
    assert main(["health", "--file", path, "--max-age", "-1"]) == 2
    assert _error(capsys) == "error: --max-age: must be a finite number > 0, got -1.0"
    assert main(["health", "--file", path, "--max-age", "inf"]) == 2
    assert _error(capsys).startswith("error: --max-age: ")
    monkeypatch.setenv("CONSUMER_HEALTH_MAX_AGE_SECONDS", "0")
    assert main(["health", "--file", path]) == 2
    assert _error(capsys).startswith("error: CONSUMER_HEALTH_MAX_AGE_SECONDS: must be")
    assert main(["health", "--file", ""]) == 2
    assert _error(capsys) == "error: --file: must not be empty"


def test_a_bad_log_level_does_not_fail_the_health_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The check logs nothing: the worker itself refuses the level when it starts."""
    path = tmp_path / "beat"
    path.touch()
    monkeypatch.setenv("CONSUMER_LOG_LEVEL", "verbose")
    assert _health(path, 30) == 0
    assert capsys.readouterr().err == ""
