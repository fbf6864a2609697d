"""The network fault tool: a TCP proxy on 127.0.0.1 in front of one local service, with faults switched on
and off while it runs (docs/emulators.md has what a client sees under each). On the response path ``refuse``
(a cut: listener closed, open connections reset), ``reset``, ``reset_mid_response``, ``slow`` (a delay per
response chunk) and ``black_hole``; on the request path :meth:`FaultProxy.hold` (requests reach the server
late, also after their client gave up). Made with ``eventstream=True`` it inserts the ``initial-response``
event kinesis-local omits (botocore requires it); with ``meter=`` it hands every complete request and response
to a :class:`Meter`; with ``record=True`` it notes every :class:`Exchange`.

One thread accepts; one thread per connection moves bytes both ways and is the only one that touches its
sockets (woken through a socket pair when the fault changes).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import select
import selectors
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from types import TracebackType
from typing import Final, Protocol

from tools.http_framing import Framer

__all__ = ["LOOPBACK", "Exchange", "FaultProxy", "Meter", "ProxyError", "ProxyStats"]

logger = logging.getLogger(__name__)

LOOPBACK: Final = "127.0.0.1"
_CHUNK: Final = 65536
_SEND_TIMEOUT: Final = 10.0
_WAIT: Final = 5.0  # the bound of every other wait: connect, a fault taking hold, a join, an abandoned answer


class ProxyError(RuntimeError):
    """The proxy could not start, listen again on its port, or apply a fault in time."""


@dataclass(frozen=True)
class ProxyStats:
    """Counters since start (a snapshot)."""

    accepted: int = 0  # connections accepted from clients
    active: int = 0  # connections open right now
    dropped: int = 0  # open connections closed by a ``refuse`` outage (with RST)
    resets: int = 0  # connections reset by ``reset`` or ``reset_mid_response``
    upstream_failures: int = 0  # accepted connections whose target could not be reached
    bytes_to_target: int = 0
    bytes_to_client: int = 0


@dataclass
class Exchange:
    """One request through the proxy and the response the server gave it (bytes as they passed)."""

    arrived: float  # its first bytes reached the proxy (time.monotonic)
    request: bytearray = field(default_factory=bytearray)
    forwarded: float | None = None  # its last bytes so far passed on to the server
    answered: float | None = None  # the first bytes of the response came back
    completed: float | None = None  # its last bytes came back (noted when the proxy frames responses)
    response: bytearray = field(default_factory=bytearray)


class Meter(Protocol):
    """Sees every complete HTTP message of a connection, in the connection's thread."""

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
    delay: float | None = 0.0  # None: until the fault changes
    after_bytes: int = 0
    generation: int = 0


