"""Just enough HTTP/1.1 for the loopback proxies: message heads, a byte stream framed into messages
(:class:`Framer`, for :mod:`tools.tcp_proxy`), a socket read message by message (:class:`Reader`, for
:mod:`tools.emulators.kinesis_proxy`)."""

from __future__ import annotations

import binascii
import io
import struct
import uuid
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Final

MAX_HEAD: Final = 64 * 1024
_EVENTSTREAM: Final = "application/vnd.amazon.eventstream"
_UNTIL_CLOSED: Final = 1 << 62  # the length of a response without one: it ends when the connection closes


def _header(name: bytes, value: bytes) -> bytes:
    return bytes([len(name)]) + name + b"\x07" + struct.pack(">H", len(value)) + value  # 7: string


def initial_response_message() -> bytes:
    """One event-stream message: ``:message-type: event``, ``:event-type: initial-response``, payload ``{}``."""
    headers = _header(b":message-type", b"event") + _header(b":event-type", b"initial-response")
    payload = b"{}"
    prelude = struct.pack(">II", 12 + len(headers) + len(payload) + 4, len(headers))
    message = prelude + struct.pack(">I", binascii.crc32(prelude)) + headers + payload
    return message + struct.pack(">I", binascii.crc32(message))


_INITIAL_CHUNK: Final = b"%X\r\n%s\r\n" % (len(initial_response_message()), initial_response_message())


def chunk_size(line: bytes) -> int:
    """The size of a chunk from its size line."""
    return int(line.split(b";", 1)[0].strip() or b"0", 16)


@dataclass
class Head:
    """A parsed message head: the first line, lower-cased header names, and the raw bytes."""

    first: bytes
    headers: dict[str, str]
    raw: bytes

    @classmethod
    def parse(cls, raw: bytes) -> Head:
        """Parse a head (through its blank line, or without it)."""
        first, *lines = raw.rstrip(b"\r\n").split(b"\r\n")
        fields = (line.partition(b":") for line in lines if line)
        headers = {n.strip().lower().decode("latin-1"): v.strip().decode("latin-1") for n, _, v in fields}
        return cls(first, headers, raw)

    @property
    def status(self) -> int:
        """The status code of a response head."""
        return int(self.first.split(b" ", 2)[1])

    def content_length(self) -> int | None:
        """The Content-Length, if the head has one."""
        value = self.headers.get("content-length")
        return int(value) if value is not None else None

    def chunked(self) -> bool:
        """Whether the body is chunked."""
        return "chunked" in self.headers.get("transfer-encoding", "").lower()

    def with_length(self, length: int) -> bytes:
        """The head with its body framing replaced by ``Content-Length: length``."""
        out = [self.first]
        for line in self.raw[:-4].split(b"\r\n")[1:]:
            if line.partition(b":")[0].strip().lower() not in (b"content-length", b"transfer-encoding"):
                out.append(line)
        out.append(b"Content-Length: %d" % length)
        return b"\r\n".join(out) + b"\r\n\r\n"


