"""The event-stream shim: the initial-response event goes first in event streams, nothing else moves, and a\nconnection that breaks ends quietly."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading

from botocore.eventstream import EventStreamBuffer

from tools.eventstream_shim import LOOPBACK, EventStreamShim, _Responses, initial_response_message


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
    r = _Responses()
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
        with EventStreamShim(upstream.getsockname()) as shim:
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
            threads = list(shim._threads)
        for t in threads:
            t.join(5)
            assert not t.is_alive()
    finally:
        threading.excepthook = previous
        upstream.close()
    assert failures == []
