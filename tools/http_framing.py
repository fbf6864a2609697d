"""Just enough HTTP/1.1 for the loopback proxies, in one place: message heads (:func:`head_fields`,
:class:`Head`), :class:`Framer` (one direction of a connection framed into messages byte by byte, Content-Length
or chunked, optionally inserting the ``initial-response`` event kinesis-local omits from event streams),
:func:`http_message` (a complete message split), :class:`Reader` (a socket read message by message) and
:func:`json_response`. Used by :mod:`tools.tcp_proxy` (and the meters it feeds) and
:mod:`tools.emulators.kinesis_proxy`."""

from __future__ import annotations

import binascii
import select
import socket
import struct
import uuid
from dataclasses import dataclass
from typing import Final

__all__ = [
    "Closed",
    "Framer",
    "Head",
    "Reader",
    "head_fields",
    "http_message",
    "initial_response_message",
    "json_response",
]

MAX_HEAD = 64 * 1024

_EVENTSTREAM: Final = "application/vnd.amazon.eventstream"


def _header(name: bytes, value: bytes) -> bytes:
    return bytes([len(name)]) + name + b"\x07" + struct.pack(">H", len(value)) + value  # 7: string


def initial_response_message() -> bytes:
    """One event-stream message: ``:message-type: event``, ``:event-type: initial-response``, payload ``{}``."""
    headers = _header(b":message-type", b"event") + _header(b":event-type", b"initial-response")
    payload = b"{}"
    total = 12 + len(headers) + len(payload) + 4
    prelude = struct.pack(">II", total, len(headers))
    prelude += struct.pack(">I", binascii.crc32(prelude))
    message = prelude + headers + payload
    return message + struct.pack(">I", binascii.crc32(message))


_INITIAL_CHUNK: Final = (
    f"{len(initial_response_message()):X}\r\n".encode() + initial_response_message() + b"\r\n"
)


def head_fields(head: bytes) -> tuple[bytes, dict[str, str]]:
    """A message head's first line and its fields (lower-case names, values without surrounding blanks)."""
    first, *lines = head.rstrip(b"\r\n").split(b"\r\n")
    fields = (line.partition(b":") for line in lines if line)
    return first, {n.strip().lower().decode("latin-1"): v.strip().decode("latin-1") for n, _, v in fields}


class Framer:
    """Frames one direction of an HTTP/1.1 connection into messages. ``feed`` returns the bytes to pass on
    (with the initial event inserted into event streams when ``eventstream``); :meth:`messages` the messages
    completed so far (when ``keep``). A request without a length has no body; a response without one runs
    until the connection closes."""

    def __init__(self, *, requests: bool, eventstream: bool = False, keep: bool = False) -> None:
        self._requests, self._eventstream, self._keep = requests, eventstream, keep
        self._buf = b""
        self._state = "headers"
        self._left = 0  # body bytes left (content-length) or chunk bytes left (chunked)
        self._message = bytearray()
        self._done: list[bytes] = []
        self.completed = 0  # messages completed so far

    def messages(self) -> list[bytes]:
        done, self._done = self._done, []
        return done

    def _complete(self) -> None:
        self._state = "headers"
        self.completed += 1
        if self._keep:
            self._done.append(bytes(self._message))
        self._message = bytearray()

    def feed(self, data: bytes) -> bytes:
        self._buf += data
        out = bytearray()
        while self._buf:
            start = len(out)
            if self._state == "headers":
                end = self._buf.find(b"\r\n\r\n")
                if end < 0:
                    break
                head, self._buf = self._buf[: end + 4], self._buf[end + 4 :]
                out += head
                fields = head_fields(head)[1]
                if "chunked" in fields.get("transfer-encoding", "").lower():
                    self._state = "chunk-size"
                    if (
                        self._eventstream
                        and not self._requests
                        and _EVENTSTREAM in fields.get("content-type", "").lower()
                    ):
                        out += _INITIAL_CHUNK
                elif "content-length" in fields:
                    self._left, self._state = int(fields["content-length"]), "body"
                else:
                    self._state = "headers" if self._requests else "raw"  # raw: until the connection closes
                if self._keep:
                    self._message += out[start:]
                if self._state == "headers" or (self._state == "body" and self._left == 0):
                    self._complete()
                continue
            if self._state == "raw":
                out += self._buf
                self._buf = b""
            elif self._state == "body":
                part, self._buf = self._buf[: self._left], self._buf[self._left :]
                out += part
                self._left -= len(part)
            elif self._state == "chunk-size":
                end = self._buf.find(b"\r\n")
                if end < 0:
                    break
                line, self._buf = self._buf[: end + 2], self._buf[end + 2 :]
                out += line
                size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                self._left, self._state = (size + 2, "chunk") if size else (2, "trailer")
            elif self._state in ("chunk", "trailer"):
                part, self._buf = self._buf[: self._left], self._buf[self._left :]
                out += part
                self._left -= len(part)
                if self._left == 0 and self._state == "chunk":
                    self._state = "chunk-size"
            if self._keep:
                self._message += out[start:]
            if self._state in ("body", "trailer") and self._left == 0:
                self._complete()
        return bytes(out)


