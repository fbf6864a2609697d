"""An HTTP front for kinesis-local that answers as AWS does when a Kinesis quota is exceeded (docs/emulators.md):
each JSON request is read whole, checked with the :class:`~tools.emulators.kinesis_limiter.KinesisLimiter`, and
refused or forwarded over a kept-alive connection; event streams are relayed chunk by chunk, and ended at an
event boundary after ``subscription_seconds``."""

from __future__ import annotations

import bisect
import contextlib
import functools
import hashlib
import http.client
import json
import logging
import re
import select
import socket
import socketserver
import threading
import time
from typing import Any, Final

from tools.emulators.children import child_main
from tools.emulators.kinesis_limiter import IN_USE, THROUGHPUT, KinesisLimiter, Refusal, shard_throttled
from tools.emulators.limits import Limits
from tools.emulators.settings import LOOPBACK, region_of
from tools.http_framing import Closed, Head, Reader, chunk_size, json_response

logger = logging.getLogger(__name__)

JSON_11: Final = "application/x-amz-json-1.1"
_DATA: Final = re.compile(rb'"Data":"([^"]*)"')
_RESHARDING: Final = frozenset(
    {"SplitShard", "MergeShards", "UpdateShardCount", "CreateStream", "DeleteStream", "UpdateStreamMode"}
)
_SIGNATURE: Final = ("authorization", "x-amz-date", "x-amz-security-token")
#: An event stream's (seconds to relay, event that ends it, probe its first event for a refusal), or None.
_Stream = tuple[float | None, threading.Event, bool] | None


def stream_name(request: dict[str, Any]) -> str:
    """The stream a request names (``StreamName``, or the last part of ``StreamARN``/``ConsumerARN``)."""
    if name := request.get("StreamName"):
        return str(name)
    arn = str(request.get("StreamARN") or request.get("ConsumerARN") or "")
    return arn.split(":stream/", 1)[1].split("/", 1)[0] if ":stream/" in arn else arn


def data_size(b64: str | bytes) -> int:
    """Bytes of a base64 blob once decoded."""
    padding = b64[-2:].count(b"=") if isinstance(b64, bytes) else b64[-2:].count("=")
    return len(b64) * 3 // 4 - padding


def hash_key(record: dict[str, Any]) -> int:
    """The 128-bit hash key Kinesis routes a record by (ExplicitHashKey, else MD5 of the partition key)."""
    if explicit := record.get("ExplicitHashKey"):
        return int(explicit)
    return int.from_bytes(hashlib.md5(str(record.get("PartitionKey", "")).encode()).digest(), "big")


def drop_whole_events(pending: bytearray, data: memoryview) -> None:
    """Append ``data`` to ``pending``, then drop the whole event-stream messages (each starts with its 4-byte
    length) from its front: what is left is the message under way."""
    pending += data
    while len(pending) >= 4 and len(pending) >= (size := max(4, int.from_bytes(pending[:4], "big"))):
        del pending[:size]


@functools.cache
def _warn_unlimited(content_type: str) -> None:
    """Warn once per encoding (CBOR) that its requests are forwarded without limits."""
    logger.warning("kinesis limits: %r requests are forwarded without limits", content_type)


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


