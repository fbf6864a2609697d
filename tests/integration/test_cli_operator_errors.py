"""The operator's journey through the real CLI (``python -m consumer ...`` as a subprocess, against the
emulators where it needs AWS): what the audit of 2026-11-29 found wrong, each held to what the docs say.

- ``replay``'s undo command names both tables, so that run as printed it moves this application's
  checkpoint and no other's (it moved another application's, whose tables the environment named);
- Ctrl-D and Ctrl-C at the replay prompt are "not answered yes": ``aborted``, exit 3, no traceback;
- an endpoint with a bad port is refused like any other bad endpoint (exit 2, the variable named);
- Ctrl-C during ``run``'s start-up checks or an operator command: ``interrupted``, exit 130, no traceback;
- ``status`` into a pipe whose reader stopped early ends quietly with 141;
- a processor constructor calling ``sys.exit()`` (or raising ``KeyboardInterrupt``) during the start-up check
  is reported like one that raises (exit 2, the path and the variable named, a ``fatal`` event);
- ``drain`` of a worker ``status`` shows dead is refused (exit 2), not reported as done;
- and the small ones: a bad argument named with its command, a bad region named as ``AWS_REGION``,
  ``health --file <directory>`` unhealthy, ``status --count`` without ``--watch`` refused.
"""

from __future__ import annotations

import json
import os
import pty
import select
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3
import pytest

from consumer import BaseProcessor
from consumer.errors import ProcessorLoadError
from consumer.leases.dynamodb import DynamoDBLeaseRepository
from consumer.leases.model import Lease, WorkerItem
from consumer.lifecycle.processor import ProcessRecordsInput
from consumer.records import Position

from .support import REPO, Names, create_stream, make_names, put_numbered, sigint_default, stored_checkpoints

pytestmark = pytest.mark.integration

TIMEOUT = 60  # any one command; a passing one takes a few seconds


class ExitsZero(BaseProcessor):
    """A constructor that calls ``sys.exit(0)``: a clean stop, to the shell."""

    def __init__(self) -> None:
        sys.exit(0)

    def process_records(self, data: ProcessRecordsInput) -> None:
        raise AssertionError("never constructed")


class ExitsThree(BaseProcessor):
    """A constructor that calls ``sys.exit(3)``: the code of an unconfirmed replay."""

    def __init__(self) -> None:
        sys.exit(3)

    def process_records(self, data: ProcessRecordsInput) -> None:
        raise AssertionError("never constructed")


class Interrupts(BaseProcessor):
    """A constructor that raises ``KeyboardInterrupt``."""

    def __init__(self) -> None:
        raise KeyboardInterrupt

    def process_records(self, data: ProcessRecordsInput) -> None:
        raise AssertionError("never constructed")


def _env(emulators: Any, names: Names | None = None, **extra: str) -> dict[str, str]:
    env = {**os.environ, **emulators.env()}
    for key in ("CONSUMER_LEASE_TABLE", "CONSUMER_CHECKPOINT_TABLE"):
        env.pop(key, None)
    if names is not None:
        env["CONSUMER_LEASE_TABLE"] = names.lease_table
        env["CONSUMER_CHECKPOINT_TABLE"] = names.checkpoint_table
    env.update(extra)
    return env


def _cli(env: Mapping[str, str], *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "consumer", *args],
        cwd=REPO,
        env=dict(env),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def _said(stderr: str) -> list[str]:
    """What the command said on stderr, its JSON log lines left out."""
    return [line for line in stderr.splitlines() if line.strip() and not line.startswith("{")]


def _logged(stderr: str, event: str) -> list[dict[str, Any]]:
    return [
        e
        for line in stderr.splitlines()
        if line.startswith("{") and (e := json.loads(line))["event"] == event
    ]


def _one_error(out: subprocess.CompletedProcess[str], code: int, *needles: str) -> str:
    """The command's one ``error:`` line, after checking its exit code, its needles and that nothing else
    (no traceback) was said."""
    said = _said(out.stderr)
    assert out.returncode == code and len(said) == 1 and said[0].startswith("error: "), (
        out.returncode,
        out.stderr,
    )
    assert all(n in said[0] for n in needles), said[0]
    return said[0]


