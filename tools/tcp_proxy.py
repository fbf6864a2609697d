"""The network fault tool: a TCP proxy on 127.0.0.1 in front of one local service, with faults switched on
and off while it runs (docs/emulators.md has what a client sees under each). Each connection has a thread per
direction: blocking reads, woken by shutting the read side when the connection must go."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Final, Protocol

from tools.http_framing import Framer

__all__ = ["LOOPBACK", "MODES", "Exchange", "FaultProxy", "Meter", "ProxyError", "ProxyStats", "address"]

logger = logging.getLogger(__name__)

LOOPBACK: Final = "127.0.0.1"
MODES: Final = ("refuse", "reset", "reset_mid_response", "slow", "black_hole")
_CHUNK: Final = 65536
_SEND_TIMEOUT: Final = struct.pack("ll", 10, 0)  # SO_SNDTIMEO: 10 s for a client that stops reading
_WAIT: Final = 5.0  # the bound of every other wait: connect, a join, an abandoned request's answer


class ProxyError(RuntimeError):
    """The proxy could not start, listen again on its port, or apply a fault in time."""


@dataclass(frozen=True)
class ProxyStats:
    """Counters since start (a snapshot)."""

    accepted: int = 0  # connections accepted from clients
    active: int = 0  # connections open right now
    dropped: int = 0  # open connections closed by a ``refuse`` outage or stop() (with RST)
    resets: int = 0  # connections reset by ``reset`` or ``reset_mid_response``
    bytes_to_target: int = 0
    bytes_to_client: int = 0


@dataclass
class Exchange:
    """One request through the proxy and the response the server gave it (bytes as they passed)."""

    arrived: float  # its first bytes reached the proxy (time.monotonic)
    request: bytearray = field(default_factory=bytearray)
    forwarded: float | None = None  # its last bytes so far handed on to the server
    answered: float | None = None  # the first bytes of the response came back
    completed: float | None = None  # its last bytes came back (noted when the proxy frames responses)
    response: bytearray = field(default_factory=bytearray)


class Meter(Protocol):
    """Sees every complete HTTP message of a connection."""

    def begin(self, request: bytes) -> object:
        """A complete request, before its last byte is forwarded; returns a token for :meth:`end`."""
        ...

    def end(self, token: object, response: bytes | None) -> None:
        """Its complete response, before the client gets it; None when none will come (the connection
        ended). Called once for every :meth:`begin`, in order."""
        ...


@dataclass(frozen=True)
class _Fault:
    mode: str = "transparent"
    delay: float | None = 0.0  # how long each response chunk is held; None: until the fault changes
    after_bytes: int = 0
    generation: int = 0


def address(url: str) -> tuple[str, int]:
    """The (host, port) of an endpoint URL such as ``http://127.0.0.1:4566``."""
    host, _, port = url.rsplit("/", 1)[-1].partition(":")
    return host, int(port)


