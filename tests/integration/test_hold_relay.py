"""tools.hold_relay.RequestHold, for real, against a tiny local HTTP server: held requests reach the server
late (also when the client gave up on them), responses pass at once, and every exchange is noted."""

from __future__ import annotations

import http.client
import socket
import time
from collections.abc import Iterator

import pytest

from tests.integration.tiny_http import TinyHttpServer, tiny_http_server
from tests.unit.helpers import wait_until
from tools.hold_relay import RequestHold

pytestmark = pytest.mark.integration

HOLD = 0.6


@pytest.fixture
def relay() -> Iterator[tuple[RequestHold, TinyHttpServer]]:
    with tiny_http_server(lambda path: b"ok " + path.encode()) as server:
        hold = RequestHold(("127.0.0.1", server.port))
        try:
            yield hold, server
        finally:
            hold.stop()


def _get(port: int, path: str, timeout: float = 5.0) -> tuple[float, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        sent = time.monotonic()
        conn.request("GET", path)
        return sent, conn.getresponse().read()
    finally:
        conn.close()


def test_transparent_until_held_then_requests_arrive_late_and_answers_come_back(
    relay: tuple[RequestHold, TinyHttpServer],
) -> None:
    hold, server = relay
    sent, body = _get(hold.port, "/first")
    assert body == b"ok /first" and server.arrivals[-1][0] - sent < HOLD / 2
    hold.hold(HOLD)
    sent, body = _get(hold.port, "/late")
    assert body == b"ok /late"
    arrived = next(t for t, p in server.arrivals if p == "/late")
    assert arrived - sent >= HOLD * 0.9
    hold.release()
    sent, _ = _get(hold.port, "/again")
    assert next(t for t, p in server.arrivals if p == "/again") - sent < HOLD / 2
    [late] = [x for x in hold.log() if b"/late" in x.request]
    assert late.forwarded is not None and late.forwarded - late.arrived >= HOLD * 0.9
    assert late.answered is not None and b"ok /late" in late.response


def test_a_request_the_client_gave_up_on_still_reaches_the_server(
    relay: tuple[RequestHold, TinyHttpServer],
) -> None:
    hold, server = relay
    hold.hold(HOLD)
    with pytest.raises(socket.timeout):
        _get(hold.port, "/abandoned", timeout=0.1)
    given_up = time.monotonic()
    wait_until(lambda: any(p == "/abandoned" for _, p in server.arrivals), timeout=5)
    arrived = next(t for t, p in server.arrivals if p == "/abandoned")
    assert arrived > given_up  # it landed after its client had stopped waiting
