"""The Prometheus endpoint: a minimal HTTP/1.1 GET server on the network worker's event loop.

Only GET of the configured path is served (the text exposition format, one response per
connection); anything else gets 404/405, a malformed or oversized request 400. The collector
runs on the loop: a scrape costs a few milliseconds of that worker's time (it reads the shared
counters and stats the partition directories), which is why only network worker 0 serves it.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable

from prometheus_client import CONTENT_TYPE_LATEST

from appliance.metrics.listener import MetricsListener

__all__ = ["bind_endpoint", "serve_endpoint"]

log = logging.getLogger("appliance.metrics")

MAX_HEAD = 16384  # bytes of request line and headers; scrapers send a few hundred
READ_TIMEOUT_S = 10.0


def bind_endpoint(listener: MetricsListener) -> socket.socket:
    """The listening socket. Raises OSError (port taken, address not ours)."""
    family = socket.AF_INET6 if ":" in listener.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((listener.host, listener.port))
        sock.listen(64)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


async def serve_endpoint(sock: socket.socket, path: str,
                         render: Callable[[], Awaitable[bytes]]) -> asyncio.Server:
    """Serve ``await render()`` at ``path`` on ``sock`` (from :func:`bind_endpoint`)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_S)
            status, body, ctype = _answer(head, path)
            if status.startswith("200"):
                body = await render() if head.startswith(b"GET") else b""
        except (asyncio.LimitOverrunError, asyncio.IncompleteReadError, TimeoutError,
                ConnectionError):
            status, body, ctype = "400 Bad Request", b"bad request\n", "text/plain"
        except Exception:
            log.exception("metrics collection failed")
            status, body, ctype = "500 Internal Server Error", b"collection failed\n", "text/plain"
        try:
            writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}"
                         f"\r\nConnection: close\r\n\r\n".encode() + body)
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, sock=sock, limit=MAX_HEAD)


def _answer(head: bytes, path: str) -> tuple[str, bytes, str]:
    """(status, body, content type); the body of a 200 is left to the caller."""
    parts = head.split(b"\r\n", 1)[0].split()
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
        return "400 Bad Request", b"bad request\n", "text/plain"
    method, target = parts[0], parts[1].split(b"?", 1)[0].decode("latin-1")
    if target != path:
        return "404 Not Found", f"metrics are at {path}\n".encode(), "text/plain"
    if method not in (b"GET", b"HEAD"):
        return "405 Method Not Allowed", b"GET only\n", "text/plain"
    return "200 OK", b"", CONTENT_TYPE_LATEST