def _abort(sock: socket.socket) -> None:
    """Close with a TCP RST instead of a FIN (SO_LINGER on, timeout 0)."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


class FaultProxy:
    """Forwards 127.0.0.1:``port`` to ``target`` (which must be on 127.0.0.1), with faults on demand.
    ``eventstream=True`` inserts the ``initial-response`` event kinesis-local omits (botocore requires it),
    ``meter=`` hands every message to a :class:`Meter`, ``record=True`` notes every :class:`Exchange`."""

    def __init__(
        self,
        target: tuple[str, int],
        *,
        eventstream: bool = False,
        record: bool = False,
        meter: Meter | None = None,
    ) -> None:
        host, target_port = target
        if host not in (LOOPBACK, "localhost"):
            raise ProxyError(f"target {host}:{target_port} is not on {LOOPBACK}; the proxy is loopback-only")
        self.target: tuple[str, int] = (LOOPBACK, int(target_port))
        self.port = 0  # chosen when it starts; kept across refuse() and heal()
        self.eventstream, self.record, self.meter = eventstream, record, meter
        self._cond = threading.Condition()
        self._fault = _Fault()
        self._hold = 0.0  # seconds each request is held before it is forwarded
        self._listener: socket.socket | None = None
        self._stopping = False
        self._accept_thread: threading.Thread | None = None
        self._connections: set[_Connection] = set()
        self._exchanges: list[Exchange] = []
        self._counts = {name: 0 for name in ProxyStats.__dataclass_fields__ if name != "active"}

    def start(self) -> FaultProxy:
        """Listen and forward (once: a second call does nothing)."""
        with self._cond:
            if self._accept_thread is not None:
                return self
            self._listen(True)
            self._accept_thread = threading.Thread(
                target=self._accept_loop, name=f"fault-proxy-{self.port}", daemon=True
            )
            self._accept_thread.start()
        logger.info("fault proxy 127.0.0.1:%d -> %s:%d", self.port, *self.target)
        return self

    def stop(self) -> None:
        """Close the listener and every connection; join all threads (bounded). Idempotent."""
        with self._cond:
            accept_thread, already = self._accept_thread, self._stopping
            self._stopping = True
            self._listen(False)
            connections = list(self._connections)  # no connection is added once stopping
        if accept_thread is None or already:
            return
        for conn in connections:
            conn.interrupt()
        threads = [accept_thread, *(c.thread for c in connections)]
        for thread in threads:
            thread.join(_WAIT)
        if alive := [t.name for t in threads if t.is_alive()]:
            raise ProxyError(f"fault proxy threads did not stop within {_WAIT}s: {alive}")
        logger.info("fault proxy on port %d stopped: %s", self.port, self.stats)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def url(self) -> str:
        """Where a client reaches the proxy."""
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def mode(self) -> str:
        """The fault in force ("transparent" when none)."""
        return self._fault.mode

    @property
    def stats(self) -> ProxyStats:
        """The counters now."""
        with self._cond:
            return ProxyStats(active=len(self._connections), **self._counts)

    def log(self) -> list[Exchange]:
        """Every exchange so far, oldest first (noted only with ``record=True``)."""
        with self._cond:
            return list(self._exchanges)

    def fault(self, mode: str, *, delay: float = 30.0, after_bytes: int = 10) -> None:
        """Put a fault of :data:`MODES` in force until the next one or :meth:`heal`: ``refuse`` returns once
        every open connection is dropped, ``slow`` holds each response chunk ``delay`` seconds,
        ``reset_mid_response`` passes ``after_bytes`` bytes of each connection's next response."""
        if mode not in MODES:
            raise ValueError(f"fault mode must be one of {MODES}, got {mode!r}")
        if delay <= 0 or after_bytes < 0:
            raise ValueError(f"delay must be > 0 seconds and after_bytes >= 0, got {delay}, {after_bytes}")
        connections = self._set(_Fault(mode, {"slow": delay, "black_hole": None}.get(mode, 0.0), after_bytes))
        if mode == "refuse":
            for conn in connections:
                conn.interrupt()
            with self._cond:
                if not self._cond.wait_for(lambda: not self._connections or self._stopping, _WAIT):
                    raise ProxyError(f"connections still open {_WAIT}s after refusing")

    @contextlib.contextmanager
    def outage(self, mode: str = "refuse", *, delay: float = 30.0, after_bytes: int = 10) -> Iterator[None]:
        """``with proxy.outage("reset"):`` the fault holds inside the block and is healed on exit."""
        self.fault(mode, delay=delay, after_bytes=after_bytes)
        try:
            yield
        finally:
            self.heal()

    def hold(self, delay: float) -> None:
        """From now on every request reaches the server ``delay`` seconds after it reached the proxy, also
        after its client gave up on it. Independent of the response faults; :meth:`release` ends it."""
        if delay < 0:
            raise ValueError(f"delay must be >= 0 seconds, got {delay}")
        with self._cond:
            self._hold = delay

    def release(self) -> None:
        """New requests pass at once again (those held keep their time)."""
        self.hold(0.0)

    def heal(self) -> None:
        """Back to transparent forwarding (listening again on the same port after ``refuse``; no hold)."""
        self.release()
        self._set(_Fault())

    def _set(self, fault: _Fault) -> list[_Connection]:
        """Put ``fault`` in force (waking every wait on it); returns the connections open now."""
        with self._cond:
            if self._accept_thread is None or self._stopping:
                raise ProxyError("the fault proxy is not running; call start()")
            self._fault = dataclasses.replace(fault, generation=self._fault.generation + 1)
            self._listen(fault.mode != "refuse")
            logger.info("fault proxy on port %d: %s", self.port, fault.mode)
            return list(self._connections)

    def _listen(self, on: bool) -> None:
        """Open or close the listener (with the condition held)."""
        if on and self._listener is None:
            try:  # SO_REUSEADDR: the same port again after refusing
                self._listener = socket.create_server((LOOPBACK, self.port), backlog=128)
            except OSError as exc:
                raise ProxyError(f"cannot listen on {LOOPBACK}:{self.port}") from exc
            self.port = int(self._listener.getsockname()[1])
        elif not on and self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept thread
            self._listener.close()
            self._listener = None
        self._cond.notify_all()

    def _count(self, name: str, n: int = 1) -> None:
        with self._cond:
            self._counts[name] += n

    def _accept_loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._listener is not None or self._stopping)
                if self._stopping or self._listener is None:
                    return
                listener = self._listener
            try:
                client, _ = listener.accept()
            except OSError:
                continue  # the listener was closed
            self._count("accepted")
            try:
                upstream = socket.create_connection(self.target, timeout=_WAIT)
            except OSError as exc:
                logger.debug("fault proxy: target %s:%d unreachable: %s", *self.target, exc)
                _abort(client)
                continue
            with self._cond:
                if self._stopping or self._fault.mode == "refuse":  # too late: refuse() or stop() has begun
                    _abort(client)
                    upstream.close()
                    continue
                conn = _Connection(self, client, upstream)
                self._connections.add(conn)
            conn.thread.start()