def _fleet(
    kinesis: Any, dynamodb: Any, unique_name: Any, shards: int = 1
) -> tuple[Names, list[str], list[str]]:
    """Tables, a stream with 10 records and a lease for each shard (nobody owns them)."""
    names = make_names(unique_name, dynamodb)
    ids = create_stream(kinesis, names.stream, shards)
    seqs = put_numbered(kinesis, names.stream, "r", 10)
    repo = DynamoDBLeaseRepository(dynamodb, names.lease_table, names.checkpoint_table)
    for shard in ids:
        repo.create_lease(Lease(names.stream, shard))
    return names, ids, seqs


def _checkpoint(dynamodb: Any, names: Names, shard: str, sequence: str) -> None:
    repo = DynamoDBLeaseRepository(dynamodb, names.lease_table, names.checkpoint_table)
    (lease,) = [x for x in repo.snapshot().leases if x.shard_id == shard]
    repo.reset_checkpoint(lease, Position(sequence, 0))


def test_replay_undo_names_both_tables_and_restores_only_its_own_checkpoint(
    emulators, kinesis_client, dynamodb_client, unique_name
) -> None:
    """Two applications read one stream. The operator replays app2's shard (tables given by flag) in a shell
    whose CONSUMER_* tables are app1's, then runs the printed undo there, as printed: it restores app2's
    checkpoint and leaves app1's where it was (before, it moved app1's and app2 stayed replayed)."""
    app1, (shard,), seqs = _fleet(kinesis_client, dynamodb_client, unique_name)
    app2 = make_names(unique_name, dynamodb_client)
    app2.stream = app1.stream
    DynamoDBLeaseRepository(dynamodb_client, app2.lease_table, app2.checkpoint_table).create_lease(
        Lease(app1.stream, shard)
    )
    _checkpoint(dynamodb_client, app1, shard, seqs[3])  # app1 stopped at record 3
    _checkpoint(dynamodb_client, app2, shard, seqs[9])  # app2 read everything
    shell = _env(emulators, app1)  # the operator's shell names app1's tables
    tables = ("--lease-table", app2.lease_table, "--checkpoint-table", app2.checkpoint_table)
    done = _cli(shell, "replay", *tables, "--stream", app1.stream, "--sequence", seqs[5], "--yes")
    assert done.returncode == 0, done.stderr
    assert stored_checkpoints(dynamodb_client, app2.checkpoint_table)[shard][:2] == (seqs[5], -1)
    (undo,) = [line.removeprefix("undo: ") for line in done.stdout.splitlines() if line.startswith("undo: ")]
    expected = (
        f"python -m consumer replay --lease-table {app2.lease_table} --checkpoint-table {app2.checkpoint_table} "
        f"--stream {app1.stream} --shard {shard} --checkpoint {seqs[9]}/0 --yes"
    )
    assert undo == expected
    (logged,) = _logged(done.stderr, "checkpoint_replayed")
    assert logged["undo"] == expected  # the log says the same

    argv = shlex.split(undo)
    assert argv[:3] == ["python", "-m", "consumer"]
    restored = _cli(shell, *argv[3:])  # as printed, in the same shell
    assert restored.returncode == 0, restored.stderr
    assert stored_checkpoints(dynamodb_client, app2.checkpoint_table)[shard][:2] == (seqs[9], 0)
    assert stored_checkpoints(dynamodb_client, app1.checkpoint_table)[shard][:2] == (seqs[3], 0)  # untouched


def _prompted(proc: subprocess.Popen[bytes], prompt: bytes = b"type 'yes' to continue") -> bytes:
    """What the process wrote to stdout until it shows ``prompt`` (it waits for an answer then)."""
    assert proc.stdout is not None
    seen = b""
    deadline = time.monotonic() + TIMEOUT
    while prompt not in seen:
        left = deadline - time.monotonic()
        assert left > 0 and proc.poll() is None, f"no prompt: {seen!r}"
        ready, _, _ = select.select([proc.stdout], [], [], left)
        if ready:
            chunk = os.read(proc.stdout.fileno(), 4096)
            assert chunk, f"stdout closed before the prompt: {seen!r}"
            seen += chunk
    return seen