def _abort(sock: socket.socket) -> None:
    """Close with a TCP RST instead of a FIN (SO_LINGER on, timeout 0)."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


class FaultProxy:
    """Forwards 127.0.0.1:``port`` to ``target`` (which must be on 127.0.0.1), with faults on demand."""

    def __init__(
        self,
        target: tuple[str, int],
        *,
        listen_port: int = 0,
        eventstream: bool = False,
        record: bool = False,
        meter: Meter | None = None,
    ) -> None:
        host, target_port = target
        if host not in (LOOPBACK, "localhost"):
            raise ProxyError(f"target {host}:{target_port} is not on {LOOPBACK}; the proxy is loopback-only")
        self.target: tuple[str, int] = (LOOPBACK, int(target_port))
        self.port: int = listen_port
        self.eventstream, self.record, self.meter = eventstream, record, meter
        self._cond = threading.Condition()
        self._fault = _Fault()
        self._hold = 0.0  # seconds each request is held before it is forwarded
        self._want_listening = True
        self._listener: socket.socket | None = None
        self._listen_error: BaseException | None = None
        self._stopping = False
        self._accept_thread: threading.Thread | None = None
        self._wake_r, self._wake_w = socket.socketpair()
        self._connections: dict[int, _Connection] = {}
        self._exchanges: list[Exchange] = []
        self._next_id = 0
        self._counts = {name: 0 for name in ProxyStats.__dataclass_fields__ if name != "active"}

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> FaultProxy:
        with self._cond:
            if self._accept_thread is not None:
                return self
            self._listener = self._bind()
            self.port = int(self._listener.getsockname()[1])
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
            self._cond.notify_all()
        threads: list[threading.Thread] = []
        if accept_thread is not None and not already:
            self._wake()
            accept_thread.join(_WAIT)
            with self._cond:  # no connection is accepted after the accept thread ends
                connections = list(self._connections.values())
            for conn in connections:
                conn.wake()
            threads = [accept_thread, *(c.thread for c in connections)]
            for thread in threads:
                thread.join(_WAIT)
            logger.info("fault proxy on port %d stopped: %s", self.port, self.stats)
        self._wake_r.close()
        self._wake_w.close()
        if alive := [t.name for t in threads if t.is_alive()]:
            raise ProxyError(f"fault proxy threads did not stop within {_WAIT}s: {alive}")

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def url(self, scheme: str = "http") -> str:
        """Where a client reaches the proxy."""
        return f"{scheme}://{LOOPBACK}:{self.port}"

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

    # -- faults ----------------------------------------------------------------------------------
    def refuse(self) -> None:
        """Outage: new connections are refused (listener closed), open ones dropped (RST). Returns when so."""
        self._set(_Fault("refuse"), listening=False)
        with self._cond:
            if not self._cond.wait_for(lambda: not self._connections or self._stopping, _WAIT):
                raise ProxyError(f"connections still open {_WAIT}s after refuse()")

    def reset(self) -> None:
        """Existing and new connections get a TCP RST as soon as either side sends anything."""
        self._set(_Fault("reset"), listening=True)

    def reset_mid_response(self, after_bytes: int = 10) -> None:
        """Forward requests; pass ``after_bytes`` bytes of each connection's next response, then RST."""
        if after_bytes < 0:
            raise ValueError(f"after_bytes must be >= 0, got {after_bytes}")
        self._set(_Fault("reset_mid_response", after_bytes=after_bytes), listening=True)

    def slow(self, delay: float) -> None:
        """Hold every response chunk ``delay`` seconds before forwarding it."""
        if delay <= 0:
            raise ValueError(f"delay must be > 0 seconds, got {delay}")
        self._set(_Fault("slow", delay=delay), listening=True)

    def black_hole(self) -> None:
        """Hold every response until the fault changes (the requests reach the server)."""
        self._set(_Fault("black_hole", delay=None), listening=True)

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
        self._set(_Fault(), listening=True)

    @contextlib.contextmanager
    def outage(self, mode: str = "refuse", *, delay: float = 30.0, after_bytes: int = 10) -> Iterator[None]:
        """``with proxy.outage("reset"):`` the fault holds inside the block and is healed on exit."""
        faults: dict[str, Callable[[], None]] = {
            "refuse": self.refuse,
            "reset": self.reset,
            "reset_mid_response": partial(self.reset_mid_response, after_bytes),
            "slow": partial(self.slow, delay),
            "black_hole": self.black_hole,
        }
        if mode not in faults:
            raise ValueError(f"outage mode must be one of {sorted(faults)}, got {mode!r}")
        faults[mode]()
        try:
            yield
        finally:
            self.heal()

    # -- internals -------------------------------------------------------------------------------
    def _set(self, fault: _Fault, *, listening: bool) -> None:
        with self._cond:
            if self._accept_thread is None or self._stopping:
                raise ProxyError("the fault proxy is not running; call start()")
            self._fault = dataclasses.replace(fault, generation=self._fault.generation + 1)
            self._want_listening = listening
            self._listen_error = None
            connections = list(self._connections.values())
        logger.info("fault proxy on port %d: %s", self.port, fault.mode)
        for conn in connections:
            conn.wake()
        self._wake()
        with self._cond:
            settled = self._cond.wait_for(
                lambda: (self._listener is not None) == listening or self._listen_error is not None,
                _WAIT,
            )
            if self._listen_error is not None:
                raise ProxyError(f"cannot listen on 127.0.0.1:{self.port} again") from self._listen_error
            if not settled:
                raise ProxyError(f"the listener did not {'open' if listening else 'close'} in time")

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def _bind(self) -> socket.socket:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((LOOPBACK, self.port))
            listener.listen(128)
        except OSError:
            listener.close()
            raise
        return listener

    def _count(self, name: str, n: int = 1) -> None:
        with self._cond:
            self._counts[name] += n

    def _new_exchange(self) -> Exchange:
        exchange = Exchange(time.monotonic())
        if self.record:
            with self._cond:
                self._exchanges.append(exchange)
        return exchange

    def _accept_loop(self) -> None:
        while True:
            with self._cond:
                if self._stopping:
                    break
                self._reconcile_listener()
                listener = self._listener
            ready = select.select([self._wake_r] if listener is None else [self._wake_r, listener], [], [])[0]
            if self._wake_r in ready:
                with contextlib.suppress(OSError):
                    self._wake_r.recv(4096)
            if listener is not None and listener in ready:
                self._accept(listener)
        with self._cond:
            if self._listener is not None:
                self._listener.close()
                self._listener = None
            self._cond.notify_all()

    def _reconcile_listener(self) -> None:
        """Open or close the listener as asked (called with the condition held, in the accept thread)."""
        if self._want_listening and self._listener is None and self._listen_error is None:
            try:
                self._listener = self._bind()
            except OSError as exc:
                self._listen_error = exc
        elif not self._want_listening and self._listener is not None:
            self._listener.close()
            self._listener = None
        self._cond.notify_all()

    def _accept(self, listener: socket.socket) -> None:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        self._count("accepted")
        try:
            upstream = socket.create_connection(self.target, timeout=_WAIT)
        except OSError as exc:
            logger.debug("fault proxy: target %s:%d unreachable: %s", *self.target, exc)
            self._count("upstream_failures")
            _abort(client)
            return
        with self._cond:
            self._next_id += 1
            conn = _Connection(self, self._next_id, client, upstream)
            self._connections[conn.ident] = conn
        conn.thread.start()

    def _forget(self, conn: _Connection) -> None:
        with self._cond:
            self._connections.pop(conn.ident, None)
            self._cond.notify_all()


