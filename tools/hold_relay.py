"""A loopback-only TCP relay that holds requests, not responses: requests that reach the server late.

``tools.tcp_proxy.FaultProxy`` ``slow`` holds each *response*, so the request behind it has already reached
the server: the client waits, but its write is not late. ``RequestHold`` holds each *request* ``delay``
seconds before passing it on, also after the client gave up on it, as a congested network or a process that
stalled in the middle of a call would deliver it; responses pass at once. It notes every exchange (request
bytes, response bytes, when each passed), so a test can check what the server answered to the late ones::

    relay = RequestHold(("127.0.0.1", moto_port))
    dynamodb = boto3.client("dynamodb", endpoint_url=relay.url(), ...)
    relay.hold(10.0)      # from now on, each request reaches moto 10 s after it reached the relay
    ...
    relay.release()       # new requests pass at once again
    late = [x for x in relay.log() if x.forwarded and x.forwarded - x.arrived > 5]
    relay.stop()

One thread accepts; one thread per connection moves the bytes both ways. Only 127.0.0.1 is bound or
connected to.
"""

from __future__ import annotations

import selectors
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field

__all__ = ["Exchange", "RequestHold"]


@dataclass
class Exchange:
    """One request through the relay and the response the server gave it (bytes as they passed)."""

    arrived: float  # its first bytes reached the relay
    request: bytearray = field(default_factory=bytearray)
    forwarded: float | None = None  # its last bytes so far passed on to DynamoDB
    answered: float | None = None  # the first bytes of the response came back
    response: bytearray = field(default_factory=bytearray)


class RequestHold:
    """A loopback TCP relay that can hold every request a while before it passes it on, also after the
    client gave up waiting: requests that reach DynamoDB late, as from a congested network or a process that
    stalled in the middle of a call. Responses pass at once. (``FaultProxy`` ``slow`` holds responses: the
    requests behind them reach the server at once.) Notes every exchange, so that a test can tell which late
    requests were refused."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.delay = 0.0
        self._lock = threading.Lock()
        self._exchanges: list[Exchange] = []
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self.port = int(self._listener.getsockname()[1])
        self._threads = [threading.Thread(target=self._accept, name="request-hold", daemon=True)]
        self._threads[0].start()

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def hold(self, delay: float) -> None:
        """From now on every request reaches DynamoDB ``delay`` seconds after it reached us."""
        self.delay = delay

    def release(self) -> None:
        """New requests pass at once again (those held keep their time)."""
        self.delay = 0.0

    def log(self) -> list[Exchange]:
        with self._lock:
            return list(self._exchanges)

    def stop(self) -> None:
        self._stop.set()
        for t in list(self._threads):
            t.join(10)
        self._listener.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            t = threading.Thread(target=self._pump, args=(client, upstream), daemon=True)
            self._threads.append(t)
            t.start()

    def _pump(self, client: socket.socket, upstream: socket.socket) -> None:
        try:
            self._relay(client, upstream)
        except OSError:
            pass
        finally:
            client.close()
            upstream.close()

    def _relay(self, client: socket.socket, upstream: socket.socket) -> None:
        held: deque[tuple[float, bytes, Exchange]] = deque()  # (when it may go on, bytes, its exchange)
        current: Exchange | None = None
        client_open, linger = True, float("inf")
        with selectors.DefaultSelector() as sel:
            sel.register(client, selectors.EVENT_READ)
            sel.register(upstream, selectors.EVENT_READ)
            while not self._stop.is_set():
                now = time.monotonic()
                while held and held[0][0] <= now:
                    _, data, exchange = held.popleft()
                    upstream.sendall(data)
                    exchange.forwarded = time.monotonic()
                if not client_open and not held:  # the client gave up: keep the answer to the last request
                    linger = min(linger, now + 5.0)
                    if now > linger or (current is not None and current.answered is not None):
                        return
                wait = min(0.2, max(0.0, held[0][0] - now)) if held else 0.2
                for key, _ in sel.select(wait):
                    try:
                        data = key.fileobj.recv(65536)  # type: ignore[union-attr]
                    except OSError:
                        if key.fileobj is upstream:
                            return
                        data = b""  # the client reset: what it sent is still delivered
                    if key.fileobj is client:
                        if not data:
                            client_open = False
                            sel.unregister(client)
                            continue
                        if current is None or current.response:  # a new request on this connection
                            current = Exchange(time.monotonic())
                            with self._lock:
                                self._exchanges.append(current)
                        current.request += data
                        held.append((current.arrived + self.delay, data, current))
                        continue
                    if not data:
                        return
                    if current is not None:
                        current.answered = current.answered or time.monotonic()
                        current.response += data
                    if client_open:
                        try:
                            client.sendall(data)
                        except OSError:
                            client_open = False
                            sel.unregister(client)
