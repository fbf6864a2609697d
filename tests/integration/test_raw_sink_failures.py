"""The raw S3 sink when its writes fail, against the emulators over the network: a bug halts the shard once
with its traceback and loses nothing, a missing bucket is retried until the operator creates it, and a slow PUT
fails within the sink's own read timeout (not botocore's three 10 s attempts), counted in ``RawWriteFailures``;
access denied is retried until the policy lets the PUTs through."""

from __future__ import annotations

import gzip
import http.client
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3
import pytest

from consumer.metrics.sink import InMemoryMetrics
from consumer.records import Record
from consumer.sinks.raw_s3 import RawS3Sink
from tools.emulators.endpoints import client_kwargs
from tools.tcp_proxy import FaultProxy, address

from .support import (
    LEASES,
    REPO,
    Names,
    create_stream,
    dynamo_worker,
    log_events,
    make_names,
    put_records,
    run_in_thread,
    stop_process,
    wait_until,
)

pytestmark = pytest.mark.integration

POISON = b'{"poison": true}'


def _lines(s3: Any, bucket: str) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for obj in page.get("Contents", []):
            body = s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
            out[obj["Key"]] = [json.loads(line) for line in gzip.decompress(body).split(b"\n")[:-1]]
    return out


def _landed(s3: Any, bucket: str) -> Counter[str]:
    """How many times each sequence number is in the bucket's objects."""
    return Counter(ln["sequence_number"] for body in _lines(s3, bucket).values() for ln in body)


def _checkpoints(ddb: Any, table: str) -> dict[str, str]:
    items = ddb.scan(TableName=table, ConsistentRead=True)["Items"]
    return {i["lease_key"]["S"].rsplit("#", 1)[1]: i["sequence"]["S"] for i in items if "sequence" in i}


def _events(caplog: pytest.LogCaptureFixture, event: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == event]


class _BuggySink(RawS3Sink):
    """The raw sink with a bug in building one object (as a change to the sink could bring): a TypeError for
    every object that would hold the poison record. ``attempts`` counts the objects it tried to build with it."""

    attempts = 0

    def _put(self, records: list[Record], lines: list[bytes]) -> None:
        if any(r.data == POISON for r in records):
            type(self).attempts += 1
            raise TypeError("can't concat str to bytes")
        super()._put(records, lines)


def test_a_bug_in_the_sink_halts_the_shard_once_with_its_traceback_and_loses_nothing(
    emulators, kinesis_client, dynamodb_client, s3_client, unique_name, caplog
) -> None:
    """A bug is not retried for ever in silence: one ``raw_sink_failed`` with its traceback, the shard halted
    (``shard_halted``), no other attempt; the checkpoint stays before the records not written, and a worker
    with the sink fixed lands every record exactly once."""
    _BuggySink.attempts = 0
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 1)
    bucket = unique_name("raw")
    s3_client.create_bucket(Bucket=bucket)
    caplog.set_level(logging.INFO)
    worker = dynamo_worker(
        "buggy",
        emulators,
        names,
        lambda: _BuggySink(client=s3_client, bucket=bucket, max_records=5, max_age=0.3),
    )
    thread = run_in_thread(worker)
    try:
        first = put_records(kinesis_client, names.stream, [json.dumps({"n": i}).encode() for i in range(5)])
        shard = first[0]["ShardId"]
        wait_until(
            lambda: (
                _checkpoints(dynamodb_client, names.checkpoint_table).get(shard)
                == first[-1]["SequenceNumber"]
            ),
            timeout=30,
            what="the first records written and checkpointed",
        )
        second = put_records(
            kinesis_client,
            names.stream,
            [b'{"n": 5}', POISON, *(json.dumps({"n": i}).encode() for i in (7, 8))],
        )
        # the age timer found the bug: logged at once; the shard halts at its next batch
        wait_until(lambda: bool(_events(caplog, "raw_sink_failed")), timeout=30, what="the bug logged")
        second += put_records(kinesis_client, names.stream, [b'{"n": 9}'])
        wait_until(lambda: bool(_events(caplog, "shard_halted")), timeout=30, what="the shard halted")
    finally:
        worker.request_shutdown()
        thread.join(20)
    assert not thread.is_alive()
    [failed] = _events(caplog, "raw_sink_failed")
    assert failed.levelno == logging.ERROR and failed.exc_info is not None
    assert isinstance(failed.exc_info[1], TypeError) and "can't concat" in failed.getMessage()
    bug_tracebacks = [r for r in caplog.records if r.exc_info and isinstance(r.exc_info[1], TypeError)]
    assert bug_tracebacks == [failed]  # its traceback once, not per attempt
    assert _BuggySink.attempts == 1  # never tried again: not on a timer, not at the stop
    assert not _events(caplog, "raw_flush_failed")  # a bug is not an outage
    [halted] = _events(caplog, "shard_halted")
    error = getattr(halted, "error", "")
    assert "RawSinkFailedError" in error and "TypeError" in error
    stored = _checkpoints(dynamodb_client, names.checkpoint_table)[shard]
    assert stored == first[-1]["SequenceNumber"]  # not past a record that was not written
    assert set(_landed(s3_client, bucket)) == {r["SequenceNumber"] for r in first}

    # the fix deployed: the next owner resumes at the checkpoint and lands the rest, nothing lost or twice
    fixed = dynamo_worker(
        "fixed",
        emulators,
        names,
        lambda: RawS3Sink(client=s3_client, bucket=bucket, max_records=5, max_age=0.3),
    )
    thread = run_in_thread(fixed)
    try:
        wait_until(
            lambda: (
                _checkpoints(dynamodb_client, names.checkpoint_table).get(shard)
                == second[-1]["SequenceNumber"]
            ),
            timeout=30,
            what="every record written by the fixed sink",
        )
    finally:
        fixed.request_shutdown()
        thread.join(20)
    landed = _landed(s3_client, bucket)
    assert sorted(landed) == sorted(r["SequenceNumber"] for r in (*first, *second))
    assert set(landed.values()) == {1}, landed