class KinesisLimitsProxy(socketserver.ThreadingTCPServer):
    """Listens on 127.0.0.1:``port`` (0 = a free one) and forwards to kinesis-local at ``upstream``."""

    daemon_threads = True
    request_queue_size = 128  # many workers may connect at once

    def __init__(self, upstream: tuple[str, int], limits: Limits, port: int = 0) -> None:
        if upstream[0] not in (LOOPBACK, "localhost"):
            raise ValueError(f"upstream {upstream} is not on {LOOPBACK}")
        super().__init__((LOOPBACK, port), _Conn)
        self.upstream = (LOOPBACK, upstream[1])
        self.port: int = self.server_address[1]
        self.limiter = KinesisLimiter(limits)
        #: open sockets, shut down on stop (set.add/discard/copy are atomic under the GIL: no lock)
        self.sockets: set[socket.socket] = set()
        #: open shards by (region, stream); dropped after a call that reshards, creates or deletes the stream
        self.shard_maps: dict[tuple[str, str], ShardMap] = {}
        self._serving = threading.Thread(
            target=self.serve_forever, args=(0.05,), daemon=True, name="kinesis-limits"
        )

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
        """Start accepting connections (one thread each)."""
        self._serving.start()
        return self

    def stop(self) -> None:
        """Stop accepting, and shut every open connection down (their threads then end)."""
        if self._serving.is_alive():  # shutdown() waits for serve_forever() to end: only once it runs
            self.shutdown()
        self.server_close()
        for sock in self.sockets.copy():
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def __enter__(self) -> KinesisLimitsProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def shard_map(
        self, region: str, stream: str, signature: dict[str, str], refresh: bool = False
    ) -> ShardMap:
        """Open shards of ``stream``, cached; asked of kinesis-local with the caller's ``signature`` headers."""
        cached = self.shard_maps.get((region, stream))
        if cached is not None and not refresh:
            return cached
        upstream = http.client.HTTPConnection(*self.upstream, timeout=30)
        headers = {"Content-Type": JSON_11, "X-Amz-Target": "Kinesis_20131202.ListShards", **signature}
        try:  # one page: up to 10,000 shards
            upstream.request("POST", "/", json.dumps({"StreamName": stream, "MaxResults": 10_000}), headers)
            response = upstream.getresponse()
            answer = json.loads(response.read())
        finally:
            upstream.close()
        if response.status != 200:
            raise LookupError(answer.get("message") or answer.get("__type"))
        shard_map = ShardMap(answer.get("Shards", []))
        if answer.get("Shards"):  # a stream still CREATING lists none yet
            self.shard_maps[(region, stream)] = shard_map
        return shard_map


