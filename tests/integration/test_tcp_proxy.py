"""tools.tcp_proxy.FaultProxy, for real: every fault against a tiny local HTTP server (raw sockets and
keep-alive connections), requests held (they reach the server late, also when the client gave up on them;
responses pass at once; every exchange noted), then against the moto emulator with a real boto3 client (the
errors botocore raises, and the same client working again after heal)."""

from __future__ import annotations

import http.client
import os
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

import pytest
from botocore.exceptions import ConnectionClosedError, EndpointConnectionError, ReadTimeoutError

from tests.integration.tiny_http import TinyHttpServer, tiny_http_server
from tests.unit.helpers import wait_until
from tools.emulators import client_kwargs
from tools.tcp_proxy import FaultProxy, ProxyError

pytestmark = pytest.mark.integration

BODY_SIZE = 4000
HOLD = 0.6


@pytest.fixture
def http_server() -> Iterator[tuple[str, int]]:
    with tiny_http_server(lambda _path: b"a" * BODY_SIZE) as server:
        yield ("127.0.0.1", server.port)


def _proxy_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("fault-proxy")]


def _get(conn: http.client.HTTPConnection) -> bytes:
    conn.request("GET", "/")
    return conn.getresponse().read()


def _raw_exchange(port: int) -> tuple[bytes, BaseException | None]:
    """Send one GET on a fresh socket; everything received until the connection ends, and how it ended."""
    received = b""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except OSError as exc:
            return received, exc
    return received, None


def test_transparent_many_concurrent_keepalive_connections_then_clean_stop(
    http_server: tuple[str, int],
) -> None:
    fds_before = len(os.listdir("/proc/self/fd"))
    with FaultProxy(http_server) as proxy:
        assert proxy.url() == f"http://127.0.0.1:{proxy.port}"

        def client(_: int) -> int:
            conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
            try:
                return sum(len(_get(conn)) for _ in range(5))  # five requests on one connection
            finally:
                conn.close()

        with ThreadPoolExecutor(40) as pool:
            sizes = list(pool.map(client, range(40)))
        assert sizes == [5 * BODY_SIZE] * 40
        stats = proxy.stats
        assert stats.accepted == 40
        assert stats.bytes_to_client >= 200 * BODY_SIZE
        assert stats.bytes_to_target > 0
        idle = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
        _get(idle)  # left open across stop()
    assert _proxy_threads() == []
    assert proxy.stats.active == 0
    idle.close()
    wait_until(lambda: len(os.listdir("/proc/self/fd")) <= fds_before, what="every socket closed")


def test_refuse_drops_open_connections_refuses_new_ones_and_heals_on_the_same_port(
    http_server: tuple[str, int],
) -> None:
    with FaultProxy(http_server) as proxy:
        port = proxy.port
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        assert len(_get(conn)) == BODY_SIZE
        proxy.fault("refuse")
        assert proxy.stats.dropped == 1 and proxy.stats.active == 0
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
        with pytest.raises((ConnectionError, http.client.HTTPException)):
            _get(conn)  # the kept-alive connection was reset; reconnecting is refused
        conn.close()
        proxy.heal()
        assert proxy.port == port
        assert len(_get(conn)) == BODY_SIZE  # http.client reconnects on the same object


def test_reset_resets_open_and_new_connections_as_soon_as_they_send(http_server: tuple[str, int]) -> None:
    with FaultProxy(http_server) as proxy:
        conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
        assert len(_get(conn)) == BODY_SIZE
        proxy.fault("reset")
        with pytest.raises(ConnectionResetError):
            _get(conn)
        conn.close()
        received, error = _raw_exchange(proxy.port)  # connecting works; the first byte sent gets a RST
        assert (received, type(error)) == (b"", ConnectionResetError)
        wait_until(lambda: proxy.stats.resets == 2, what="both resets counted")
        proxy.heal()
        assert len(_get(conn)) == BODY_SIZE


def test_reset_mid_response_passes_the_request_and_part_of_the_response(http_server: tuple[str, int]) -> None:
    with FaultProxy(http_server) as proxy:
        proxy.fault("reset_mid_response", after_bytes=12)
        received, error = _raw_exchange(proxy.port)
        assert isinstance(error, ConnectionResetError)
        assert len(received) <= 12  # a RST may discard what the client had not read yet
        assert proxy.stats.bytes_to_client == 12
        assert proxy.stats.bytes_to_target > 0  # the request went through
        proxy.heal()
        received, error = _raw_exchange(proxy.port)
        assert error is None and received.startswith(b"HTTP/1.1 200") and received.endswith(b"a" * BODY_SIZE)


def test_slow_holds_responses_past_a_read_timeout_and_heal_releases_them(
    http_server: tuple[str, int],
) -> None:
    with FaultProxy(http_server) as proxy:
        conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=0.3)
        proxy.fault("slow", delay=30.0)
        with pytest.raises(TimeoutError):
            _get(conn)
        conn.close()
        proxy.heal()
        assert len(_get(conn)) == BODY_SIZE