def test_a_missing_bucket_is_retried_until_it_is_created_then_every_record_lands_once(
    emulators, kinesis_client, dynamodb_client, s3_client, unique_name, caplog
) -> None:
    """The promise of docs/data-format.md: the bucket is missing, each PUT fails (``RawWriteFailures`` counts
    them, one ``raw_flush_failed`` line), the shard waits; once the operator creates the bucket the shard
    resumes by itself and every record is in exactly one object."""
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 1)
    bucket = unique_name("late")  # created only after the first failures
    caplog.set_level(logging.INFO)
    metrics = InMemoryMetrics()
    worker = dynamo_worker(
        "sink",
        emulators,
        names,
        lambda: RawS3Sink(client=s3_client, bucket=bucket, max_records=10, max_age=0.2, metrics=metrics),
    )
    thread = run_in_thread(worker)
    try:
        put = put_records(kinesis_client, names.stream, [json.dumps({"n": i}).encode() for i in range(25)])
        wait_until(lambda: metrics.total("RawWriteFailures") >= 2, timeout=30, what="two PUTs failed")
        s3_client.create_bucket(Bucket=bucket)
        last = {r["ShardId"]: r["SequenceNumber"] for r in put}
        wait_until(
            lambda: _checkpoints(dynamodb_client, names.checkpoint_table) == last,
            timeout=40,
            what="every record checkpointed once the bucket exists",
        )
    finally:
        worker.request_shutdown()
        thread.join(20)
    assert not _events(caplog, "shard_halted") and not _events(caplog, "raw_sink_failed")
    failures = _events(caplog, "raw_flush_failed")
    assert len(failures) == 1 and failures[0].exc_info is None, [r.getMessage() for r in failures]
    assert bucket in failures[0].getMessage() and "does not exist" in failures[0].getMessage()
    assert _events(caplog, "raw_flush_recovered")
    counted = {(s, sh) for (n, s, sh) in metrics.values if n == "RawWriteFailures"}
    assert counted == {(names.stream, put[0]["ShardId"])}
    landed = _landed(s3_client, bucket)
    assert sorted(landed) == sorted(r["SequenceNumber"] for r in put)
    assert set(landed.values()) == {1}, landed


_DENIED = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code><Message>Access Denied</Message>'
    b"<RequestId>r-1</RequestId></Error>"
)
_HOP = {"connection", "keep-alive", "transfer-encoding", "expect", "host"}


class _PolicyRelay(ThreadingHTTPServer):
    """S3 as a worker sees it before the operator grants ``s3:PutObject``: while ``deny`` is set every PUT is
    answered 403 AccessDenied (S3's own XML); every other request, and every PUT once ``deny`` is cleared, is
    relayed to moto over HTTP."""

    daemon_threads = True

    def __init__(self, upstream: tuple[str, int]) -> None:
        super().__init__(("127.0.0.1", 0), _Relay)
        self.upstream = upstream
        self.deny = True
        self.denied = 0