class _Connection:
    """One proxied connection; only its own thread reads, writes or closes its sockets."""

    def __init__(self, proxy: FaultProxy, ident: int, client: socket.socket, upstream: socket.socket) -> None:
        self.proxy = proxy
        self.ident = ident
        self.client = client
        self.upstream = upstream
        for sock in (client, upstream):
            sock.settimeout(_SEND_TIMEOUT)  # bounds sendall; reads only follow select()
        self._wake_r, self._wake_w = socket.socketpair()
        self._fault_generation = -1
        self._response_bytes = 0  # bytes sent to the client under the current fault
        self._client_open = True
        self._linger_until = float("inf")
        self._held: deque[tuple[float, bytes, Exchange]] = deque()  # (when it may go on, bytes, its exchange)
        self._exchange: Exchange | None = None
        metered = proxy.meter is not None
        self._requests = Framer(requests=True, keep=metered) if metered else None
        self._responses = (
            Framer(requests=False, eventstream=proxy.eventstream, keep=metered)
            if metered or proxy.eventstream or proxy.record
            else None
        )
        self._tokens: deque[object] = deque()  # the meter's, one per request not yet answered
        self.thread = threading.Thread(target=self._run, name=f"fault-proxy-conn-{ident}", daemon=True)

    def wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def _fault(self) -> _Fault | None:
        """The fault in force, or None when the proxy is stopping or refusing (this connection must go)."""
        proxy = self.proxy
        with proxy._cond:
            fault, stopping = proxy._fault, proxy._stopping
        if fault.generation != self._fault_generation:
            self._fault_generation, self._response_bytes = fault.generation, 0
        return None if stopping or fault.mode == "refuse" else fault

    def _run(self) -> None:
        ended = "closed"
        try:
            ended = self._pump()
        except OSError as exc:
            logger.debug("fault proxy connection %d: %s", self.ident, exc)
        finally:
            if ended in ("reset", "dropped"):
                # The fault is on the client's path: the client sees the RST. The service behind closes
                # normally, as a real endpoint would see it; kinesis-local stops listening for good when
                # one of its connections is reset.
                _abort(self.client)
                self.proxy._count("resets" if ended == "reset" else "dropped")
            else:
                self.client.close()
            self.upstream.close()
            meter = self.proxy.meter
            while meter is not None and self._tokens:
                meter.end(self._tokens.popleft(), None)
            self._wake_r.close()
            self._wake_w.close()
            self.proxy._forget(self)

    def _pump(self) -> str:
        with selectors.DefaultSelector() as sel:
            for sock in (self.client, self.upstream, self._wake_r):
                sel.register(sock, selectors.EVENT_READ)
            while True:
                if self._fault() is None:
                    return "dropped"
                now = time.monotonic()
                while self._held and self._held[0][0] <= now:
                    _, data, exchange = self._held.popleft()
                    self._to_target(data, exchange)
                if not self._client_open and not self._held:  # the client gave up: keep the last answer
                    self._linger_until = min(self._linger_until, now + _WAIT)
                    last = self._exchange
                    if now > self._linger_until or last is None or self._answered(last):
                        return "closed"
                if self._held:
                    wait: float | None = max(0.0, self._held[0][0] - now)
                elif not self._client_open:
                    wait = max(0.0, self._linger_until - now)
                else:
                    wait = None
                for key, _ in sel.select(wait):
                    if key.fileobj is self._wake_r:
                        self._wake_r.recv(4096)
                        continue
                    from_client = key.fileobj is self.client
                    outcome = self._from_client(sel) if from_client else self._from_upstream()
                    if outcome != "open":
                        return outcome

    def _answered(self, exchange: Exchange) -> bool:
        """The whole answer is in when the responses are framed, else its first bytes."""
        return (exchange.completed if self._responses is not None else exchange.answered) is not None

    def _client_gone(self, sel: selectors.BaseSelector) -> str:
        """The client closed or reset its side: what it sent still goes on if held, then the answer is read."""
        with self.proxy._cond:
            holding = self.proxy._hold > 0
        if not self._held and not holding:
            return "closed"
        self._client_open = False
        with contextlib.suppress(KeyError, ValueError):  # already unregistered
            sel.unregister(self.client)
        return "open"

    def _from_client(self, sel: selectors.BaseSelector) -> str:
        try:
            data = self.client.recv(_CHUNK)
        except OSError:
            data = b""  # a reset: what the client sent is still delivered when held
        if not data:
            return self._client_gone(sel)
        fault = self._fault()
        if fault is None:
            return "dropped"
        if fault.mode == "reset":
            return "reset"
        if self._exchange is None or self._exchange.answered is not None:  # a new request on this connection
            self._exchange = self.proxy._new_exchange()
        exchange = self._exchange
        if self.proxy.record:
            exchange.request += data
        with self.proxy._cond:
            delay = self.proxy._hold
        if delay > 0 or self._held:
            self._held.append((exchange.arrived + delay, data, exchange))
        else:
            self._to_target(data, exchange)
        return "open"

    def _to_target(self, data: bytes, exchange: Exchange) -> None:
        if self._requests is not None and self.proxy.meter is not None:
            self._requests.feed(data)
            for request in self._requests.messages():  # its last byte is in ``data``: not yet forwarded
                self._tokens.append(self.proxy.meter.begin(request))
        self.upstream.sendall(data)
        exchange.forwarded = time.monotonic()
        self.proxy._count("bytes_to_target", len(data))

    def _from_upstream(self) -> str:
        data = self.upstream.recv(_CHUNK)
        if not data:
            return "closed"
        fault = self._fault()
        if fault is None:
            return "dropped"
        if fault.mode == "reset":
            return "reset"
        exchange = self._exchange
        if exchange is not None:
            exchange.answered = exchange.answered or time.monotonic()
            if self.proxy.record:
                exchange.response += data
        if self._responses is not None:
            before = self._responses.completed
            data = self._responses.feed(data)
            if exchange is not None and self._responses.completed > before:
                exchange.completed = time.monotonic()
            meter = self.proxy.meter
            for response in self._responses.messages():
                if meter is not None and self._tokens:
                    meter.end(self._tokens.popleft(), response)
        if not self._client_open:
            return "open"
        if fault.delay != 0.0 and not self._hold_response(fault):
            return "dropped"
        if fault.mode == "reset_mid_response":
            room = fault.after_bytes - self._response_bytes
            if len(data) >= room:
                self._send_to_client(data[: max(room, 0)])
                return "reset"
        try:
            self._send_to_client(data)
        except OSError:  # the client is gone; its next read (EOF or reset) decides what follows
            return "closed" if not self._held else "open"
        return "open"

    def _send_to_client(self, data: bytes) -> None:
        if data:
            self.client.sendall(data)
            self._response_bytes += len(data)
            self.proxy._count("bytes_to_client", len(data))

    def _hold_response(self, fault: _Fault) -> bool:
        """Wait ``fault.delay`` (for ever if None; cut short when the fault changes); False if the connection
        must go."""
        if self._wake_r in select.select([self._wake_r], [], [], fault.delay)[0]:
            self._wake_r.recv(4096)
        return self._fault() is not None
