"""The fault proxy's HTTP framing: with ``eventstream=True`` the initial-response event goes first in event
streams and nothing else moves; messages are framed one by one for a meter (and the meter sees each request
before it reaches the server); a connection that breaks ends quietly."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading

from botocore.eventstream import EventStreamBuffer

from tests.unit.helpers import wait_until
from tools.http_framing import Framer, http_message, initial_response_message
from tools.tcp_proxy import LOOPBACK, FaultProxy


def test_the_initial_response_is_a_valid_event_stream_message() -> None:
    buf = EventStreamBuffer()
    buf.add_data(initial_response_message())
    [message] = list(buf)
    assert message.headers[":event-type"] == "initial-response"
    assert message.headers[":message-type"] == "event"
    assert message.payload == b"{}"


def test_event_streams_get_it_first_and_other_responses_on_the_same_connection_pass_unchanged() -> None:
    plain = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
    events = (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.amazon.eventstream\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3\r\nabc\r\n0\r\n\r\n"
    )
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n"
    stream = plain + events + chunked + plain
    r = Framer(requests=False, eventstream=True)
    out = b"".join(r.feed(stream[i : i + 7]) for i in range(0, len(stream), 7))  # split anywhere
    message = initial_response_message()
    injected = f"{len(message):X}\r\n".encode() + message + b"\r\n"
    head = events.split(b"\r\n\r\n", 1)[0] + b"\r\n\r\n"
    assert out == plain + head + injected + events[len(head) :] + chunked + plain


def test_a_client_that_goes_away_mid_response_ends_its_connection_quietly() -> None:
    """The fault tests reset the caller's connection while the emulator is still answering: the shim must close
    its side to the emulator without sending anything more, its connection thread must end without an
    exception, and the shim must go on serving new connections."""
    failures: list[BaseException | None] = []
    previous = threading.excepthook
    threading.excepthook = lambda args: failures.append(args.exc_value)
    upstream = socket.create_server((LOOPBACK, 0))
    request = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
    try:
        with FaultProxy(upstream.getsockname(), eventstream=True) as shim:
            for _ in range(2):
                client = socket.create_connection((LOOPBACK, shim.port))
                client.sendall(request)
                server, _ = upstream.accept()
                server.settimeout(5)
                assert server.recv(1024) == request
                # Reset the client's side (RST, no FIN), then answer at length: the shim writes to a dead socket.
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                client.close()
                with contextlib.suppress(OSError):
                    for _ in range(20):
                        server.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 65536\r\n\r\n" + b"x" * 65536)
                rest = b""
                with contextlib.suppress(ConnectionResetError):
                    while chunk := server.recv(65536):  # until the shim closes its side
                        rest += chunk
                server.close()
                assert rest == b""  # nothing sent again on the client's behalf
            wait_until(lambda: shim.stats.active == 0, timeout=5, what="every connection to end")
    finally:
        threading.excepthook = previous
        upstream.close()
    assert failures == []


def test_messages_are_framed_one_by_one_however_the_bytes_arrive() -> None:
    get = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
    post = b"POST /b HTTP/1.1\r\nContent-Length: 4\r\n\r\nbody"
    requests = Framer(requests=True, keep=True)
    stream = get + post + get
    out = b"".join(requests.feed(stream[i : i + 5]) for i in range(0, len(stream), 5))
    assert out == stream
    assert requests.messages() == [get, post, get]
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n3\r\nyou\r\n0\r\n\r\n"
    plain = b"HTTP/1.1 400 Bad\r\nContent-Length: 2\r\n\r\n{}"
    responses = Framer(requests=False, keep=True)
    assert responses.feed(chunked + plain[:20]) == chunked  # a head passes on once it is whole
    assert responses.messages() == [chunked]
    assert responses.feed(plain[20:]) == plain
    assert responses.messages() == [plain]
    assert http_message(chunked) == ("HTTP/1.1 200 OK", {"transfer-encoding": "chunked"}, b"hiyou")
    assert http_message(post)[2] == b"body"


class _Recorder:
    def __init__(self) -> None:
        self.seen: list[tuple[str, bytes | None]] = []

    def begin(self, request: bytes) -> object:
        self.seen.append(("begin", request))
        return len(self.seen)

    def end(self, token: object, response: bytes | None) -> None:
        self.seen.append((f"end {token}", response))


def test_a_meter_sees_each_request_before_the_server_and_its_response_before_the_client() -> None:
    upstream = socket.create_server((LOOPBACK, 0))
    meter = _Recorder()
    request = b"POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"
    response = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    try:
        with FaultProxy(upstream.getsockname(), meter=meter) as proxy:
            client = socket.create_connection((LOOPBACK, proxy.port), timeout=5)
            client.sendall(request[:10])
            server, _ = upstream.accept()
            server.settimeout(5)
            assert server.recv(1024) == request[:10]
            assert meter.seen == []
            client.sendall(request[10:])
            assert server.recv(1024) == request[10:]
            assert meter.seen == [("begin", request)]
            server.sendall(response)
            assert client.recv(1024) == response
            assert meter.seen == [("begin", request), ("end 1", response)]
            client.sendall(request)  # unanswered when the connection ends: the meter hears None
            assert server.recv(1024) == request
            client.close()
            wait_until(lambda: len(meter.seen) == 4, timeout=5, what="the unanswered request to end")
            assert meter.seen[3] == ("end 3", None)
            server.close()
    finally:
        upstream.close()
