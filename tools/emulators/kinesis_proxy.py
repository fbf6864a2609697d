"""An HTTP front for kinesis-local that answers as AWS does when a Kinesis quota is exceeded.

Clients talk JSON 1.1 (``application/x-amz-json-1.1``, ``X-Amz-Target: Kinesis_20131202.<Operation>``): that
is what botocore's Kinesis model uses. Each request is read whole, checked with
:class:`~tools.emulators.kinesis_limiter.KinesisLimiter`, and either refused here (HTTP 400 with the AWS
error's ``__type`` and message, or a PutRecords answer whose refused records carry
``ProvisionedThroughputExceededException``) or forwarded to kinesis-local over a kept-alive connection.
Responses with a length are read whole (GetShardIterator and GetRecords answers give the iterators' shards and
issue times, and GetRecords the bytes read); chunked responses (SubscribeToShard's event streams) are relayed
chunk by chunk as they arrive, and ended cleanly at an event boundary after ``subscription_seconds``.
Requests in any other encoding (CBOR) are forwarded untouched. Binds 127.0.0.1 only; one thread per
connection; :meth:`KinesisLimitsProxy.stop` closes every socket and joins the threads.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import hashlib
import json
import logging
import os
import re
import select
import signal
import socket
import threading
import time
from types import FrameType
from typing import Any, Final

from tools.emulators.kinesis_limiter import KinesisLimiter, Refusal, shard_throttled
from tools.emulators.limits import Limits
from tools.emulators.settings import LOOPBACK
from tools.http_framing import Closed, Head, Reader, json_response

logger = logging.getLogger(__name__)

JSON_11: Final = "application/x-amz-json-1.1"
_DATA: Final = re.compile(rb'"Data":"([^"]*)"')
_RESHARDING: Final = frozenset(
    {"SplitShard", "MergeShards", "UpdateShardCount", "CreateStream", "DeleteStream", "UpdateStreamMode"}
)
_END_CHUNK: Final = b"0\r\n\r\n"


def stream_name(request: dict[str, Any]) -> str:
    """The stream a request names (``StreamName``, or the last part of ``StreamARN``/``ConsumerARN``)."""
    name = request.get("StreamName")
    if name:
        return str(name)
    arn = str(request.get("StreamARN") or request.get("ConsumerARN") or "")
    return arn.split(":stream/", 1)[1].split("/", 1)[0] if ":stream/" in arn else arn


def region_of(auth: str) -> str:
    """The region of a SigV4 ``Authorization`` header's credential scope ("" if unsigned)."""
    start = auth.find("Credential=")
    scope = auth[start + 11 :].split(",", 1)[0].split("/") if start >= 0 else []
    return scope[2] if len(scope) == 5 else ""


def data_size(b64: str) -> int:
    """Bytes of a base64 blob once decoded."""
    return len(b64) * 3 // 4 - b64[-2:].count("=")


def hash_key(record: dict[str, Any]) -> int:
    """The 128-bit hash key Kinesis routes a record by (ExplicitHashKey, else MD5 of the partition key)."""
    explicit = record.get("ExplicitHashKey")
    if explicit:
        return int(explicit)
    return int.from_bytes(hashlib.md5(str(record.get("PartitionKey", "")).encode()).digest(), "big")


class ShardMap:
    """Open shards of one stream by starting hash key, for routing a put to its shard."""

    def __init__(self, shards: list[dict[str, Any]]) -> None:
        open_shards = sorted(
            (int(s["HashKeyRange"]["StartingHashKey"]), s["ShardId"])
            for s in shards
            if not s.get("SequenceNumberRange", {}).get("EndingSequenceNumber")  # kinesis-local sends null
        )
        self._starts = [start for start, _ in open_shards]
        self._ids = [shard for _, shard in open_shards]

    def shard_for(self, key: int) -> str | None:
        """The open shard whose hash range holds ``key``."""
        i = bisect.bisect_right(self._starts, key) - 1
        return self._ids[i] if i >= 0 else None