def http_message(raw: bytes) -> tuple[str, dict[str, str], bytes]:
    """(start line, headers by lower-case name, body) of one complete HTTP/1.1 message (body de-chunked)."""
    head, _, body = raw.partition(b"\r\n\r\n")
    start, headers = head_fields(head)
    if "chunked" in headers.get("transfer-encoding", "").lower():
        plain = bytearray()
        while True:
            size_line, _, body = body.partition(b"\r\n")
            size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                break
            plain += body[:size]
            body = body[size + 2 :]
        body = bytes(plain)
    return start.decode("latin-1"), headers, body


class Closed(Exception):
    """The peer closed the connection (or it broke) before a whole message arrived."""


class Reader:
    """Reads a socket through one buffer: heads up to the blank line, exact lengths, chunked bodies."""

    __slots__ = ("_buf", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buf = bytearray()

    def _fill(self) -> None:
        data = self.sock.recv(262_144)
        if not data:
            raise Closed("connection closed")
        self._buf += data

    def head(self) -> bytes | None:
        """The next message head (through ``\\r\\n\\r\\n``); None on a clean close between messages."""
        start = 0
        while True:
            end = self._buf.find(b"\r\n\r\n", start)
            if end >= 0:
                head = bytes(self._buf[: end + 4])
                del self._buf[: end + 4]
                return head
            if len(self._buf) > MAX_HEAD:
                raise Closed("message head too long")
            start = max(0, len(self._buf) - 3)
            try:
                self._fill()
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
        while True:
            end = self._buf.find(b"\r\n")
            if end >= 0:
                return self.exact(end + 2)
            if len(self._buf) > MAX_HEAD:
                raise Closed("line too long")
            self._fill()

    def chunked_body(self) -> bytes:
        """A whole chunked body, de-chunked (trailers dropped)."""
        parts: list[bytes] = []
        while True:
            size = int(self.line().split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while self.line() != b"\r\n":
                    pass
                return b"".join(parts)
            parts.append(self.exact(size))
            self.exact(2)

    def buffered(self) -> int:
        """Bytes already read from the socket and not yet consumed."""
        return len(self._buf)

    def dropped(self) -> bool:
        """True if the peer has closed an idle connection (readable with nothing buffered means EOF/reset)."""
        if self._buf:
            return False
        try:
            readable, _, _ = select.select([self.sock], [], [], 0)
        except (OSError, ValueError):
            return True
        if not readable:
            return False
        try:
            data = self.sock.recv(65536, socket.MSG_PEEK)
        except OSError:
            return True
        return not data


@dataclass
class Head:
    """A parsed message head: the first line, lower-cased header names, and the raw bytes."""

    first: bytes
    headers: dict[str, str]
    raw: bytes

    @classmethod
    def parse(cls, raw: bytes) -> Head:
        """Parse a head as read by :meth:`Reader.head`."""
        return cls(*head_fields(raw), raw)

    @property
    def status(self) -> int:
        """The status code of a response head."""
        return int(self.first.split(b" ", 2)[1])

    def content_length(self) -> int | None:
        value = self.headers.get("content-length")
        return int(value) if value is not None else None

    def chunked(self) -> bool:
        return "chunked" in self.headers.get("transfer-encoding", "").lower()

    def with_length(self, length: int) -> bytes:
        """The head with its body framing replaced by ``Content-Length: length``."""
        out = [self.first]
        for line in self.raw[:-4].split(b"\r\n")[1:]:
            name = line.partition(b":")[0].strip().lower()
            if name not in (b"content-length", b"transfer-encoding"):
                out.append(line)
        out.append(b"Content-Length: %d" % length)
        return b"\r\n".join(out) + b"\r\n\r\n"


def json_response(status: int, body: bytes, content_type: str, reason: str = "") -> bytes:
    """A whole keep-alive HTTP/1.1 response with an AWS-style request id."""
    reason = reason or ("OK" if status == 200 else "Bad Request")
    request_id = str(uuid.uuid4())
    return (
        f"HTTP/1.1 {status} {reason}\r\n"
        f"Content-Type: {content_type}\r\n"
        f"x-amzn-RequestId: {request_id}\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: keep-alive\r\n\r\n"
    ).encode("latin-1") + body
