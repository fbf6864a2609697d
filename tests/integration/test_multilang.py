"""The MultiLang daemon with the real amazon-kclpy client: its own sample app (v3 interface), a v2 app,
hand-offs between two daemons, shard ends, and children that crash, hang or write garbage."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.integration.kclpy_support import (
    child_stderr,
    daemon_env,
    events,
    fetch_kclpy,
    sample_properties,
    sample_records,
    spawn_daemon,
)
from tests.integration.support import (
    REPO,
    create_stream,
    error_lines,
    make_names,
    put_records,
    run_multilang,
    stop_process,
    stored_checkpoints,
    wait_active,
    wait_until,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="session")
def kclpy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """amazon-kclpy 3.2.0 from PyPI (hash-checked), once per session; a failed download fails the test."""
    try:
        return fetch_kclpy(tmp_path_factory.mktemp("kclpy"))
    except Exception as exc:
        pytest.fail(f"cannot get the real amazon-kclpy client: {exc}")


def _owners(dynamodb: Any, table: str) -> dict[str, str | None]:
    items = dynamodb.scan(TableName=table, ConsistentRead=True)["Items"]
    return {
        i["shard_id"]["S"]: i.get("owner", {}).get("S")
        for i in items
        if i.get("item_type", {}).get("S") == "lease"
    }


def _processed(interface: str, logs: list[Path]) -> list[str]:
    """The sequence numbers the app processed, once per time it processed them."""
    if interface == "v3 sample":
        return [seq for _, seq, _ in sample_records(logs)]
    return [seq for _, seq, _ in _got(logs)]


@pytest.mark.parametrize("interface", ["v3 sample", "v2"])
def test_the_kclpy_sample_runs_unchanged_and_hands_off_with_nothing_lost_or_twice(
    interface: str,
    kclpy: Path,
    emulators: Any,
    kinesis_client: Any,
    dynamodb_client: Any,
    unique_name: Any,
    tmp_path: Path,
) -> None:
    """v3: the sample app itself, unchanged, with its properties changed only where they name the stream and
    region. v2: the same properties running a v2-interface app (checkpoints every batch)."""
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 2)
    if interface == "v3 sample":
        props = sample_properties(kclpy, names.stream, emulators.region, kclpy / "samples")
        props = props.rename(kclpy / "samples" / f"{names.stream}.properties")
    else:
        props = sample_properties(kclpy, names.stream, emulators.region, tmp_path)
        (tmp_path / "app.py").write_text(_V2_APP)
        text = props.read_text().replace(
            "executableName = sample_kclpy_app.py", f"executableName = {sys.executable} app.py"
        )
        props.write_text(text)
    env = daemon_env(emulators, kclpy)
    put = put_records(kinesis_client, names.stream, [f"first-{i}".encode() for i in range(120)])
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    a = spawn_daemon(props, names, env, "a", logs[0])
    b: subprocess.Popen[bytes] | None = None
    try:
        # The sample checkpoints after its first batch on each shard.
        wait_until(
            lambda: (
                len([c for c in stored_checkpoints(dynamodb_client, names.checkpoint_table).values() if c[0]])
                == 2
            ),
            30,
            "the sample's first checkpoints",
        )
        b = spawn_daemon(props, names, env, "b", logs[1])
        more: list[dict] = []
        producer = threading.Thread(
            target=lambda: [
                more.extend(
                    put_records(kinesis_client, names.stream, [f"more-{k}-{i}".encode() for i in range(20)])
                )
                or time.sleep(0.1)
                for k in range(10)
            ]
        )
        producer.start()
        wait_until(lambda: "b" in _owners(dynamodb_client, names.lease_table).values(), 30, "b takes a shard")
        assert stop_process(a) == 0
        producer.join()
        wanted = {r["SequenceNumber"] for r in put + more}
        wait_until(lambda: set(_processed(interface, logs)) >= wanted, 30, "every record processed")
        assert stop_process(b) == 0
    finally:
        for proc in (a, b):
            if proc is not None and proc.poll() is None:
                proc.kill()
    counts = Counter(_processed(interface, logs))
    assert set(counts) == wanted, "lost or unknown records"
    assert [s for s, n in counts.items() if n > 1] == [], "records processed twice across the hand-offs"
    cps = [e for log in logs for e in events(log) if e.get("event") == "multilang_checkpoint"]
    assert {e["during"] for e in cps} <= {"processRecords", "shutdownRequested"}
    if interface == "v3 sample":
        # Checkpoints only where the sample asks: after a child's first batch (then every 30 s: this test is
        # shorter) and when shutdown is requested (a hand-off, or SIGTERM).
        first_batch = Counter((e["shard"], e["during"]) for e in cps if e["during"] == "processRecords")
        assert max(first_batch.values()) <= 2  # at most one child per daemon per shard
    # a's shard to b on rebalance, a's other at SIGTERM, b's both at SIGTERM: each child asked to shut down
    stopped = [e for log in logs for e in events(log) if e.get("event") == "child_stopped"]
    assert len([e for e in stopped if e["after"] == "shutdownRequested"]) >= 4
    started = [e for log in logs for e in events(log) if e.get("event") == "child_started"]
    assert len(started) >= 4
    final = stored_checkpoints(dynamodb_client, names.checkpoint_table)
    by_shard: dict[str, str] = {}
    for r in put + more:
        by_shard[r["ShardId"]] = max(
            by_shard.get(r["ShardId"], "0"), r["SequenceNumber"], key=lambda s: (len(s), s)
        )
    assert {shard: c[0] for shard, c in final.items()} == by_shard  # ended on what was processed, no further


_V2_APP = '''#!/usr/bin/env python
"""A v2-interface app (amazon_kclpy.v2.processor): prints each record, checkpoints every batch."""
import sys
from amazon_kclpy import kcl
from amazon_kclpy.v2 import processor


class App(processor.RecordProcessorBase):
    def initialize(self, initialize_input):
        self.shard = initialize_input.shard_id

    def process_records(self, process_records_input):
        for r in process_records_input.records:
            sys.stderr.write("got %s %s %s\\n" % (self.shard, r.sequence_number, r.binary_data.decode()))
        process_records_input.checkpointer.checkpoint()

    def shutdown(self, shutdown_input):
        sys.stderr.write("shutdown %s %s\\n" % (self.shard, shutdown_input.reason))
        if shutdown_input.reason == "TERMINATE":
            shutdown_input.checkpointer.checkpoint()

    def shutdown_requested(self, shutdown_requested_input):
        shutdown_requested_input.checkpointer.checkpoint()


if __name__ == "__main__":
    kcl.KCLProcess(App()).run()
'''


def _app(tmp_path: Path, source: str, stream: str, region: str, **props: str) -> Path:
    app = tmp_path / "app.py"
    app.write_text(source)
    lines = {
        "executableName": f"{sys.executable} app.py",
        "streamName": stream,
        "applicationName": "mlapp",
        "regionName": region,
        "initialPositionInStream": "TRIM_HORIZON",
        **props,
    }
    path = tmp_path / "app.properties"
    path.write_text("".join(f"{k} = {v}\n" for k, v in lines.items()))
    return path


def _got(logs: list[Path]) -> list[tuple[str, str, str]]:
    out = []
    for text in child_stderr(logs).values():
        for line in text.decode().splitlines():
            if line.startswith("got "):
                _, shard, seq, data = line.split(" ", 3)
                out.append((shard, seq, data))
    return out


def test_a_v2_app_reads_across_a_shard_split_each_record_once(
    kclpy: Path, emulators: Any, kinesis_client: Any, dynamodb_client: Any, unique_name: Any, tmp_path: Path
) -> None:
    names = make_names(unique_name, dynamodb_client)
    (shard,) = create_stream(kinesis_client, names.stream, 1)
    props = _app(tmp_path, _V2_APP, names.stream, emulators.region)
    log = tmp_path / "d.log"
    before = put_records(kinesis_client, names.stream, [f"before-{i}".encode() for i in range(50)])
    daemon = spawn_daemon(props, names, daemon_env(emulators, kclpy), "d", log)
    try:
        wait_until(lambda: len(_got([log])) >= 50, 30, "the parent's records")
        kinesis_client.split_shard(
            StreamName=names.stream, ShardToSplit=shard, NewStartingHashKey=str(2**127)
        )
        wait_active(kinesis_client, names.stream)
        after = put_records(kinesis_client, names.stream, [f"after-{i}".encode() for i in range(50)])
        wait_until(lambda: len(_got([log])) >= 100, 30, "the children's records")
        assert stop_process(daemon) == 0
    finally:
        if daemon.poll() is None:
            daemon.kill()
    got = _got([log])
    assert Counter(seq for _, seq, _ in got) == Counter(r["SequenceNumber"] for r in before + after)
    text = b"".join(child_stderr([log]).values()).decode()
    assert f"shutdown {shard} TERMINATE" in text  # shardEnded reached the v2 interface as shutdown(TERMINATE)
    assert stored_checkpoints(dynamodb_client, names.checkpoint_table)[shard][0] == "SHARD_END"


_FLAKY_APP = '''#!/usr/bin/env python
"""A v3 app that fails once on each of three records (crash, hang, garbage on stdout); checkpoints only
at records whose data starts with "cp"."""
import os, sys, time
from amazon_kclpy import kcl
from amazon_kclpy.v3 import processor


def first_time(what):
    marker = "failed-" + what
    if os.path.exists(marker):
        return False
    open(marker, "w").close()
    return True


class App(processor.RecordProcessorBase):
    def initialize(self, initialize_input):
        sys.stderr.write("init at %s\\n" % initialize_input.sequence_number)

    def process_records(self, process_records_input):
        for r in process_records_input.records:
            data = r.binary_data.decode()
            if data == "crash" and first_time("crash"):
                sys.stderr.write("crashing now\\n")
                os._exit(3)
            if data == "hang" and first_time("hang"):
                time.sleep(3600)
            if data == "garbage" and first_time("garbage"):
                sys.stdout.write("this is not the protocol\\n")
                sys.stdout.flush()
                time.sleep(3600)
            sys.stderr.write("got x %s %s\\n" % (r.sequence_number, data))
            if data.startswith("cp"):
                process_records_input.checkpointer.checkpoint(r.sequence_number, r.sub_sequence_number)

    def lease_lost(self, lease_lost_input):
        pass

    def shard_ended(self, shard_ended_input):
        shard_ended_input.checkpointer.checkpoint()

    def shutdown_requested(self, shutdown_requested_input):
        pass


if __name__ == "__main__":
    kcl.KCLProcess(App()).run()
'''


def test_a_child_that_crashes_hangs_or_writes_garbage_is_restarted_and_nothing_is_skipped(
    kclpy: Path, emulators: Any, kinesis_client: Any, dynamodb_client: Any, unique_name: Any, tmp_path: Path
) -> None:
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 1)
    props = _app(
        tmp_path,
        _FLAKY_APP,
        names.stream,
        emulators.region,
        timeoutInSeconds="2",
        taskBackoffTimeMillis="100",
    )
    log = tmp_path / "f.log"
    payloads = ["a", "cp-1", "b", "crash", "c", "cp-2", "d", "hang", "e", "garbage", "f", "cp-3", "g"]
    put = put_records(kinesis_client, names.stream, [p.encode() for p in payloads])
    seq_of = {p: r["SequenceNumber"] for p, r in zip(payloads, put, strict=True)}
    daemon = spawn_daemon(props, names, daemon_env(emulators, kclpy), "f", log)
    try:
        wait_until(lambda: "g" in {d for _, _, d in _got([log])}, 60, "the last record")
        assert stop_process(daemon) == 0
    finally:
        if daemon.poll() is None:
            daemon.kill()
    got = [d for _, _, d in _got([log])]
    assert set(got) == set(payloads)
    failures = [e for e in events(log) if e.get("event") == "child_failed"]
    assert len(failures) == 3, failures
    assert "exited with code 3" in failures[0]["error"] and "crashing now" in failures[0]["stderr_tail"]
    assert "no answer within 2s" in failures[1]["error"]
    assert "not the protocol" in failures[2]["error"]
    # Each restarted child started at the last confirmed checkpoint and got every record after it again.
    inits = [e for e in events(log) if e.get("event") == "multilang_checkpoint"]
    assert [e["position"] for e in inits] == [f"{seq_of[p]}/0" for p in ("cp-1", "cp-2", "cp-3")]
    text = b"".join(child_stderr([log]).values()).decode()
    assert f"init at {seq_of['cp-1']}" in text and f"init at {seq_of['cp-2']}" in text
    # records after a checkpoint are given again to the restarted child (b after cp-1 twice), never skipped
    assert Counter(got)["b"] == 2 and Counter(got)["a"] == 1
    assert stored_checkpoints(dynamodb_client, names.checkpoint_table)  # nothing beyond cp-3 was asked for
    (cp,) = stored_checkpoints(dynamodb_client, names.checkpoint_table).values()
    assert cp[0] == seq_of["cp-3"]


_BAD_PROPERTIES = (
    ("streamName = s\napplicationName = a\n", "executableName: is required"),
    ("executableName = x\napplicationName = a\n", "streamName: is required (or streamArn)"),
    ("executableName = x\nstreamName = s\n", "applicationName: is required"),
    (
        "executableName = x\nstreamName = s\napplicationName = a\ncallProcessRecordsEvenForEmptyRecordList = true\n",
        "callProcessRecordsEvenForEmptyRecordList: 'true' is refused",
    ),
    (
        "executableName = x\nstreamName = s\napplicationName = a\nnoSuchKey = 1\n",
        "noSuchKey: unknown setting",
    ),
    (
        "executableName = x\nstreamName = s\napplicationName = a\nfailoverTimeMillis = soon\n",
        "failoverTimeMillis: must be a whole number of milliseconds",
    ),
    (
        "executableName = x\nstreamName = s\napplicationName = a\ninitialPositionInStream = AT_TIMESTAMP\n",
        "initialPositionInStreamExtended: is required with AT_TIMESTAMP",
    ),
    (
        "executableName = x\nstreamArn = arn:aws:kinesis:eu-west-1:123456789012:stream/s\n"
        "regionName = us-east-1\napplicationName = a\n",
        "streamArn: is in region eu-west-1 but regionName is us-east-1",
    ),
    (
        "executableName = x\nstreamName = s\napplicationName = a\nmaxRecords = 0\n",
        "maxRecords: must be",
    ),
    (  # a typo: refused at start-up, not once per shard (nor every record dead-lettered)
        "executableName = sample_kclpy_ap.py\nstreamName = s\napplicationName = a\n",
        "executableName: 'sample_kclpy_ap.py' is neither a file in",
    ),
)


def _run_bad(tmp_path: Path, index: int, lines: str) -> tuple[Path, subprocess.CompletedProcess[str]]:
    path = tmp_path / f"bad-{index}.properties"
    path.write_text(lines)
    return path, subprocess.run(
        [sys.executable, "-m", "consumer", "multilang", str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "AWS_REGION": "us-east-1", "CONSUMER_LOG_LEVEL": "ERROR"},
    )


def test_bad_properties_are_one_line_errors(tmp_path: Path) -> None:
    """Each case as ``python -m consumer multilang`` (a few at a time: each is mostly interpreter start-up)."""
    with ThreadPoolExecutor(4) as pool:
        runs = list(pool.map(lambda c: _run_bad(tmp_path, c[0], c[1][0]), enumerate(_BAD_PROPERTIES)))
    for (path, out), (_, expected) in zip(runs, _BAD_PROPERTIES, strict=True):
        assert out.returncode == 2, out.stderr
        errors = [line for line in out.stderr.splitlines() if not line.startswith("{")]
        assert len(errors) == 1 and errors[0].startswith(f"error: {path}: {expected}"), out.stderr
        assert "Traceback" not in out.stderr


def test_every_key_of_the_sample_properties_has_a_fate(kclpy: Path) -> None:
    """Each key the KCL's sample file names (set or commented out) is mapped, ignored or refused."""
    import re

    from consumer.multilang.properties import KEYS

    text = (kclpy / "samples" / "sample.properties").read_text()
    keys = set(re.findall(r"(?m)^#?\s*([A-Za-z][A-Za-z0-9]+)\s*=", text))
    assert keys, "no keys found"
    assert sorted(keys - set(KEYS)) == []


