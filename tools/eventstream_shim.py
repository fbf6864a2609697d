"""A loopback HTTP shim in front of kinesis-local that makes its SubscribeToShard answers readable by boto3.

kinesis-local streams SubscribeToShard events but never sends the ``initial-response`` event that the AWS
event-stream protocol starts with, and botocore refuses a stream without one ("First event was not of type
initial-response"). Rather than patching botocore in the process under test, this shim sits on the network
path (127.0.0.1 only) and inserts that event as the first chunk of every ``application/vnd.amazon.eventstream``
response; every other byte passes unchanged. Responses are framed (Content-Length or chunked) so that a
connection kept alive across many requests is handled response by response.
"""

from __future__ import annotations

import binascii
import logging
import selectors
import socket
import struct
import threading

__all__ = ["EventStreamShim", "initial_response_message"]

logger = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
_EVENTSTREAM = b"application/vnd.amazon.eventstream"


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


_INITIAL_CHUNK = f"{len(initial_response_message()):X}\r\n".encode() + initial_response_message() + b"\r\n"


class _Responses:
    """Frames the upstream byte stream into responses and adds the initial event where it is missing."""

    def __init__(self) -> None:
        self._buf = b""
        self._state = "headers"
        self._left = 0  # body bytes left (content-length) or chunk bytes left (chunked)

    def feed(self, data: bytes) -> bytes:
        self._buf += data
        out = b""
        while self._buf:
            if self._state == "headers":
                end = self._buf.find(b"\r\n\r\n")
                if end < 0:
                    break
                head, self._buf = self._buf[: end + 4], self._buf[end + 4 :]
                out += head
                lower = head.lower()
                if b"transfer-encoding: chunked" in lower:
                    self._state = "chunk-size"
                    if _EVENTSTREAM in lower:
                        out += _INITIAL_CHUNK
                elif b"content-length:" in lower:
                    length = lower.split(b"content-length:", 1)[1].split(b"\r\n", 1)[0]
                    self._left, self._state = int(length.strip()), "body"
                    if self._left == 0:
                        self._state = "headers"
                else:
                    self._state = "raw"  # until the connection closes
            elif self._state == "raw":
                out, self._buf = out + self._buf, b""
            elif self._state == "body":
                part, self._buf = self._buf[: self._left], self._buf[self._left :]
                out += part
                self._left -= len(part)
                if self._left == 0:
                    self._state = "headers"
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
                if self._left == 0:
                    self._state = "chunk-size" if self._state == "chunk" else "headers"
        return out


class EventStreamShim:
    """Listens on 127.0.0.1:``port`` and forwards to ``target`` (on 127.0.0.1), fixing event streams."""

    def __init__(self, target: tuple[str, int]) -> None:
        if target[0] not in (LOOPBACK, "localhost"):
            raise ValueError(f"target {target} is not on {LOOPBACK}")
        self.target = (LOOPBACK, target[1])
        self._listener = socket.create_server((LOOPBACK, 0))
        self.port: int = self._listener.getsockname()[1]
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._accept = threading.Thread(target=self._accept_loop, daemon=True, name="eventstream-shim")

    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def __enter__(self) -> EventStreamShim:
        self._accept.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._listener.close()
        self._accept.join(5)
        for t in self._threads:
            t.join(5)

    def _accept_loop(self) -> None:
        self._listener.settimeout(0.2)
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            t = threading.Thread(
                target=self._serve, args=(client,), daemon=True, name="eventstream-shim-conn"
            )
            self._threads = [x for x in self._threads if x.is_alive()] + [t]
            t.start()

    def _serve(self, client: socket.socket) -> None:
        responses = _Responses()
        try:
            upstream = socket.create_connection(self.target, timeout=5)
        except OSError:
            client.close()
            return
        with client, upstream, selectors.DefaultSelector() as sel:
            sel.register(client, selectors.EVENT_READ)
            sel.register(upstream, selectors.EVENT_READ)
            while not self._stop.is_set():
                for key, _ in sel.select(timeout=0.2):
                    # Either side may go away at any time (a fault proxy resets it): that ends this connection.
                    try:
                        data = key.fileobj.recv(65536)  # type: ignore[union-attr]
                        if not data:
                            return
                        if key.fileobj is client:
                            upstream.sendall(data)
                        else:
                            client.sendall(responses.feed(data))
                    except OSError:
                        return