class _Relay(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _PolicyRelay

    def log_message(self, *args: Any) -> None:
        return None

    def _relay(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.command == "PUT" and self.server.deny:
            self.server.denied += 1
            status, headers, answer = 403, [("Content-Type", "application/xml")], _DENIED
        else:
            upstream = http.client.HTTPConnection(*self.server.upstream, timeout=30)
            sent = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
            upstream.request(self.command, self.path, body=body, headers=sent)
            reply = upstream.getresponse()
            status, answer = reply.status, reply.read()
            headers = [(k, v) for k, v in reply.getheaders() if k.lower() not in _HOP | {"content-length"}]
            upstream.close()
        self.send_response(status)
        for key, value in headers:
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(answer)

    do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = _relay


@contextmanager
def _policy_relay(upstream: tuple[str, int]) -> Iterator[_PolicyRelay]:
    server = _PolicyRelay(upstream)
    thread = threading.Thread(target=server.serve_forever, name="policy-relay", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_denied_access_is_retried_until_the_policy_is_fixed_then_every_record_lands_once(
    emulators, kinesis_client, dynamodb_client, s3_client, unique_name, caplog
) -> None:
    """S3 answers 403 AccessDenied to every PUT (the role's policy not yet fixed): the PUTs are counted and tried
    again with backoff, the shard is not halted; once the policy lets them through, the shard resumes by itself
    and every record is in exactly one object."""
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 1)
    bucket = unique_name("raw")
    s3_client.create_bucket(Bucket=bucket)
    caplog.set_level(logging.INFO)
    metrics = InMemoryMetrics()
    with _policy_relay(address(emulators.aws_endpoint)) as relay:
        url = f"http://127.0.0.1:{relay.server_address[1]}"
        s3 = boto3.client("s3", **client_kwargs(url, retries={"mode": "standard", "total_max_attempts": 1}))
        worker = dynamo_worker(
            "sink",
            emulators,
            names,
            lambda: RawS3Sink(client=s3, bucket=bucket, max_records=10, max_age=0.2, metrics=metrics),
        )
        thread = run_in_thread(worker)
        try:
            put = put_records(
                kinesis_client, names.stream, [json.dumps({"n": i}).encode() for i in range(15)]
            )
            wait_until(lambda: metrics.total("RawWriteFailures") >= 2, timeout=30, what="two PUTs denied")
            relay.deny = False  # the operator fixed the policy
            last = {r["ShardId"]: r["SequenceNumber"] for r in put}
            wait_until(
                lambda: _checkpoints(dynamodb_client, names.checkpoint_table) == last,
                timeout=40,
                what="every record checkpointed once the PUTs are allowed",
            )
        finally:
            worker.request_shutdown()
            thread.join(20)
    assert relay.denied >= 2
    assert not _events(caplog, "shard_halted") and not _events(caplog, "raw_sink_failed")
    [failure] = _events(caplog, "raw_flush_failed")
    assert "denied access" in failure.getMessage() and failure.exc_info is None, failure.getMessage()
    landed = _landed(s3_client, bucket)
    assert sorted(landed) == sorted(r["SequenceNumber"] for r in put)
    assert set(landed.values()) == {1}, landed


def _spawn(emulators: Any, names: Names, s3_url: str, out: Path, **env: str) -> subprocess.Popen[bytes]:
    """``python -m consumer run`` with the raw sink loaded by path, its S3 calls through ``s3_url``; EMF
    metrics to ``out`` (.metrics) and JSON logs to ``out`` (.log)."""
    full_env = {
        **os.environ,
        **emulators.env(),
        "AWS_ENDPOINT_URL_S3": s3_url,
        "CONSUMER_APPLICATION": "it",
        "CONSUMER_STREAMS": names.stream,
        "CONSUMER_PROCESSOR": "consumer.sinks.raw_s3:RawS3Sink",
        "CONSUMER_LEASE_TABLE": names.lease_table,
        "CONSUMER_CHECKPOINT_TABLE": names.checkpoint_table,
        "CONSUMER_WORKER_ID": "slow-s3",
        "CONSUMER_LEASE_DURATION_SECONDS": str(LEASES.lease_duration),
        "CONSUMER_SAFETY_MARGIN_SECONDS": str(LEASES.safety_margin),
        "CONSUMER_SCAN_INTERVAL_SECONDS": str(LEASES.scan_interval),
        "CONSUMER_DISCOVERY_INTERVAL_SECONDS": "1",
        "CONSUMER_IDLE_TIME_SECONDS": "0.05",
        "CONSUMER_METRICS_INTERVAL_SECONDS": "1",
        "CONSUMER_SHUTDOWN_DEADLINE_SECONDS": "10",
        **env,
    }
    return subprocess.Popen(
        [sys.executable, "-m", "consumer", "run"],
        cwd=REPO,
        env=full_env,
        stdout=open(out.with_suffix(".metrics"), "wb"),
        stderr=open(out.with_suffix(".log"), "wb"),
    )


def test_a_slow_put_fails_within_the_read_timeout_is_counted_and_loses_nothing(
    emulators, kinesis_client, dynamodb_client, s3_client, unique_name, tmp_path
) -> None:
    """S3 answers nothing (responses held 60 s by a proxy): with ``CONSUMER_RAW_READ_TIMEOUT_SECONDS=1`` the
    deployed worker's PUT fails after about a second and is tried again after the backoff (it held the shard's
    lane for 33 s before: three botocore attempts of 10 s); each failed PUT counts in ``RawWriteFailures`` for
    the stream; once S3 answers again every record lands exactly once."""
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 1)
    bucket = unique_name("raw")
    s3_client.create_bucket(Bucket=bucket)
    out = tmp_path / "worker"
    with FaultProxy(address(emulators.aws_endpoint)) as proxy:
        proc = _spawn(
            emulators,
            names,
            proxy.url(),
            out,
            CONSUMER_RAW_BUCKET=bucket,
            CONSUMER_RAW_MAX_AGE_SECONDS="0.3",
            CONSUMER_RAW_READ_TIMEOUT_SECONDS="1",
        )
        log = out.with_suffix(".log")
        try:
            first = put_records(kinesis_client, names.stream, [b'{"n": 0}', b'{"n": 1}'])
            shard = first[0]["ShardId"]
            wait_until(
                lambda: (
                    _checkpoints(dynamodb_client, names.checkpoint_table).get(shard)
                    == first[-1]["SequenceNumber"]
                ),
                timeout=60,
                what="the worker up, its first records written",
            )
            proxy.fault("slow", delay=60.0)
            slow_from = time.monotonic()
            second = put_records(kinesis_client, names.stream, [b'{"n": 2}', b'{"n": 3}'])
            wait_until(lambda: bool(log_events(log, "raw_flush_failed")), timeout=30, what="a PUT failed")
            took = time.monotonic() - slow_from
            # the record's age (0.3 s), a tick of the timer, a 1 s read timeout, the reads: a few seconds even on
            # a loaded machine; botocore's defaults held it 33 s or more
            assert took < 15, f"the slow PUT held the shard {took:.1f}s"
            [failed] = log_events(log, "raw_flush_failed")
            assert "ReadTimeoutError" in failed["msg"], failed
            print(f"slow PUT: first failure {took:.2f}s after the fault")
            proxy.heal()
            wait_until(
                lambda: (
                    _checkpoints(dynamodb_client, names.checkpoint_table).get(shard)
                    == second[-1]["SequenceNumber"]
                ),
                timeout=40,
                what="every record written once S3 answers",
            )
            wait_until(
                lambda: bool(log_events(log, "raw_flush_recovered")), timeout=10, what="the recovery logged"
            )
        finally:
            code = stop_process(proc)
    assert code == 0, log.read_text()[-3000:]
    docs = [json.loads(line) for line in out.with_suffix(".metrics").read_text().splitlines() if line.strip()]
    counted = [d for d in docs if "RawWriteFailures" in d]
    assert counted and sum(d["RawWriteFailures"] for d in counted) >= 1
    for doc in counted:
        assert doc["Stream"] == names.stream and doc["Shard"] == shard
        cw = doc["_aws"]["CloudWatchMetrics"][0]
        assert ["Application", "Stream"] in cw["Dimensions"]
        assert {"Name": "RawWriteFailures", "Unit": "Count"} in cw["Metrics"]
    landed = _landed(s3_client, bucket)
    assert sorted(landed) == sorted(r["SequenceNumber"] for r in (*first, *second))
    assert set(landed.values()) == {1}, landed