class KinesisLimitsProxy:
    """Listens on 127.0.0.1:``port`` (0 = a free one) and forwards to kinesis-local at ``upstream``."""

    def __init__(self, upstream: tuple[str, int], limits: Limits, port: int = 0) -> None:
        if upstream[0] not in (LOOPBACK, "localhost"):
            raise ValueError(f"upstream {upstream} is not on {LOOPBACK}")
        self.upstream = (LOOPBACK, upstream[1])
        self.limiter = KinesisLimiter(limits)
        self._listener = socket.create_server((LOOPBACK, port))
        self.port: int = self._listener.getsockname()[1]
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._threads: set[threading.Thread] = set()
        self._shard_maps: dict[tuple[str, str], ShardMap] = {}
        self._warned_encoding = False
        self._accept = threading.Thread(target=self._accept_loop, daemon=True, name="kinesis-limits")

    def set_limits(self, limits: Limits) -> None:
        """Enforce ``limits`` from now on, on open connections too (rates start afresh; the iterators seen
        so far are kept, with their issue times)."""
        limiter = KinesisLimiter(limits)
        limiter.adopt_iterators(self.limiter)
        self.limiter = limiter

    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://{LOOPBACK}:{self.port}"

    def start(self) -> KinesisLimitsProxy:
        """Start accepting connections."""
        self._accept.start()
        return self

    def stop(self) -> None:
        """Close the listener and every connection; join the threads."""
        self._stop.set()
        with contextlib.suppress(OSError):  # wakes the accept() under way (close alone does not, on Linux)
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        with self._lock:
            conns, threads = list(self._conns), list(self._threads)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._accept.is_alive():
            self._accept.join(5)
        for t in threads:
            t.join(5)

    def __enter__(self) -> KinesisLimitsProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- connections

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                if self._stop.is_set():
                    return
                continue
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            t = threading.Thread(target=self._serve, args=(client,), daemon=True, name="kinesis-limits-conn")
            with self._lock:
                self._conns.add(client)
                self._threads = {x for x in self._threads if x.is_alive()} | {t}
            t.start()

    def _serve(self, client: socket.socket) -> None:
        conn = _Conn(self, client)
        try:
            conn.run()
        except (Closed, OSError) as exc:
            logger.debug("connection ended: %s", exc)
        except Exception:  # a bug here must not take the emulator down; the client sees a reset
            logger.exception("kinesis limits proxy: unexpected error")
        finally:
            conn.close()
            with self._lock:
                self._conns.discard(client)

    def _track(self, sock: socket.socket) -> None:
        with self._lock:
            self._conns.add(sock)

    def _untrack(self, sock: socket.socket) -> None:
        with self._lock:
            self._conns.discard(sock)

    # -- shard maps for routing puts

    def shard_map(self, region: str, stream: str, auth: str, refresh: bool = False) -> ShardMap:
        """Open shards of ``stream`` (cached; asked of kinesis-local with the caller's signature headers,
        ``auth``: their ``Name: value\r\n`` lines)."""
        key = (region, stream)
        cached = self._shard_maps.get(key)
        if cached is not None and not refresh:
            return cached
        shards: list[dict[str, Any]] = []
        token: str | None = None
        with socket.create_connection(self.upstream, timeout=30) as sock:
            reader = Reader(sock)
            while True:
                request = {"NextToken": token} if token else {"StreamName": stream}
                body = json.dumps(request).encode()
                sock.sendall(
                    b"POST / HTTP/1.1\r\nHost: kinesis\r\nContent-Type: application/x-amz-json-1.1\r\n"
                    b"X-Amz-Target: Kinesis_20131202.ListShards\r\n"
                    + auth.encode("latin-1")
                    + b"Content-Length: %d\r\n\r\n" % len(body)
                    + body
                )
                raw = reader.head()
                if raw is None:
                    raise Closed("kinesis-local closed the shard-map connection")
                head = Head.parse(raw)
                length = head.content_length()
                payload = reader.chunked_body() if length is None else reader.exact(length)
                answer = json.loads(payload)
                if head.status != 200:
                    raise LookupError(answer.get("message") or answer.get("__type"))
                shards.extend(answer.get("Shards", []))
                token = answer.get("NextToken")
                if not token:
                    break
        shard_map = ShardMap(shards)
        if shards:  # a stream still CREATING lists none yet
            self._shard_maps[key] = shard_map
        return shard_map

    def forget_shards(self, region: str, stream: str) -> None:
        """Drop a stream's cached shard map (after a call that reshards, creates or deletes it)."""
        self._shard_maps.pop((region, stream), None)

    def warn_encoding(self, content_type: str) -> None:
        if not self._warned_encoding:
            self._warned_encoding = True
            logger.warning("kinesis limits: %r requests are forwarded without limits", content_type)