class _Conn(socketserver.BaseRequestHandler):
    """One client connection and its kept-alive upstream connection."""

    server: KinesisLimitsProxy
    request: socket.socket

    def setup(self) -> None:
        self.proxy, self.client = self.server, self.request
        self.client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.proxy.sockets.add(self.client)
        self.creader = Reader(self.client.recv)
        self.upstream: socket.socket | None = None
        self.ureader: Reader | None = None

    def finish(self) -> None:
        self._drop_upstream()
        self.proxy.sockets.discard(self.client)

    def _drop_upstream(self) -> None:
        if self.upstream is not None:
            self.proxy.sockets.discard(self.upstream)
            self.upstream.close()
            self.upstream, self.ureader = None, None

    def _connect(self) -> tuple[socket.socket, Reader]:
        if self.upstream is None or self.ureader is None:
            self.upstream = socket.create_connection(self.proxy.upstream, timeout=None)
            self.upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.proxy.sockets.add(self.upstream)
            self.ureader = Reader(self.upstream.recv)
        return self.upstream, self.ureader

    def handle(self) -> None:
        """Answer the client's requests until it closes the connection."""
        with contextlib.suppress(Closed, OSError):  # the client or kinesis-local went away
            while (raw := self.creader.head()) is not None:
                head = Head.parse(raw)
                if head.chunked():
                    body = self.creader.chunked_body()
                    raw = head.with_length(len(body))
                else:
                    body = self.creader.exact(head.content_length() or 0)
                self.dispatch(head, raw, body)

    def reply(self, refusal: Refusal) -> None:
        body = json.dumps({"__type": refusal.code, "message": refusal.message}).encode()
        self.client.sendall(json_response(400, body, JSON_11))

    def dispatch(self, head: Head, raw: bytes, body: bytes) -> None:
        limiter = self.proxy.limiter  # of this request: set_limits may change it while connections stay open
        content_type, enabled = head.headers.get("content-type", ""), limiter.limits.enabled
        if not enabled or not body or not content_type.startswith("application/x-amz-json"):
            if enabled and body:
                _warn_unlimited(content_type)
            self.exchange(raw, body)
            return
        operation = head.headers.get("x-amz-target", "").rpartition(".")[2]
        request = json.loads(body)
        stream, shard, now = stream_name(request), str(request.get("ShardId", "")), time.monotonic()
        consumer = str(request.get("ConsumerARN", ""))
        key: tuple[str, str] | None = None
        if operation in ("PutRecords", "PutRecord"):
            self.put(operation, head, raw, body, request, now)
            return
        if operation == "GetRecords":
            key, refusal = limiter.check_get_records(str(request.get("ShardIterator", "")), now)
        else:
            subscribe = (
                operation == "SubscribeToShard"
            )  # the 5 s rule first: a call it refuses is not counted
            refusal = limiter.check_subscribe(consumer, stream, shard, now) if subscribe else None
            refusal = refusal or limiter.check_call(operation, stream, shard, now, consumer)
        if refusal is not None:
            self.reply(refusal)
            return
        if operation == "SubscribeToShard":
            self.subscribe(limiter, raw, body, consumer, shard, now)
            return
        status, answer = self.exchange(raw, body)
        if status != 200:
            return
        if operation == "GetRecords" and key is not None:
            self.after_get_records(limiter, key, answer, time.monotonic())
        elif operation == "GetShardIterator" and (iterator := json.loads(answer).get("ShardIterator")):
            limiter.iterator_issued(iterator, stream, shard, time.monotonic())
        elif operation in _RESHARDING:
            self.proxy.shard_maps.pop((region_of(head.headers.get("authorization", "")), stream), None)

    def after_get_records(
        self, limiter: KinesisLimiter, key: tuple[str, str], answer: bytes, now: float
    ) -> None:
        """Note the next iterator and charge the data bytes (the answer is scanned, not parsed)."""
        start = answer.find(b'"NextShardIterator":"')
        if start >= 0:
            start += 21
            limiter.iterator_issued(answer[start : answer.index(b'"', start)].decode(), *key, now)
        limiter.records_read(key, sum(data_size(m.group(1)) for m in _DATA.finditer(answer)), now)

    def subscribe(
        self, limiter: KinesisLimiter, raw: bytes, body: bytes, consumer: str, shard: str, now: float
    ) -> None:
        """Relay a SubscribeToShard, ending the consumer's earlier one of the shard (a takeover; kinesis-local frees
        that seconds late, refusing in the event stream: asked again, as AWS takes over at once)."""
        ended, retry = limiter.subscribing(consumer, shard, now)
        seconds = limiter.limits.active("subscription_seconds")
        while self.exchange(raw, body, stream=(seconds, ended, retry))[0] == 409:
            retry = time.monotonic() < now + 10.0 and not ended.wait(0.25)
        limiter.unsubscribed(consumer, shard, ended, time.monotonic())

    def put(
        self, operation: str, head: Head, raw: bytes, body: bytes, request: dict[str, Any], now: float
    ) -> None:
        """Admit a PutRecord(s) record by record; only the admitted records reach kinesis-local."""
        stream = stream_name(request)
        records = request.get("Records", []) if operation == "PutRecords" else [request]
        try:
            shards = self.route(head, stream, records)
        except (LookupError, ValueError, KeyError, OSError, http.client.HTTPException) as exc:
            logger.debug("cannot route puts to %s (%s); forwarding unlimited", stream, exc)
            self.exchange(raw, body)
            return
        sizes = [
            data_size(str(r.get("Data", ""))) + len(str(r.get("PartitionKey", "")).encode()) for r in records
        ]
        admitted = self.proxy.limiter.admit_puts(stream, list(zip(shards, sizes, strict=True)), now)
        if all(admitted):
            self.exchange(raw, body)
            return
        if operation == "PutRecord":
            self.reply(shard_throttled(stream, shards[0]))
            return
        parsed: dict[str, Any] = {}
        if kept := [r for r, ok in zip(records, admitted, strict=True) if ok]:
            subset = json.dumps({**request, "Records": kept}).encode()
            status, answer = self.exchange(head.with_length(len(subset)), subset, relay=False)
            if status != 200:
                self.client.sendall(json_response(status, answer, JSON_11))
                return
            parsed = json.loads(answer)
        served = iter(parsed.get("Records", []))
        results = [
            next(served)
            if ok
            else {"ErrorCode": THROUGHPUT, "ErrorMessage": shard_throttled(stream, shard).message}
            for ok, shard in zip(admitted, shards, strict=True)
        ]
        failed = sum(1 for r in results if r.get("ErrorCode"))
        out = json.dumps({**parsed, "FailedRecordCount": failed, "Records": results}).encode()
        self.client.sendall(json_response(200, out, JSON_11))

    def route(self, head: Head, stream: str, records: list[dict[str, Any]]) -> list[str]:
        """Each record's open shard (the shard map refreshed once if a key falls outside it)."""
        signature: dict[str, str] = {name: head.headers[name] for name in _SIGNATURE if name in head.headers}
        region, keys = region_of(signature.get("authorization", "")), [hash_key(r) for r in records]
        for refresh in (False, True):
            shard_map = self.proxy.shard_map(region, stream, signature, refresh)
            shards = [shard_map.shard_for(k) for k in keys]
            if None not in shards:
                return [str(s) for s in shards]
        raise LookupError("no open shard for a hash key")

    def exchange(
        self, raw: bytes, body: bytes, *, relay: bool = True, stream: _Stream = None
    ) -> tuple[int, bytes]:
        """Send a request upstream; return (status, body) of a sized answer, relaying it unless told not to.
        A chunked answer is streamed to the client as it arrives (and (status, b"") returned), or (409, b"")
        if :meth:`relay_chunks` refused it."""
        head_raw = None
        for _ in range(2):  # again on a fresh connection if kinesis-local closed this one (idle) first
            upstream, reader = self._connect()
            with contextlib.suppress(OSError):
                upstream.sendall(raw + body)
                head_raw = reader.head()
            if head_raw is not None:
                break
            self._drop_upstream()
        if head_raw is None:
            raise Closed("kinesis-local closed the connection without answering")
        head = Head.parse(head_raw)
        if head.chunked():
            if not self.relay_chunks(upstream, reader, head_raw, stream):
                self._drop_upstream()
                return 409, b""
            return head.status, b""
        answer = reader.exact(head.content_length() or 0)
        if head.headers.get("connection", "").lower() == "close":
            self._drop_upstream()
        if relay:
            self.client.sendall(head_raw + answer)
        return head.status, answer

    def relay_chunks(self, upstream: socket.socket, reader: Reader, head: bytes, stream: _Stream) -> bool:
        """Pass the head and chunks through as they come; after ``seconds`` or once ``ended`` is set (``stream``),
        end the body at an event boundary. ``probe``: the head waits up to 0.3 s for the first chunk; False,
        nothing relayed, if that is a ResourceInUseException."""
        seconds, ended, probe = stream or (None, None, False)
        deadline = None if seconds is None else time.monotonic() + seconds
        pending = bytearray()  # the event-stream message under way
        unsent, probe_until = head, time.monotonic() + (0.3 if probe else 0.0)
        while True:
            if reader.buffered() == 0:
                if unsent and time.monotonic() >= probe_until:
                    self.client.sendall(unsent)
                    unsent = b""
                remaining = 1.0 if deadline is None else deadline - time.monotonic()
                if (remaining <= 0 or (ended and ended.is_set())) and not pending:
                    self.client.sendall(unsent + b"0\r\n\r\n")
                    self._drop_upstream()  # kinesis-local would keep streaming on it
                    return True
                wait = min(remaining if 0 < remaining < 1.0 else 1.0, 0.05 if unsent else 0.25)
                readable, _, _ = select.select([upstream, self.client], [], [], wait)
                if self.client in readable and not self.client.recv(1, socket.MSG_PEEK):
                    # The client went away (an OSError if reset). finish() closes kinesis-local's side at once:
                    # it refuses a new subscription of the consumer and shard while it believes this one open.
                    raise Closed("the client went away mid-stream")
                if upstream not in readable:
                    continue
            line = reader.line()
            if not (size := chunk_size(line)):
                reader.trailers()
                self.client.sendall(unsent + line + b"\r\n")
                return True
            data = reader.exact(size + 2)
            if unsent and probe and IN_USE.encode() in data:
                return False
            drop_whole_events(pending, memoryview(data)[:size])
            self.client.sendall(unsent + line + data)
            unsent = b""


def main(argv: list[str] | None = None) -> None:
    """``python -m tools.emulators.kinesis_proxy``: the harness's child, until SIGTERM or the parent's death."""
    args = child_main(argv, __doc__, upstream_port=int)
    proxy = KinesisLimitsProxy((LOOPBACK, args.upstream_port), Limits(**json.loads(args.limits)), args.port)
    logger.info("kinesis limits proxy on %s -> %d", proxy.url(), args.upstream_port)
    proxy.serve_forever()


if __name__ == "__main__":
    main()