@pytest.mark.parametrize("answer", ["ctrl-d", "ctrl-c", "no", "yes"])
def test_the_replay_prompt_takes_ctrl_d_and_ctrl_c_as_no(
    emulators, kinesis_client, dynamodb_client, unique_name, answer: str
) -> None:
    """At the prompt (stdin a terminal), Ctrl-D (end of input) and Ctrl-C (SIGINT) abort: ``aborted``,
    exit 3, nothing moved; before, a traceback and exit 1 or 130. A typed ``no`` aborts too; ``yes`` replays.
    Ctrl-C comes right after the prompt shows: the prompt waits in short selects, so it is seen at once."""
    names, (shard,), seqs = _fleet(kinesis_client, dynamodb_client, unique_name)
    _checkpoint(dynamodb_client, names, shard, seqs[9])
    controller, terminal = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "consumer", "replay", "--stream", names.stream, "--sequence", seqs[2]],
            cwd=REPO,
            env=_env(emulators, names),
            stdin=terminal,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            preexec_fn=sigint_default,  # noqa: PLW1509 - one signal() call: as in a terminal
        )
        try:
            shown = _prompted(proc)
            assert b"loses the lease" in shown  # the plan was printed first
            if answer == "ctrl-d":
                os.write(controller, b"\x04")  # the terminal's end of input, at the start of a line
            elif answer == "ctrl-c":
                proc.send_signal(signal.SIGINT)
            else:
                os.write(controller, answer.encode() + b"\n")
            _, err = proc.communicate(timeout=TIMEOUT)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(TIMEOUT)
    finally:
        os.close(controller)
        os.close(terminal)
    stderr = err.decode()
    if answer == "yes":
        assert proc.returncode == 0, stderr
        assert stored_checkpoints(dynamodb_client, names.checkpoint_table)[shard][0] != seqs[9]  # replayed
        return
    assert proc.returncode == 3, stderr
    assert _said(stderr) == ["aborted"], stderr
    assert stored_checkpoints(dynamodb_client, names.checkpoint_table)[shard][:2] == (seqs[9], 0)


def test_an_endpoint_with_a_bad_port_is_refused_naming_the_variable(
    emulators, kinesis_client, dynamodb_client, unique_name
) -> None:
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 1)
    run = {
        "CONSUMER_APPLICATION": "badport",
        "CONSUMER_STREAMS": names.stream,
        "CONSUMER_PROCESSOR": "consumer.examples.logging_processor:LoggingProcessor",
    }
    cases = [
        (("status",), {"AWS_ENDPOINT_URL": "http://127.0.0.1:99999"}, "AWS_ENDPOINT_URL"),
        (("status",), {"AWS_ENDPOINT_URL": "http://127.0.0.1:abc"}, "AWS_ENDPOINT_URL"),
        (
            ("drain", "w1"),
            {"AWS_ENDPOINT_URL_DYNAMODB": "http://127.0.0.1:99999"},
            "AWS_ENDPOINT_URL_DYNAMODB",
        ),
        (("run",), {**run, "AWS_ENDPOINT_URL_KINESIS": "http://127.0.0.1:99999"}, "AWS_ENDPOINT_URL_KINESIS"),
    ]
    for args, extra, variable in cases:
        out = _cli(_env(emulators, names, **extra), *args)
        _one_error(out, 2, f"error: {variable}: not a URL: '{extra[variable]}'")
        assert _logged(out.stderr, "fatal")


@contextmanager
def _silent_endpoint() -> Iterator[tuple[str, threading.Event]]:
    """An endpoint that accepts connections and never answers; the event is set once one is accepted."""
    accepted = threading.Event()
    stop = threading.Event()
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    server.settimeout(0.2)
    held: list[socket.socket] = []

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            held.append(conn)
            accepted.set()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}", accepted
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        server.close()


