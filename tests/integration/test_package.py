"""The package as a team gets it: the built wheel in a clean virtualenv (no rich), its version, and the
README's embedding example run unchanged against the emulators; the embedding API in process (no signal
handler unless asked, endpoints and region given in code)."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from consumer import BaseProcessor, ProcessRecordsInput, StreamSpec, Worker, WorkerConfig, create_worker
from consumer._version import __version__
from consumer.dynamo import create_tables
from consumer.errors import ConfigError, ProcessorLoadError
from consumer.examples.copier import StreamCopier

from .support import (
    REPO,
    create_stream,
    make_names,
    put_records,
    sigint_default,
    stored_checkpoints,
    wait_until,
)

pytestmark = pytest.mark.integration


README_REGION = "eu-west-1"  # the region the README's example names


def readme_example() -> str:
    """The Python block the README marks as the embedding example, as it is."""
    text = (REPO / "README.md").read_text()
    marker = text.index("<!-- embedding-example")
    match = re.compile(r"```python\n(.*?)```", re.S).search(text, marker)
    assert match is not None, "the README's embedding example has no python block after its marker"
    return match.group(1)


@pytest.fixture(scope="module")
def clean_venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh virtualenv with the wheel built from this checkout installed the normal way (with its
    dependencies, without extras)."""
    root = tmp_path_factory.mktemp("package")
    source, dist = root / "source", root / "dist"
    # The sdist's files, copied: setuptools writes build/ and *.egg-info beside the sources it builds.
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(REPO / name, source / name)
    shutil.copytree(
        REPO / "consumer", source / "consumer", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    wheel_cmd = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation"]
    subprocess.run([*wheel_cmd, "-w", dist, source], check=True, cwd=root, timeout=300)
    (wheel,) = dist.glob("kinesis_fleet_consumer-*.whl")
    venv = root / "venv"
    # Installed into the venv by this interpreter's pip (``--python``): the same install as the venv's own
    # pip would make, without bootstrapping a pip into it (ensurepip takes seconds) or compiling every module.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True, timeout=120)
    pip = [sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "--disable-pip-version-check"]
    subprocess.run([*pip, "install", "--quiet", "--no-compile", wheel], check=True, timeout=600)
    yield venv


def _python(venv: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(venv / "bin" / "python"), *args],
        cwd=venv.parent,  # not the checkout: only the installed package can be imported
        env=env or {k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_wheel_carries_its_licence_version_and_metadata_and_not_rich(clean_venv: Path) -> None:
    probe = _python(
        clean_venv,
        "-c",
        "import consumer, importlib.metadata as m, importlib.util as u; d = m.metadata('kinesis-fleet-consumer');"
        "print(consumer.__version__, m.version('kinesis-fleet-consumer'), d['License-Expression'],"
        " bool(d.get_all('Project-URL')), bool(d.get_all('Classifier')), d['Description-Content-Type'],"
        " u.find_spec('rich') is not None, consumer.__file__)",
    )
    assert probe.returncode == 0, probe.stderr
    version, meta_version, licence, urls, classifiers, readme, has_rich, where = probe.stdout.split()
    assert version == meta_version == __version__
    assert (licence, urls, classifiers, readme, has_rich) == (
        "Apache-2.0",
        "True",
        "True",
        "text/markdown",
        "False",
    )
    assert str(clean_venv) in where  # the installed copy, not the checkout
    licence_files = _python(
        clean_venv,
        "-c",
        "import importlib.metadata as m; print(m.metadata('kinesis-fleet-consumer').get_all('License-File'))",
    )
    assert "LICENSE" in licence_files.stdout
    for command in (
        [str(clean_venv / "bin" / "python"), "-m", "consumer"],
        [str(clean_venv / "bin" / "kinesis-consumer")],
    ):
        out = subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=60, check=False)
        assert out.returncode == 0 and out.stdout.strip().endswith(__version__), out


def test_status_watch_without_rich_says_how_to_get_it(
    clean_venv: Path, emulators, dynamodb_client, unique_name
) -> None:
    names = make_names(unique_name, dynamodb_client)
    env = {
        **os.environ,
        **emulators.env(),
        "CONSUMER_LEASE_TABLE": names.lease_table,
        "CONSUMER_CHECKPOINT_TABLE": names.checkpoint_table,
    }
    out = _python(clean_venv, "-m", "consumer", "status", "--watch", "--no-lag", env=env)
    assert out.returncode == 2, out
    assert "Traceback" not in out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "pip install 'kinesis-fleet-consumer[watch]'" in errors[0], out.stderr


def _readme_client(env: dict[str, str], service: str):
    endpoint = env["AWS_ENDPOINT_URL_KINESIS"] if service == "kinesis" else env["AWS_ENDPOINT_URL"]
    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name=README_REGION,
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
    )


