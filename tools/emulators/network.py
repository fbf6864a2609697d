"""Ports and sockets: free loopback ports, who listens where (Linux /proc), an HTTP probe without proxies."""

from __future__ import annotations

import http.client
import ipaddress
import socket
import struct
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Final

from tools.emulators.settings import LOOPBACK

# ------------------------------------------------------------------------------------------ ports, sockets


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1 (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def _decode_proc_address(hex_addr: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    raw = bytes.fromhex(hex_addr)
    # /proc/net/tcp{,6} print addresses as 32-bit words in host byte order.
    words = struct.unpack(f"={len(raw) // 4}I", raw)
    packed = struct.pack(f">{len(words)}I", *words)
    return ipaddress.ip_address(packed)


def listening_addresses(port: int) -> list[str] | None:
    """Local addresses with a TCP socket listening on ``port`` (Linux ``/proc``); None where unavailable."""
    found: list[str] = []
    readable = False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        readable = True
        for line in lines:
            fields = line.split()
            if len(fields) < 4 or fields[3] != "0A":  # 0A = LISTEN
                continue
            addr_hex, port_hex = fields[1].split(":")
            if int(port_hex, 16) == port:
                found.append(str(_decode_proc_address(addr_hex)))
    return found if readable else None


def is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped.is_loopback
    return ip.is_loopback


_NO_PROXY_OPENER: Final = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def http_ok(url: str, timeout: float = 1.0) -> bool:
    try:
        with _NO_PROXY_OPENER.open(url, timeout=timeout) as response:
            return bool(200 <= response.status < 300)
    except (OSError, http.client.HTTPException):  # URLError/HTTPError are OSErrors
        return False
