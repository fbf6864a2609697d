"""Just enough HTTP/1.1 for a loopback proxy: a buffered socket reader, message heads, JSON error answers."""

from __future__ import annotations

import logging
import select
import socket
import uuid
from dataclasses import dataclass

logger = logging.getLogger(__name__)

MAX_HEAD = 64 * 1024


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
        lines = raw[:-4].split(b"\r\n")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
        return cls(lines[0], headers, raw)

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
