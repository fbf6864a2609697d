"""HTTP/1.1 messages as they pass through a proxy byte by byte: :class:`Framer` frames one direction of a
connection into messages (Content-Length or chunked), optionally inserting the ``initial-response`` event that
kinesis-local omits from event streams; :func:`http_message` splits a complete message. Used by
:mod:`tools.tcp_proxy` and the meters it feeds."""

from __future__ import annotations

import binascii
import struct
from typing import Final

__all__ = ["Framer", "http_message", "initial_response_message"]

_EVENTSTREAM: Final = b"application/vnd.amazon.eventstream"


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


def _fields(head: bytes) -> dict[bytes, bytes]:
    """A message head's fields: lower-case names, lower-case values without surrounding blanks."""
    lines = head.lower().split(b"\r\n")[1:]
    return {
        name.strip(): value.strip() for name, _, value in (line.partition(b":") for line in lines if line)
    }


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
                fields = _fields(head)
                if b"chunked" in fields.get(b"transfer-encoding", b""):
                    self._state = "chunk-size"
                    if (
                        self._eventstream
                        and not self._requests
                        and _EVENTSTREAM in fields.get(b"content-type", b"")
                    ):
                        out += _INITIAL_CHUNK
                elif b"content-length" in fields:
                    self._left, self._state = int(fields[b"content-length"]), "body"
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
    start, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
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
    return start, headers, body