class _Connection:
    """One proxied connection: its thread forwards the requests, a second one the responses."""

    def __init__(self, proxy: FaultProxy, client: socket.socket, upstream: socket.socket) -> None:
        self.proxy, self.client, self.upstream = proxy, client, upstream
        for sock in (client, upstream):
            sock.settimeout(None)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _SEND_TIMEOUT)
        self.ended: str | None = None  # "closed", "reset" or "dropped", by the side that ends it first
        self._client_open = True
        self._exchange: Exchange | None = None
        self._last_held = False  # the latest request was held
        self._generation, self._response_bytes = -1, 0  # bytes sent to the client under this fault
        self._requests = Framer(requests=True, keep=True)  # fed only with a meter
        metered = proxy.meter is not None
        self._responses = (
            Framer(requests=False, eventstream=proxy.eventstream, keep=metered)
            if metered or proxy.eventstream or proxy.record
            else None
        )
        self._tokens: deque[object] = deque()  # the meter's, one per request not yet answered
        name = f"fault-proxy-conn-{client.fileno()}"
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._responder = threading.Thread(
            target=self._pump, args=(self._from_upstream,), name=f"{name}-responses", daemon=True
        )

    def interrupt(self) -> None:
        """Wake both threads' reads (they end the connection when the fault or a stop says so)."""
        for sock in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RD)

    def _end(self, how: str) -> None:
        with self.proxy._cond:
            self.ended = self.ended or how
            self.proxy._cond.notify_all()
        self.interrupt()

    def _gone(self) -> bool:
        """The connection must go: the proxy stops or refuses, or the other side ended it."""
        proxy = self.proxy
        return proxy._stopping or proxy._fault.mode == "refuse" or self.ended is not None

    def _run(self) -> None:
        self._responder.start()
        self._pump(self._from_client)
        self._responder.join()
        if self.ended in ("reset", "dropped"):
            # The fault is on the client's path: the client sees the RST. The service behind closes normally,
            # as a real endpoint would see it; kinesis-local stops listening for good when one of its
            # connections is reset.
            _abort(self.client)
            self.proxy._count("resets" if self.ended == "reset" else "dropped")
        else:
            self.client.close()
        self.upstream.close()
        while self.proxy.meter is not None and self._tokens:
            self.proxy.meter.end(self._tokens.popleft(), None)
        with self.proxy._cond:
            self.proxy._connections.discard(self)
            self.proxy._cond.notify_all()

    def _pump(self, step: Callable[[], str | None]) -> None:
        """Run one direction until it, or the other, ends the connection."""
        how = None
        while how is None and self.ended is None:
            try:
                how = step()
            except OSError as exc:
                logger.debug("fault proxy %s: %s", threading.current_thread().name, exc)
                how = "dropped" if self._gone() else "closed"
        self._end(how or "closed")

    def _from_client(self) -> str | None:
        try:
            data = self.client.recv(_CHUNK)
        except OSError:
            data = b""  # a reset
        if self._gone():
            return "dropped"
        if not data:
            return self._client_gone()
        if self.proxy._fault.mode == "reset":
            return "reset"
        if self._exchange is None or self._exchange.answered is not None:  # a new request on this connection
            self._exchange = Exchange(time.monotonic())
            if self.proxy.record:
                with self.proxy._cond:
                    self.proxy._exchanges.append(self._exchange)
        exchange = self._exchange
        if self.proxy.record:
            exchange.request += data
        with self.proxy._cond:
            self._last_held = self.proxy._hold > 0
            due = exchange.arrived + self.proxy._hold
            self.proxy._cond.wait_for(lambda: self._gone() or time.monotonic() >= due, due - time.monotonic())
        if self._gone():
            return "dropped"
        meter = self.proxy.meter
        if meter is not None:
            self._requests.feed(data)
            for request in self._requests.messages():  # its last byte is in ``data``: not yet forwarded
                self._tokens.append(meter.begin(request))
        # Noted before the bytes go: once they are sent, the answer can reach the client (and a test reading
        # the log) before this thread runs again.
        exchange.forwarded = time.monotonic()
        self.proxy._count("bytes_to_target", len(data))
        self.upstream.sendall(data)
        return None

    def _client_gone(self) -> str:
        """The client closed or reset its side: the answer to a held request is still read (up to _WAIT), the
        whole of it when the responses are framed, else its first bytes."""
        self._client_open = False
        last, proxy, framed = self._exchange, self.proxy, self._responses is not None
        with proxy._cond:
            if last is not None and (self._last_held or proxy._hold > 0):
                proxy._cond.wait_for(
                    lambda: self._gone() or (last.completed if framed else last.answered) is not None, _WAIT
                )
        return "closed"

    def _from_upstream(self) -> str | None:
        data = self.upstream.recv(_CHUNK)
        fault = self.proxy._fault
        if self._gone():
            return "dropped"
        if not data:
            return "closed"
        if fault.mode == "reset":
            return "reset"
        if fault.generation != self._generation:
            self._generation, self._response_bytes = fault.generation, 0
        exchange, responses, proxy = self._exchange, self._responses, self.proxy
        with proxy._cond:  # the request side may be waiting for this answer
            if exchange is not None:
                exchange.answered = exchange.answered or time.monotonic()
                if proxy.record:
                    exchange.response += data
            if responses is not None:
                before = responses.completed
                data = responses.feed(data)
                if exchange is not None and responses.completed > before:
                    exchange.completed = time.monotonic()
            proxy._cond.notify_all()
        for response in responses.messages() if responses is not None else ():
            if proxy.meter is not None and self._tokens:
                proxy.meter.end(self._tokens.popleft(), response)
        if not self._client_open:
            return None
        if fault.delay != 0.0:
            with proxy._cond:
                proxy._cond.wait_for(
                    lambda: self._gone() or proxy._fault.generation != fault.generation, fault.delay
                )
            if self._gone():
                return "dropped"
        room = fault.after_bytes - self._response_bytes
        cut = fault.mode == "reset_mid_response" and len(data) >= room
        try:
            self.client.sendall(data[: max(room, 0)] if cut else data)
        except OSError:  # the client is gone; its next read (EOF or reset) decides what follows
            self._client_open = False
            return None
        sent = max(room, 0) if cut else len(data)
        self._response_bytes += sent
        proxy._count("bytes_to_client", sent)
        return "reset" if cut else None