class _Conn:
    """One client connection and its kept-alive upstream connection."""

    def __init__(self, proxy: KinesisLimitsProxy, client: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.creader = Reader(client)
        self.upstream: socket.socket | None = None
        self.ureader: Reader | None = None

    @property
    def limiter(self) -> KinesisLimiter:
        """The proxy's limiter of the moment (a test may change the limits while connections stay open)."""
        return self.proxy.limiter

    def close(self) -> None:
        self._drop_upstream()
        self.client.close()

    def _drop_upstream(self) -> None:
        if self.upstream is not None:
            self.proxy._untrack(self.upstream)
            self.upstream.close()
            self.upstream, self.ureader = None, None

    def _connect(self) -> Reader:
        if self.ureader is not None and self.ureader.dropped():
            self._drop_upstream()  # kinesis-local closed the idle keep-alive connection
        if self.ureader is None:
            sock = socket.create_connection(self.proxy.upstream, timeout=None)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.proxy._track(sock)
            self.upstream, self.ureader = sock, Reader(sock)
        return self.ureader

    def run(self) -> None:
        while True:
            raw = self.creader.head()
            if raw is None:
                return
            head = Head.parse(raw)
            length = head.content_length()
            body = self.creader.chunked_body() if head.chunked() else self.creader.exact(length or 0)
            if head.chunked():
                raw = head.with_length(len(body))
            self.handle(head, raw, body)

    def reply(self, refusal: Refusal) -> None:
        body = json.dumps({"__type": refusal.code, "message": refusal.message}).encode()
        self.client.sendall(json_response(400, body, JSON_11))

    def handle(self, head: Head, raw: bytes, body: bytes) -> None:
        limiter = self.limiter
        content_type = head.headers.get("content-type", "")
        if not limiter.enabled or not body:
            self.forward(raw, body)
            return
        if not content_type.startswith("application/x-amz-json"):
            self.proxy.warn_encoding(content_type)
            self.forward(raw, body)
            return
        operation = head.headers.get("x-amz-target", "").rpartition(".")[2]
        request = json.loads(body)
        now = time.monotonic()
        if operation == "GetRecords":
            key, refusal = limiter.check_get_records(str(request.get("ShardIterator", "")), now)
            if refusal is not None:
                self.reply(refusal)
                return
            status, answer = self.exchange(raw, body)
            if status == 200 and key is not None:
                self.after_get_records(key, answer, time.monotonic())
            return
        if operation == "GetShardIterator":
            stream, shard = stream_name(request), str(request.get("ShardId", ""))
            refusal = limiter.check_get_shard_iterator(stream, shard, now)
            if refusal is not None:
                self.reply(refusal)
                return
            status, answer = self.exchange(raw, body)
            if status == 200:
                iterator = json.loads(answer).get("ShardIterator")
                if iterator:
                    limiter.iterator_issued(iterator, stream, shard, time.monotonic())
            return
        if operation in ("PutRecords", "PutRecord"):
            self.put(operation, head, raw, body, request, now)
            return
        if operation == "SubscribeToShard":
            consumer, shard = str(request.get("ConsumerARN", "")), str(request.get("ShardId", ""))
            refusal = limiter.check_subscribe(consumer, shard, now)
            if refusal is not None:
                self.reply(refusal)
                return
            self.forward(raw, body, stream_for=limiter.limits.active("subscription_seconds"))
            return
        refusal = limiter.check_control(operation, stream_name(request), now)
        if refusal is not None:
            self.reply(refusal)
            return
        status, _ = self.exchange(raw, body)
        if operation in _RESHARDING and status == 200:
            self.proxy.forget_shards(region_of(head.headers.get("authorization", "")), stream_name(request))

    def after_get_records(self, key: tuple[str, str], answer: bytes, now: float) -> None:
        start = answer.find(b'"NextShardIterator":"')
        if start >= 0:
            start += 21
            iterator = answer[start : answer.index(b'"', start)].decode()
            self.limiter.iterator_issued(iterator, key[0], key[1], now)
        nbytes = 0
        for match in _DATA.finditer(answer):
            size = match.end(1) - match.start(1)
            nbytes += size * 3 // 4 - answer[match.end(1) - 2 : match.end(1)].count(b"=")
        self.limiter.records_read(key, nbytes, now)

    # -- PutRecord(s)

    def put(
        self, operation: str, head: Head, raw: bytes, body: bytes, request: dict[str, Any], now: float
    ) -> None:
        stream = stream_name(request)
        region = region_of(head.headers.get("authorization", ""))
        auth = "".join(
            f"{name}: {head.headers[name]}\r\n"
            for name in ("authorization", "x-amz-date", "x-amz-security-token")
            if name in head.headers
        )
        records = request.get("Records", []) if operation == "PutRecords" else [request]
        try:
            shards = self.route(region, stream, auth, records)
        except (LookupError, ValueError, KeyError, OSError) as exc:
            logger.debug("cannot route puts to %s (%s); forwarding unlimited", stream, exc)
            self.forward(raw, body)
            return
        sizes = [data_size(str(r.get("Data", ""))) + len(str(r.get("PartitionKey", ""))) for r in records]
        admitted = self.limiter.admit_puts(stream, list(zip(shards, sizes, strict=True)), now)
        if all(admitted):
            self.forward(raw, body)
            return
        if operation == "PutRecord":
            self.reply(shard_throttled(stream, shards[0]))
            return
        failures = [
            {
                "ErrorCode": "ProvisionedThroughputExceededException",
                "ErrorMessage": shard_throttled(stream, shard).message,
            }
            for shard in shards
        ]
        results: list[dict[str, Any]] = list(failures)
        extra: dict[str, Any] = {}
        kept = [r for r, ok in zip(records, admitted, strict=True) if ok]
        if kept:
            subset = json.dumps({**request, "Records": kept}).encode()
            status, answer = self.exchange(head.with_length(len(subset)), subset, relay=False)
            parsed = json.loads(answer)
            if status != 200:
                self.client.sendall(json_response(status, answer, JSON_11))
                return
            served = iter(parsed.get("Records", []))
            results = [
                next(served) if ok else failure for ok, failure in zip(admitted, failures, strict=True)
            ]
            extra = {k: v for k, v in parsed.items() if k not in ("Records", "FailedRecordCount")}
        failed = sum(1 for r in results if r.get("ErrorCode"))
        out = json.dumps({"FailedRecordCount": failed, "Records": results, **extra}).encode()
        self.client.sendall(json_response(200, out, JSON_11))

    def route(self, region: str, stream: str, auth: str, records: list[dict[str, Any]]) -> list[str]:
        shard_map = self.proxy.shard_map(region, stream, auth)
        keys = [hash_key(r) for r in records]
        shards = [shard_map.shard_for(k) for k in keys]
        if any(s is None for s in shards):
            shard_map = self.proxy.shard_map(region, stream, auth, refresh=True)
            shards = [shard_map.shard_for(k) for k in keys]
        if any(s is None for s in shards):
            raise LookupError("no open shard for a hash key")
        return [str(s) for s in shards]

    # -- forwarding

    def forward(self, raw: bytes, body: bytes, stream_for: float | None = None) -> None:
        """Forward a request; relay its answer (streamed if chunked)."""
        self.exchange(raw, body, stream_for=stream_for)

    def exchange(
        self, raw: bytes, body: bytes, *, relay: bool = True, stream_for: float | None = None
    ) -> tuple[int, bytes]:
        """Send a request upstream; return (status, body) of a sized answer, relaying it unless told not to.
        A chunked answer is streamed to the client as it arrives (and (status, b"") returned)."""
        reader = self._connect()
        assert self.upstream is not None
        self.upstream.sendall(raw + body)
        try:
            head_raw = reader.head()
        except OSError:
            head_raw = None
        if head_raw is None:  # closed under us before answering: once more on a fresh connection
            self._drop_upstream()
            reader = self._connect()
            assert self.upstream is not None
            self.upstream.sendall(raw + body)
            head_raw = reader.head()
            if head_raw is None:
                raise Closed("kinesis-local closed the connection without answering")
        head = Head.parse(head_raw)
        if head.chunked():
            self.client.sendall(head_raw)
            self.relay_chunks(reader, stream_for)
            return head.status, b""
        answer = reader.exact(head.content_length() or 0)
        if head.headers.get("connection", "").lower() == "close":
            self._drop_upstream()
        if relay:
            self.client.sendall(head_raw + answer)
        return head.status, answer

    def _client_gone(self) -> bool:
        """The client closed or reset its connection (it sends nothing while a stream is relayed)."""
        try:
            return self.client.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def relay_chunks(self, reader: Reader, seconds: float | None) -> None:
        """Pass chunks through as they come; after ``seconds``, end the body at an event boundary."""
        deadline = None if seconds is None else time.monotonic() + seconds
        events = _EventBoundary()
        while True:
            if reader.buffered() == 0:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0 and events.at_boundary():
                    self.client.sendall(_END_CHUNK)
                    self._drop_upstream()  # kinesis-local would keep streaming on it
                    return
                wait = 1.0 if remaining is None or remaining <= 0 else min(remaining, 1.0)
                assert self.upstream is not None
                readable, _, _ = select.select([self.upstream, self.client], [], [], wait)
                if self.client in readable and self._client_gone():
                    # Close kinesis-local's side at once: it refuses a new subscription of the same consumer
                    # and shard (ResourceInUse) for as long as it believes this one open.
                    self._drop_upstream()
                    raise Closed("the client went away mid-stream")
                if self.upstream not in readable:
                    continue
            line = reader.line()
            size = int(line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                tail = reader.line()
                while tail != b"\r\n":
                    tail = reader.line()
                self.client.sendall(line + b"\r\n")
                return
            data = reader.exact(size + 2)
            events.feed(memoryview(data)[:size])
            self.client.sendall(line + data)


class _EventBoundary:
    """Follows event-stream message lengths through a de-chunked body, to end it between messages."""

    __slots__ = ("_left", "_prelude")

    def __init__(self) -> None:
        self._left = 0
        self._prelude = b""

    def feed(self, data: memoryview) -> None:
        i, n = 0, len(data)
        while i < n:
            if self._left:
                step = min(self._left, n - i)
                self._left -= step
                i += step
                continue
            need = 4 - len(self._prelude)
            self._prelude += bytes(data[i : i + need])
            i += need
            if len(self._prelude) == 4:
                self._left = int.from_bytes(self._prelude, "big") - 4
                self._prelude = b""

    def at_boundary(self) -> bool:
        return self._left == 0 and not self._prelude


# ------------------------------------------------------------------------------------------- child process


def _watch_parent(parent_pid: int) -> None:
    while True:
        if os.getppid() != parent_pid:
            os._exit(0)
        time.sleep(0.5)


def _exit_now(signum: int, frame: FrameType | None) -> None:
    logging.shutdown()
    os._exit(0)


def main(argv: list[str] | None = None) -> None:
    """``python -m tools.emulators.kinesis_proxy --port N --upstream-port M [--limits JSON]``."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream-port", type=int, required=True)
    parser.add_argument("--parent-pid", type=int, default=0)
    parser.add_argument("--limits", default=None, help="Limits as JSON (default: from the environment)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    limits = Limits.from_json(args.limits) if args.limits else Limits.from_env()
    signal.signal(signal.SIGTERM, _exit_now)
    signal.signal(signal.SIGINT, _exit_now)
    if args.parent_pid > 0:
        threading.Thread(target=_watch_parent, args=(args.parent_pid,), daemon=True).start()
    proxy = KinesisLimitsProxy((LOOPBACK, args.upstream_port), limits, port=args.port).start()
    logger.info(
        "kinesis limits proxy on %s -> %d (limits %s)", proxy.url(), args.upstream_port, limits.enabled
    )
    threading.Event().wait()


if __name__ == "__main__":
    main()
