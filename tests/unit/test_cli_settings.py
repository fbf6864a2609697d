"""Settings the CLI refuses before it makes any AWS call: one ``error:`` line naming what the operator set
(the flag when a flag was given, else the variable), exit 2; ``--help`` and ``--version`` are never blocked.
Run in-process (``consumer.cli.main``): nothing here reaches AWS."""

from __future__ import annotations

import pytest

from consumer.cli import main

_ENV = {
    "CONSUMER_APPLICATION": "a",
    "CONSUMER_LEASE_TABLE": "appsig-leases",
    "CONSUMER_CHECKPOINT_TABLE": "appsig-checkpoints",
    "CONSUMER_STREAMS": "s4",
    "CONSUMER_PROCESSOR": "consumer.examples.logging_processor:LoggingProcessor",
    "AWS_REGION": "us-east-1",
    "AWS_ENDPOINT_URL": "http://127.0.0.1:9",  # a call that slipped through would fail, not reach AWS
}


@pytest.fixture(autouse=True)
def _environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CONSUMER_LOG_LEVEL", raising=False)
    monkeypatch.delenv("CONSUMER_LEASE_DURATION_SECONDS", raising=False)
    for key, value in _ENV.items():
        monkeypatch.setenv(key, value)


def _error(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """Run ``python -m consumer *args``; its one ``error:`` line (exit 2)."""
    assert main(list(args)) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("run", "--lease-table", ""), "error: --lease-table: must not be empty"),
        (("run", "--processor", " "), "error: --processor: must not be empty"),
        (("status", "--lease-table", ""), "error: --lease-table: must not be empty"),
        (("create-tables", "--checkpoint-table", ""), "error: --checkpoint-table: must not be empty"),
        (("replay", "--stream", "s4", "--shard", "", "--yes"), "error: --shard: must not be empty"),
        (("drain", " "), "error: worker: must not be empty (the worker id, see `status`)"),
    ],
)
def test_a_flag_given_empty_is_refused_not_replaced_by_the_variable(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...], expected: str
) -> None:
    assert _error(capsys, *args) == expected


def test_a_processor_given_by_flag_is_named_by_its_flag(capsys: pytest.CaptureFixture[str]) -> None:
    line = _error(capsys, "run", "--processor", "x:y")
    assert line.startswith("error: --processor (CONSUMER_PROCESSOR): processor 'x:y': cannot import"), line
    line = _error(capsys, "run", "--streams", "s4=x:y")
    assert line.startswith("error: --streams (CONSUMER_STREAMS): processor 'x:y'"), line


def test_one_table_for_leases_and_checkpoints_is_refused_by_every_command(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    same = "must differ from the lease table ('same1')"
    for command in (
        ("create-tables",),
        ("status",),
        ("drain", "w1"),
        ("replay", "--stream", "s4", "--sequence", "1", "--yes"),
    ):
        line = _error(capsys, *command, "--lease-table", "same1", "--checkpoint-table", "same1")
        assert line.startswith(f"error: --checkpoint-table: {same}"), (command, line)
    monkeypatch.setenv("CONSUMER_CHECKPOINT_TABLE", "appsig-leases")
    line = _error(capsys, "status")
    assert line.startswith("error: CONSUMER_CHECKPOINT_TABLE: must differ from the lease table"), line
    line = _error(capsys, "run")
    assert line.startswith("error: CONSUMER_CHECKPOINT_TABLE: must differ from the lease table"), line
    line = _error(capsys, "run", "--checkpoint-table", "appsig-leases")
    assert line.startswith("error: --checkpoint-table (CONSUMER_CHECKPOINT_TABLE): must differ"), line


def test_status_checks_the_lease_duration_as_run_does(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _error(capsys, "status", "--lease-duration", "inf") == (
        "error: --lease-duration: must be a finite number > 0, got inf"
    )
    assert _error(capsys, "status", "--lease-duration", "0").startswith("error: --lease-duration: ")
    monkeypatch.setenv("CONSUMER_LEASE_DURATION_SECONDS", "-3")
    expected = "error: CONSUMER_LEASE_DURATION_SECONDS: must be a finite number > 0, got -3.0"
    assert _error(capsys, "status") == expected
    assert _error(capsys, "run") == expected  # the very same words


def test_a_bad_log_level_blocks_a_command_but_never_help_or_version(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONSUMER_LOG_LEVEL", "verbose")
    for args in (["--version"], ["--help"], ["run", "--help"]):
        with pytest.raises(SystemExit) as info:
            main(args)
        assert info.value.code == 0, args
    capsys.readouterr()
    assert _error(capsys, "status").startswith("error: CONSUMER_LOG_LEVEL: must be one of DEBUG, INFO")


@pytest.mark.parametrize("raw", ["", "warn", "WARNING", " fatal ", "critical", "debug"])
def test_log_levels_accept_the_logging_modules_aliases(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    """WARN and FATAL, as ``logging`` takes them: the command goes on (to the next setting it refuses)."""
    monkeypatch.setenv("CONSUMER_LOG_LEVEL", raw)
    assert _error(capsys, "status", "--lease-duration", "-1").startswith("error: --lease-duration: ")