@pytest.mark.parametrize(
    "args",
    [("run",), ("status",), ("drain", "w1"), ("replay", "--stream", "s", "--sequence", "1", "--yes")],
    ids=["run", "status", "drain", "replay"],
)
def test_ctrl_c_while_a_call_waits_is_one_line_and_exit_130(emulators, args: tuple[str, ...]) -> None:
    """SIGINT while ``run``'s start-up checks (or an operator command) wait on DynamoDB: ``interrupted``
    on stderr, exit 130, no traceback (before: a KeyboardInterrupt traceback)."""
    with _silent_endpoint() as (url, accepted):
        env = _env(
            emulators,
            AWS_ENDPOINT_URL=url,
            AWS_ENDPOINT_URL_KINESIS=url,
            CONSUMER_LEASE_TABLE="leases",
            CONSUMER_CHECKPOINT_TABLE="checkpoints",
            CONSUMER_APPLICATION="interrupted",
            CONSUMER_STREAMS="s",
            CONSUMER_PROCESSOR="consumer.examples.logging_processor:LoggingProcessor",
        )
        proc = subprocess.Popen(
            [sys.executable, "-m", "consumer", *args],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=sigint_default,  # noqa: PLW1509 - one signal() call: as in a terminal
        )
        try:
            assert accepted.wait(TIMEOUT), "the command never called the endpoint"
            assert proc.poll() is None
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=TIMEOUT)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(TIMEOUT)
    assert proc.returncode == 130, err
    assert _said(err) == ["interrupted"], err


@pytest.mark.parametrize("buffered", [False, True], ids=["unbuffered", "buffered"])
@pytest.mark.parametrize("json_out", [False, True], ids=["table", "json"])
def test_status_into_a_closed_pipe_exits_141_quietly(
    emulators, kinesis_client, dynamodb_client, unique_name, buffered: bool, json_out: bool
) -> None:
    """``status | true``: the reader is gone before the first write. Exit 141 (as a shell reports a command
    SIGPIPE ended), nothing on stderr; before, a BrokenPipeError traceback and exit 1 (120 when buffered)."""
    names, _, _ = _fleet(kinesis_client, dynamodb_client, unique_name, shards=2)
    env = _env(emulators, names)
    env.pop("PYTHONUNBUFFERED", None)
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"  # as the image sets it
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has gone: the first write fails
    try:
        out = subprocess.run(
            [sys.executable, "-m", "consumer", "status", *(["--json"] if json_out else [])],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
    finally:
        os.close(write_end)
    assert out.returncode == 141, out.stderr
    assert out.stderr == "", out.stderr


@pytest.mark.parametrize(
    ("cls", "what"),
    [
        ("ExitsZero", "SystemExit: sys.exit(0) was called"),
        ("ExitsThree", "SystemExit: sys.exit(3) was called"),
        ("Interrupts", "KeyboardInterrupt"),
    ],
)
def test_a_constructor_that_exits_is_reported_like_one_that_raises(
    emulators, kinesis_client, dynamodb_client, unique_name, cls: str, what: str
) -> None:
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 1)
    path = f"{__name__}:{cls}"
    env = _env(emulators, names, CONSUMER_APPLICATION="exits", CONSUMER_STREAMS=names.stream)
    by_variable = _cli({**env, "CONSUMER_PROCESSOR": path}, "run")
    line = _one_error(
        by_variable,
        2,
        f"error: CONSUMER_PROCESSOR (stream '{names.stream}'): processor '{path}': constructing it failed: {what}",
    )
    (fatal,) = _logged(by_variable.stderr, "fatal")
    assert fatal["error"] == line.removeprefix("error: ")
    by_flag = _cli(env, "run", "--processor", path)
    _one_error(by_flag, 2, "--processor (CONSUMER_PROCESSOR)", f"processor '{path}'", what)
    assert dynamodb_client.scan(TableName=names.lease_table, ConsistentRead=True)["Items"] == []


