"""The event-stream shim's framing: the initial-response event goes first in event streams, nothing else moves."""

from __future__ import annotations

from botocore.eventstream import EventStreamBuffer

from tools.eventstream_shim import _Responses, initial_response_message


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
