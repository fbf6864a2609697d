"""A tiny HTTP/1.1 server on 127.0.0.1 for testing the network tools (fault proxy, request-holding relay):
keep-alive connections as boto3's pooled ones, a body chosen per path, and the time each request arrived."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["TinyHttpServer", "tiny_http_server"]


class TinyHttpServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, body: Callable[[str], bytes]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.body = body
        self.arrivals: list[tuple[float, str]] = []  # (monotonic time a request arrived, its path)

    @property
    def port(self) -> int:
        return int(self.server_address[1])


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as boto3's pooled connections use
    server: TinyHttpServer

    def do_GET(self) -> None:
        self.server.arrivals.append((time.monotonic(), self.path))
        body = self.server.body(self.path)
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


@contextmanager
def tiny_http_server(body: Callable[[str], bytes]) -> Iterator[TinyHttpServer]:
    server = TinyHttpServer(body)
    thread = threading.Thread(target=server.serve_forever, name="tiny-http", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
