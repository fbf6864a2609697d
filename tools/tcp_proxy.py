"""A loopback-only TCP proxy that injects network faults, for tests against the local emulators.

Put it between one client and one emulator and point the client at :meth:`FaultProxy.url`::

    with FaultProxy(("127.0.0.1", moto_port)) as proxy:
        dynamodb = boto3.client("dynamodb", endpoint_url=proxy.url(), ...)
        with proxy.outage("refuse"):     # EndpointConnectionError until the block ends
            ...
        proxy.slow(5.0)                  # every response chunk 5 s late: ReadTimeoutError
        proxy.heal()                     # transparent again; the same client works

Faults (each replaces the previous one; :meth:`heal` ends any):

* ``refuse``: the listening socket is closed, so new connections get ECONNREFUSED, and existing connections
  are dropped with a TCP RST. :meth:`heal` listens again on the same port.
* ``reset``: existing and new connections are reset (RST) as soon as either side sends anything.
* ``reset_mid_response``: requests are forwarded; ``after_bytes`` bytes of each connection's next response
  pass, then the connection is reset.
* ``slow``: every response chunk is held ``delay`` seconds before it is forwarded (to exceed a read timeout).

One thread accepts; one thread per connection moves bytes both ways and is the only one that touches its
sockets (it is woken through a socket pair when the fault changes). :meth:`stop` closes everything and joins
every thread with a bounded wait. Only 127.0.0.1 is ever bound or connected to.
"""

from __future__ import annotations

import contextlib
import logging
import select
import selectors
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Final

__all__ = ["MODES", "FaultProxy", "ProxyError", "ProxyStats"]

logger = logging.getLogger(__name__)

LOOPBACK: Final = "127.0.0.1"
MODES: Final = ("transparent", "refuse", "reset", "reset_mid_response", "slow")
_CHUNK: Final = 65536
_SEND_TIMEOUT: Final = 10.0
_CONNECT_TIMEOUT: Final = 5.0
_STATE_TIMEOUT: Final = 5.0
_JOIN_TIMEOUT: Final = 5.0


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


@dataclass(frozen=True)
class _Fault:
    mode: str = "transparent"
    delay: float = 0.0
    after_bytes: int = 0
    generation: int = 0