class Framer:
    """Frames one direction of an HTTP/1.1 connection into messages. ``feed`` returns the bytes to pass on
    (with the initial event inserted into event streams when ``eventstream``); :meth:`messages` the messages
    completed so far (when ``keep``). A request without a length has no body; a response without one runs
    until the connection closes."""

    def __init__(self, *, requests: bool, eventstream: bool = False, keep: bool = False) -> None:
        self._requests, self._eventstream, self._keep = requests, eventstream, keep
        self._buf = b""
        self._out = bytearray()
        self._message = bytearray()
        self._done: list[bytes] = []
        self.completed = 0  # messages completed so far
        self._parser = self._parse()
        next(self._parser)

    def messages(self) -> list[bytes]:
        """The messages completed since the last call."""
        done, self._done = self._done, []
        return done

    def feed(self, data: bytes) -> bytes:
        """Take the next bytes; returns the bytes to pass on."""
        self._buf += data
        next(self._parser)
        out, self._out = bytes(self._out), bytearray()
        return out

    def _parse(self) -> Generator[None, None, None]:
        """Runs until it needs more bytes (a yield), message after message."""
        while True:
            head = Head.parse((yield from self._until(b"\r\n\r\n")))
            length = head.content_length()
            if head.chunked():
                if self._eventstream and _EVENTSTREAM in head.headers.get("content-type", "").lower():
                    self._emit(_INITIAL_CHUNK)
                while size := chunk_size((yield from self._until(b"\r\n"))):
                    yield from self._pass(size + 2)
                yield from self._pass(2)  # no trailers
            elif length is None and not self._requests:
                yield from self._pass(_UNTIL_CLOSED)
            else:
                yield from self._pass(length or 0)
            self.completed += 1
            if self._keep:
                self._done.append(bytes(self._message))
            self._message = bytearray()

    def _emit(self, data: bytes) -> None:
        self._out += data
        if self._keep:
            self._message += data

    def _until(self, mark: bytes) -> Generator[None, None, bytes]:
        """Pass on the bytes through ``mark`` once they are in."""
        while (end := self._buf.find(mark)) < 0:
            yield
        line, self._buf = self._buf[: end + len(mark)], self._buf[end + len(mark) :]
        self._emit(line)
        return line

    def _pass(self, n: int) -> Generator[None, None, None]:
        """Pass on ``n`` bytes as they come."""
        while n > 0:
            if not self._buf:
                yield
                continue
            part, self._buf = self._buf[:n], self._buf[n:]
            self._emit(part)
            n -= len(part)


def http_message(raw: bytes) -> tuple[str, dict[str, str], bytes]:
    """(start line, headers by lower-case name, body) of one complete HTTP/1.1 message (body de-chunked)."""
    reader = Reader(io.BytesIO(raw).read)
    head = Head.parse(reader.head() or b"")
    body = reader.chunked_body() if head.chunked() else raw[len(head.raw) :]
    return head.first.decode("latin-1"), head.headers, body


class Closed(Exception):
    """The peer closed the connection (or it broke) before a whole message arrived."""


class Reader:
    """Reads a socket (its ``recv``, or a file's ``read``) through one buffer: heads up to the blank line, exact
    lengths, chunked bodies."""

    __slots__ = ("_buf", "_recv")

    def __init__(self, recv: Callable[[int], bytes]) -> None:
        self._recv = recv
        self._buf = bytearray()

    def _fill(self) -> None:
        data = self._recv(262_144)
        if not data:
            raise Closed("connection closed")
        self._buf += data

    def _until(self, mark: bytes) -> bytes:
        start = 0
        while (end := self._buf.find(mark, start)) < 0:
            if len(self._buf) > MAX_HEAD:
                raise Closed(f"no {mark!r} within {MAX_HEAD} bytes")
            start = max(0, len(self._buf) - len(mark) + 1)
            self._fill()
        return self.exact(end + len(mark))

    def head(self) -> bytes | None:
        """The next message head (through ``\\r\\n\\r\\n``); None on a clean close between messages."""
        try:
            return self._until(b"\r\n\r\n")
        except Closed:
            if self._buf:
                raise
            return None

    def exact(self, n: int) -> bytes:
        """Exactly ``n`` bytes."""
        while len(self._buf) < n:
            self._fill()
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data

    def line(self) -> bytes:
        """One line including its ``\\r\\n``."""
        return self._until(b"\r\n")

    def chunked_body(self) -> bytes:
        """A whole chunked body, de-chunked (trailers dropped)."""
        parts: list[bytes] = []
        while size := chunk_size(self.line()):
            parts.append(self.exact(size))
            self.exact(2)
        self.trailers()
        return b"".join(parts)

    def trailers(self) -> None:
        """Skip a chunked body's trailers, through its blank line."""
        while self.line() != b"\r\n":
            pass

    def buffered(self) -> int:
        """Bytes already read from the socket and not yet consumed."""
        return len(self._buf)


def json_response(status: int, body: bytes, content_type: str) -> bytes:
    """A whole keep-alive HTTP/1.1 response with an AWS-style request id."""
    reason = "OK" if status == 200 else "Bad Request"
    return (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nx-amzn-RequestId: {uuid.uuid4()}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: keep-alive\r\n\r\n"
    ).encode("latin-1") + body