def _check(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "consumer", "multilang", str(path), "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_check_reports_each_key_of_the_sample(kclpy: Path, tmp_path: Path) -> None:
    # As shipped, the sample's streamArn is in us-east-5 while its regionName is us-east-1: one line.
    stock = _check(kclpy / "samples" / "sample.properties")
    assert (
        stock.returncode == 2
        and "streamArn: is in region us-east-5 but regionName is us-east-1" in stock.stderr
    )
    shutil.copy2(kclpy / "samples" / "sample_kclpy_app.py", tmp_path)  # the file names it beside itself
    fixed = _check(sample_properties(kclpy, "orders", "eu-west-1", tmp_path))
    assert fixed.returncode == 0, fixed.stderr
    assert "streamArn = arn:aws:kinesis:eu-west-1:000000000000:stream/orders  -> the stream" in fixed.stdout
    assert "processingLanguage = python/3.8  ignored: only appended to the KCL's user agent" in fixed.stdout
    assert "stream orders, child sample_kclpy_app.py" in fixed.stdout


def test_missing_properties_file_is_one_line(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "consumer", "multilang", str(tmp_path / "nope.properties")],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert out.returncode == 2
    assert f"error: {tmp_path / 'nope.properties'}: cannot read the properties file" in out.stderr
    assert "Traceback" not in out.stderr


def test_check_refuses_a_child_that_cannot_start(tmp_path: Path) -> None:
    """``--check`` answers what the daemon would find at start-up: a missing program, a script that is not
    executable; a program on PATH and an executable script beside the file pass."""
    script = tmp_path / "app.py"
    script.write_text("#!/usr/bin/env python3\n")
    base = "streamName = s\napplicationName = a\nexecutableName = "
    cases = {
        "typo.properties": ("apq.py", 2, "executableName: 'apq.py' is neither a file in"),
        "plain.properties": ("app.py", 2, "executableName: 'app.py' is not executable"),
        "relative.properties": ("./nope/app.py", 2, "executableName: './nope/app.py': no such file"),
        "path.properties": (f"{Path(sys.executable).name} app.py", 0, ""),
    }
    for name, (command, code, error) in cases.items():
        (tmp_path / name).write_text(base + command + "\n")
        out = _check(tmp_path / name)
        assert out.returncode == code, (name, out.stderr)
        assert error in out.stderr and "Traceback" not in out.stderr, (name, out.stderr)
    script.chmod(0o755)
    out = _check(tmp_path / "plain.properties")
    assert out.returncode == 0 and "stream s, child app.py" in out.stdout, out.stderr


def test_start_up_errors_name_the_properties_key_not_a_variable(
    emulators: Any, kinesis_client: Any, dynamodb_client: Any, unique_name: Any, tmp_path: Path
) -> None:
    """The start-up checks speak in the file's terms: a stream that does not exist names streamName, missing
    default tables name applicationName (which names them), never a CONSUMER_* variable nobody set."""
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 1)
    app = unique_name("app")
    cases = {
        "nostream": (
            f"streamName = {names.stream}-x\napplicationName = {app}\n",
            ("--lease-table", names.lease_table, "--checkpoint-table", names.checkpoint_table),
            "streamName (or streamArn): Kinesis stream",
        ),
        "notables": (
            f"streamName = {names.stream}\napplicationName = {app}\n",
            (),
            f"applicationName (it names the default lease-table; or --lease-table): DynamoDB table '{app}-fleet-leases' does not exist",
        ),
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONSUMER_")}
    env.update(emulators.env(), CONSUMER_LOG_LEVEL="ERROR")
    for name, (lines, flags, expected) in cases.items():
        path = tmp_path / f"{name}.properties"
        path.write_text(f"executableName = {Path(sys.executable).name}\n" + lines)
        out = run_multilang(path, *flags, env=env)
        errors = error_lines(out)
        assert out.returncode == 2 and len(errors) == 1, (name, out.stderr)
        assert errors[0].startswith(f"error: {path}: {expected}"), (name, out.stderr)
        assert "CONSUMER_" not in errors[0] and "Traceback" not in out.stderr, (name, out.stderr)