def _abort(sock: socket.socket) -> None:
    """Close with a TCP RST instead of a FIN (SO_LINGER on, timeout 0)."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


class FaultProxy:
    """Forwards 127.0.0.1:``port`` to ``target`` (which must be on 127.0.0.1), with faults on demand."""

    def __init__(self, target: tuple[str, int], *, listen_port: int = 0) -> None:
        host, target_port = target
        if host not in (LOOPBACK, "localhost"):
            raise ProxyError(f"target {host}:{target_port} is not on {LOOPBACK}; the proxy is loopback-only")
        self.target: tuple[str, int] = (LOOPBACK, int(target_port))
        self.port: int = listen_port
        self._cond = threading.Condition()
        self._fault = _Fault()
        self._want_listening = True
        self._listener: socket.socket | None = None
        self._listen_error: BaseException | None = None
        self._stopping = False
        self._accept_thread: threading.Thread | None = None
        self._wake_r, self._wake_w = socket.socketpair()
        self._connections: dict[int, _Connection] = {}
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
        if accept_thread is None or already:
            self._wake_r.close()
            self._wake_w.close()
            return
        self._wake()
        accept_thread.join(_JOIN_TIMEOUT)
        with self._cond:  # no connection is accepted after the accept thread ends
            connections = list(self._connections.values())
        for conn in connections:
            conn.wake()
        for conn in connections:
            conn.thread.join(_JOIN_TIMEOUT)
        alive = [t.name for t in (accept_thread, *(c.thread for c in connections)) if t.is_alive()]
        self._wake_r.close()
        self._wake_w.close()
        if alive:
            raise ProxyError(f"fault proxy threads did not stop within {_JOIN_TIMEOUT}s: {alive}")
        logger.info("fault proxy on port %d stopped: %s", self.port, self.stats)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def url(self, scheme: str = "http") -> str:
        return f"{scheme}://{LOOPBACK}:{self.port}"

    @property
    def mode(self) -> str:
        return self._fault.mode

    @property
    def stats(self) -> ProxyStats:
        with self._cond:
            return ProxyStats(active=len(self._connections), **self._counts)

    # -- faults ----------------------------------------------------------------------------------
    def refuse(self) -> None:
        """Outage: new connections are refused (listener closed), open ones dropped (RST). Returns when so."""
        self._set(_Fault("refuse"), listening=False)
        with self._cond:
            if not self._cond.wait_for(lambda: not self._connections or self._stopping, _STATE_TIMEOUT):
                raise ProxyError(f"connections still open {_STATE_TIMEOUT}s after refuse()")

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

    def heal(self) -> None:
        """Back to transparent forwarding (listening again on the same port after ``refuse``)."""
        self._set(_Fault(), listening=True)

    @contextlib.contextmanager
    def outage(self, mode: str = "refuse", *, delay: float = 30.0, after_bytes: int = 10) -> Iterator[None]:
        """``with proxy.outage("reset"):`` the fault holds inside the block and is healed on exit."""
        faults: dict[str, Callable[[], None]] = {
            "refuse": self.refuse,
            "reset": self.reset,
            "reset_mid_response": lambda: self.reset_mid_response(after_bytes),
            "slow": lambda: self.slow(delay),
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
            self._fault = _Fault(fault.mode, fault.delay, fault.after_bytes, self._fault.generation + 1)
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
                _STATE_TIMEOUT,
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

    def _accept_loop(self) -> None:
        with selectors.DefaultSelector() as sel:
            sel.register(self._wake_r, selectors.EVENT_READ)
            registered: socket.socket | None = None
            while True:
                with self._cond:
                    if self._stopping:
                        break
                    self._reconcile_listener()
                    listener = self._listener
                if listener is not registered:
                    if registered is not None:
                        sel.unregister(registered)
                    if listener is not None:
                        sel.register(listener, selectors.EVENT_READ)
                    registered = listener
                for key, _ in sel.select():
                    if key.fileobj is self._wake_r:
                        with contextlib.suppress(OSError):
                            self._wake_r.recv(4096)
                    elif key.fileobj is listener and listener is not None:
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
            upstream = socket.create_connection(self.target, timeout=_CONNECT_TIMEOUT)
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
                self.upstream.close()
                self.proxy._count("resets" if ended == "reset" else "dropped")
            else:
                self.client.close()
                self.upstream.close()
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
                for key, _ in sel.select():
                    if key.fileobj is self._wake_r:
                        self._wake_r.recv(4096)
                        continue
                    outcome = self._forward(key.fileobj is self.client)
                    if outcome != "open":
                        return outcome

    def _forward(self, from_client: bool) -> str:
        source, sink = (self.client, self.upstream) if from_client else (self.upstream, self.client)
        data = source.recv(_CHUNK)
        if not data:
            return "closed"
        fault = self._fault()
        if fault is None:
            return "dropped"
        if fault.mode == "reset":
            return "reset"
        if from_client:
            sink.sendall(data)
            self.proxy._count("bytes_to_target", len(data))
            return "open"
        if fault.mode == "slow" and not self._hold(fault):
            return "dropped"
        if fault.mode == "reset_mid_response":
            room = fault.after_bytes - self._response_bytes
            if len(data) >= room:
                self._send_to_client(data[: max(room, 0)])
                return "reset"
        self._send_to_client(data)
        return "open"

    def _send_to_client(self, data: bytes) -> None:
        if data:
            self.client.sendall(data)
            self._response_bytes += len(data)
            self.proxy._count("bytes_to_client", len(data))

    def _hold(self, fault: _Fault) -> bool:
        """Wait ``fault.delay`` (cut short when the fault changes); False if the connection must go."""
        if self._wake_r in select.select([self._wake_r], [], [], fault.delay)[0]:
            self._wake_r.recv(4096)
        return self._fault() is not None