def _readme_resources(emulators) -> tuple[dict[str, str], list[dict]]:
    """The stream and tables the README's example names, in its region, and records on two shards."""
    env = emulators.env()
    kinesis = _readme_client(env, "kinesis")
    ddb = _readme_client(env, "dynamodb")
    create_stream(kinesis, "orders", 2)
    create_tables(ddb, "orders-leases", "orders-checkpoints")
    put = put_records(kinesis, "orders", [f"o{i}".encode() for i in range(60)])
    return env, put


def _readme_state(env: dict[str, str], lines: list[str]) -> str:
    """For a failure message: the orders printed per shard, the tables' items and what each shard holds."""
    printed: dict[str, int] = {}
    for line in lines:
        if line.startswith("order "):
            shard = line.split()[3]
            printed[shard] = printed.get(shard, 0) + 1
    ddb, kinesis = _readme_client(env, "dynamodb"), _readme_client(env, "kinesis")
    tables = {
        t: ddb.scan(TableName=t, ConsistentRead=True)["Items"]
        for t in ("orders-leases", "orders-checkpoints")
    }
    held = {}
    for shard in kinesis.list_shards(StreamName="orders")["Shards"]:
        it = kinesis.get_shard_iterator(
            StreamName="orders", ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        held[shard["ShardId"]] = len(kinesis.get_records(ShardIterator=it)["Records"])
    return f"orders printed per shard {printed}; records per shard {held}; tables {tables}"


def test_the_readme_embedding_example_runs_from_the_installed_wheel(clean_venv: Path, emulators) -> None:
    env, put = _readme_resources(emulators)
    script = clean_venv.parent / "embed_example.py"
    script.write_text(readme_example())
    # The example configures no logging (a library leaves that to its application): a sitecustomize of
    # our own writes the worker's INFO logs to a file (its stderr stays the example's), so that a failure
    # says what the worker did.
    logs = clean_venv.parent / "worker_logs"
    logs.mkdir(exist_ok=True)
    log_file = logs / "worker.log"
    (logs / "sitecustomize.py").write_text(
        f"import logging\nlogging.basicConfig(filename={str(log_file)!r}, level=logging.INFO)\n"
    )
    child_env = {
        **{k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        **env,
        "CONSUMER_LOG_LEVEL": "INFO",
        "PYTHONPATH": str(logs),  # nothing but the sitecustomize: the package still comes from the venv
    }
    proc = subprocess.Popen(
        [str(clean_venv / "bin" / "python"), str(script)],
        cwd=clean_venv.parent,
        env=child_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=sigint_default,  # noqa: PLW1509 - one signal() call: as in a terminal, whatever we do with SIGINT
    )
    lines: list[str] = []
    stderr: list[str] = []
    readers = [
        threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True),  # type: ignore[union-attr]
        threading.Thread(target=lambda: stderr.extend(iter(proc.stderr.readline, "")), daemon=True),  # type: ignore[union-attr]
    ]
    for reader in readers:
        reader.start()
    ddb = _readme_client(env, "dynamodb")
    last = {}
    for r in put:
        last[r["ShardId"]] = r["SequenceNumber"]
    try:
        try:
            wait_until(
                lambda: sum(line.startswith("order ") for line in lines) >= len(put),
                timeout=120,
                what="every order printed",
            )
            wait_until(
                lambda: {s: c[0] for s, c in stored_checkpoints(ddb, "orders-checkpoints").items()} == last,
                timeout=30,
                what="checkpoints at the last record of each shard",
            )
        except AssertionError as e:  # what the example said, and what the emulators hold, tell why
            raise AssertionError(
                f"{e}; {_readme_state(env, lines)}; printed {lines[-5:]}; its stderr ends {''.join(stderr)[-2000:]}; "
                f"its log ends {log_file.read_text()[-6000:] if log_file.exists() else '(none)'}"
            ) from None
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl-C: Python's own handler, the example's except clause
        code = proc.wait(timeout=120)
    for reader in readers:
        reader.join(10)
    orders = [line.split()[1] for line in lines if line.startswith("order ")]
    assert sorted(orders) == sorted(f"o{i}" for i in range(60)) and len(set(orders)) == len(orders)
    log = "".join(stderr)
    assert code == 0, log[-3000:]
    assert "Traceback" not in log
    workers = ddb.scan(TableName="orders-leases", ConsistentRead=True)["Items"]
    assert not [i for i in workers if i["lease_key"]["S"].startswith("worker#")]  # deregistered


class Collect(BaseProcessor):
    seen: list[bytes] = []

    def process_records(self, data: ProcessRecordsInput) -> None:
        Collect.seen.extend(r.data for r in data.records)


def test_create_worker_in_process_installs_no_signal_handler_unless_asked(
    emulators, kinesis_client, dynamodb_client, unique_name
) -> None:
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 1)
    put_records(kinesis_client, names.stream, [b"a", b"b", b"c"])
    config = WorkerConfig(
        application="embed",
        lease_table=names.lease_table,
        checkpoint_table=names.checkpoint_table,
        streams=(StreamSpec(names.stream, Collect),),
    )
    session = boto3.Session(
        aws_access_key_id=emulators.env()["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=emulators.env()["AWS_SECRET_ACCESS_KEY"],
    )
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    endpoints = {"kinesis": emulators.kinesis_endpoint, "dynamodb": emulators.aws_endpoint}
    with open(os.devnull, "w") as devnull:
        worker = Worker.create(
            config, session=session, region=emulators.region, endpoints=endpoints, metrics_out=devnull
        )
        with worker:
            assert worker.running
            assert {sig: signal.getsignal(sig) for sig in before} == before
            wait_until(lambda: Collect.seen == [b"a", b"b", b"c"], timeout=30, what="the three records")
        assert not worker.running and worker.stopped.is_set()
        # Asked for: installed while it runs, the previous handlers back once it has stopped.
        asked = create_worker(
            config, session=session, region=emulators.region, endpoints=endpoints, metrics_out=devnull
        )
        asked.start(handle_signals=True)
        try:
            assert signal.getsignal(signal.SIGTERM) != before[signal.SIGTERM]
            os.kill(os.getpid(), signal.SIGTERM)  # the graceful shutdown, as a container stop starts it
            assert asked.join(timeout=30)
        finally:
            asked.stop(timeout=30)
    assert {sig: signal.getsignal(sig) for sig in before} == before
    # A factory that returns something else than a processor is refused at creation, as the CLI refuses it.
    loop = dataclasses.replace(
        config, streams=(StreamSpec(names.stream, lambda: StreamCopier(object(), names.stream)),)
    )
    with pytest.raises(ConfigError, match=r"^COPIER_TARGET_STREAM: must differ from the stream being copied"):
        create_worker(loop, session=session, region=emulators.region, endpoints=endpoints)
    for factory in (object, lambda: None):
        bad = dataclasses.replace(config, streams=(StreamSpec(names.stream, factory),))
        with pytest.raises(
            ProcessorLoadError, match=r"^StreamSpec.processor_factory \(stream '.*'\): the factory "
        ):
            create_worker(bad, session=session, region=emulators.region, endpoints=endpoints)