def test_black_hole_holds_responses_until_the_fault_changes(http_server: tuple[str, int]) -> None:
    with FaultProxy(http_server) as proxy:
        conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=0.5)
        with proxy.outage("black_hole"):
            assert proxy.mode == "black_hole"
            with pytest.raises(TimeoutError):
                _get(conn)
            conn.close()
        assert len(_get(conn)) == BODY_SIZE


def test_outage_heals_on_exit_and_rejects_unknown_modes(http_server: tuple[str, int]) -> None:
    with FaultProxy(http_server) as proxy:
        with proxy.outage("refuse"):
            assert proxy.mode == "refuse"
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.1", proxy.port), timeout=5).close()
        assert proxy.mode == "transparent"
        with pytest.raises(ValueError, match="fault mode"), proxy.outage("flaky"):
            pass
        with pytest.raises(ValueError, match="delay"):
            proxy.fault("slow", delay=0)
        conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
        assert len(_get(conn)) == BODY_SIZE
        conn.close()


# -- requests held -------------------------------------------------------------------------------------


@pytest.fixture
def paths_server() -> Iterator[TinyHttpServer]:
    with tiny_http_server(lambda path: b"ok " + path.encode()) as server:
        yield server


def _get_path(port: int, path: str, timeout: float = 5.0) -> tuple[float, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        sent = time.monotonic()
        conn.request("GET", path)
        return sent, conn.getresponse().read()
    finally:
        conn.close()


def test_transparent_until_held_then_requests_arrive_late_and_answers_come_back(
    paths_server: TinyHttpServer,
) -> None:
    server = paths_server
    with FaultProxy(("127.0.0.1", server.port), record=True) as proxy:
        sent, body = _get_path(proxy.port, "/first")
        assert body == b"ok /first" and server.arrivals[-1][0] - sent < HOLD / 2
        proxy.hold(HOLD)
        sent, body = _get_path(proxy.port, "/late")
        assert body == b"ok /late"
        arrived = next(t for t, p in server.arrivals if p == "/late")
        assert arrived - sent >= HOLD * 0.9
        proxy.release()
        sent, _ = _get_path(proxy.port, "/again")
        assert next(t for t, p in server.arrivals if p == "/again") - sent < HOLD / 2
        [late] = [x for x in proxy.log() if b"/late" in x.request]
        assert late.forwarded is not None and late.forwarded - late.arrived >= HOLD * 0.9
        assert late.answered is not None and b"ok /late" in late.response


def test_a_request_the_client_gave_up_on_still_reaches_the_server_and_its_answer_is_noted(
    paths_server: TinyHttpServer,
) -> None:
    server = paths_server
    with FaultProxy(("127.0.0.1", server.port), record=True) as proxy:
        proxy.hold(HOLD)
        with pytest.raises(socket.timeout):
            _get_path(proxy.port, "/abandoned", timeout=0.1)
        given_up = time.monotonic()
        wait_until(lambda: any(p == "/abandoned" for _, p in server.arrivals), timeout=5)
        arrived = next(t for t, p in server.arrivals if p == "/abandoned")
        assert arrived > given_up  # it landed after its client had stopped waiting
        wait_until(
            lambda: all(x.completed is not None for x in proxy.log()), timeout=5, what="the answer noted"
        )
        [abandoned] = proxy.log()
        assert b"ok /abandoned" in abandoned.response


def test_loopback_only_and_stop_is_idempotent() -> None:
    with pytest.raises(ProxyError, match="loopback-only"):
        FaultProxy(("10.0.0.1", 80))
    unused = FaultProxy(("127.0.0.1", 9))
    unused.stop()
    unused.stop()
    with pytest.raises(ProxyError, match="not running"):
        unused.fault("reset")


# -- through a real boto3 client against the moto emulator -----------------------------------------------


@pytest.fixture
def moto_proxy(emulators: Any) -> Iterator[FaultProxy]:
    port = urlsplit(emulators.aws_endpoint).port
    assert port is not None
    with FaultProxy(("127.0.0.1", port)) as proxy:
        yield proxy
    assert _proxy_threads() == []


@pytest.fixture
def dynamodb_via(moto_proxy: FaultProxy, boto_session: Any) -> Any:
    kwargs = client_kwargs(
        moto_proxy.url(), retries={"mode": "standard", "max_attempts": 2}, connect_timeout=1, read_timeout=1
    )
    return boto_session.client("dynamodb", **kwargs)


@pytest.mark.parametrize(
    ("fault", "error"),
    [
        ("refuse", EndpointConnectionError),
        ("reset", ConnectionClosedError),
        ("reset_mid_response", ConnectionClosedError),
        ("slow", ReadTimeoutError),
        ("black_hole", ReadTimeoutError),
    ],
)
def test_boto3_sees_each_fault_and_the_same_client_works_after_heal(
    moto_proxy: FaultProxy, dynamodb_via: Any, fault: str, error: type[Exception]
) -> None:
    assert isinstance(dynamodb_via.list_tables()["TableNames"], list)
    with moto_proxy.outage(fault, delay=5.0, after_bytes=10), pytest.raises(error):
        dynamodb_via.list_tables()
    assert isinstance(dynamodb_via.list_tables()["TableNames"], list)