def test_a_python_api_factory_that_exits_is_a_processor_load_error(
    emulators, kinesis_client, dynamodb_client, unique_name
) -> None:
    """The same for a factory given in code (``create_worker``): a ``ProcessorLoadError``, not the end of the
    embedding application."""
    from consumer import create_worker
    from consumer.config import StreamSpec, WorkerConfig

    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 1)

    def factory() -> BaseProcessor:
        sys.exit(5)

    config = WorkerConfig(
        application="api-exits",
        lease_table=names.lease_table,
        checkpoint_table=names.checkpoint_table,
        streams=(StreamSpec(names.stream, factory),),
    )
    env = emulators.env()
    session = boto3.session.Session(
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        region_name=env["AWS_REGION"],
    )
    endpoints = {"dynamodb": env["AWS_ENDPOINT_URL"], "kinesis": env["AWS_ENDPOINT_URL_KINESIS"]}
    with pytest.raises(ProcessorLoadError, match=rf"stream '{names.stream}'.*: SystemExit: 5"):
        create_worker(config, session=session, endpoints=endpoints)


def test_drain_of_a_dead_worker_is_refused(emulators, dynamodb_client, unique_name) -> None:
    """A worker whose heartbeat is older than the lease duration (``status`` shows it dead) cannot drain:
    refused with exit 2, saying so; a live one is asked (exit 0)."""
    names = make_names(unique_name, dynamodb_client)
    repo = DynamoDBLeaseRepository(dynamodb_client, names.lease_table, names.checkpoint_table)
    now_ms = int(time.time() * 1000)
    repo.register_worker(WorkerItem("w-dead", started_ms=now_ms - 7_200_000, incarnation="a"))  # 2 h silent
    repo.register_worker(WorkerItem("w-live", started_ms=now_ms, incarnation="b"))  # alive for 10 min
    env = _env(emulators, names, CONSUMER_LEASE_DURATION_SECONDS="600")  # however slow the commands start
    status = json.loads(_cli(env, "status", "--json").stdout)
    assert {w["worker_id"]: w["state"] for w in status["workers"]} == {"w-dead": "dead", "w-live": "alive"}
    dead = _cli(env, "drain", "w-dead")
    _one_error(dead, 2, "no live worker 'w-dead'", "looks dead", "taken over", "once they expire")
    assert dead.stdout == ""
    assert not repo.get_worker("w-dead").drain_requested  # type: ignore[union-attr]
    # judged with the lease duration `status` uses: with 3 hours of it, the worker is alive
    longer = _cli({**env, "CONSUMER_LEASE_DURATION_SECONDS": "10800"}, "drain", "w-dead")
    assert longer.returncode == 0, longer.stderr
    live = _cli(env, "drain", "w-live")
    assert live.returncode == 0 and "drain requested: w-live" in live.stdout, live.stderr
    assert repo.get_worker("w-live").drain_requested  # type: ignore[union-attr]


def test_the_small_ones(emulators, dynamodb_client, unique_name, tmp_path: Path) -> None:
    names = make_names(unique_name, dynamodb_client)
    env = _env(emulators, names)
    _one_error(
        _cli(env, "status", "--frob"),
        2,
        "error: python -m consumer status: unrecognized arguments: --frob (see python -m consumer status --help)",
    )
    _one_error(
        _cli(env, "drain", "w1", "w2"), 2, "error: python -m consumer drain: unrecognized arguments: w2"
    )
    region = {k: v for k, v in env.items() if k not in ("AWS_DEFAULT_REGION", "AWS_REGION")}
    _one_error(
        _cli({**region, "AWS_REGION": "not_a_region"}, "status"),
        2,
        "error: AWS_REGION: not an AWS region: 'not_a_region'",
    )
    _one_error(_cli(env, "status", "--count", "3"), 2, "error: --count: ", "--watch")
    directory = tmp_path / "heartbeat"
    directory.mkdir()
    health = _cli(env, "health", "--file", str(directory), "--max-age", "60")
    assert health.returncode == 1 and "unhealthy" in health.stdout and "directory" in health.stdout, health
    assert health.stderr == ""
