"""TLS for the clients' blocking sockets, safe for one reading thread and one writing thread at
once (the pipelined connection's reader thread and its senders).

An ``ssl.SSLSocket`` may not be read and written from two threads at the same time (OpenSSL's
SSL object is not thread-safe, and TLS 1.3 reads can produce bytes to write: tickets, key
updates). So the TLS state lives in an ``SSLObject`` over memory BIOs, touched only under a lock,
and the raw socket is read and written outside it: the reader decrypts what it received, a
sender encrypts and sends, and bytes a read produced go out under the send lock.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time

__all__ = ["TlsSocket", "client_tls_context"]

_READ = 1 << 16


def client_tls_context(cafile: str | None = None, certfile: str | None = None, keyfile: str | None = None,
                       password: str | None = None, check_hostname: bool = True) -> ssl.SSLContext:
    """A client context: the broker's certificate checked against ``cafile`` (else the system's
    CAs), its host name too unless ``check_hostname`` is False; ``certfile``/``keyfile`` offered
    for mutual TLS. Raises OSError / ssl.SSLError for unreadable or mismatched files."""
    ctx = ssl.create_default_context(cafile=cafile)
    ctx.check_hostname = check_hostname
    if certfile:
        ctx.load_cert_chain(certfile, keyfile, password=password)
    return ctx


class TlsSocket:
    """A connected TCP socket with TLS on it; the methods the clients use of a socket."""

    def __init__(self, sock: socket.socket, context: ssl.SSLContext, server_hostname: str,
                 timeout: float | None) -> None:
        self.sock = sock
        self._in, self._out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._in, self._out, server_hostname=server_hostname)
        self._lock = threading.Lock()  # the SSLObject and its BIOs
        self._send_lock = threading.Lock()  # the raw socket's writes, in order
        self._plain = bytearray()  # decrypted, not yet returned by recv
        self._handshake(timeout)

    def _handshake(self, timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                self._tls.do_handshake()
                self._flush()
                return
            except ssl.SSLWantReadError:
                self._flush()
                if deadline is not None:
                    self.sock.settimeout(max(deadline - time.monotonic(), 0.001))
                data = self.sock.recv(_READ)
                if not data:
                    raise ConnectionResetError("the broker closed the connection during the TLS handshake") from None
                self._in.write(data)

    def _flush(self) -> None:
        """Send what the TLS state has written (call with the send lock free or held by us)."""
        out = self._out.read()
        if out:
            self.sock.sendall(out)

    # -- the socket methods the clients use ------------------------------------------------
    def sendall(self, data: bytes | bytearray | memoryview) -> None:
        with self._send_lock:
            with self._lock:
                self._tls.write(data)
                out = self._out.read()
            self.sock.sendall(out)

    def recv(self, n: int) -> bytes:
        while not self._plain:
            data = self.sock.recv(_READ)
            with self._lock:
                if not data:
                    self._in.write_eof()
                else:
                    self._in.write(data)
                try:
                    while True:
                        chunk = self._tls.read(_READ)
                        if not chunk:
                            break
                        self._plain += chunk
                except ssl.SSLWantReadError:
                    pass
                except ssl.SSLZeroReturnError:
                    data = b""
                out = self._out.read()  # a ticket or key update may need an answer
            if out:
                with self._send_lock:
                    self.sock.sendall(out)
            if not data and not self._plain:
                return b""
        chunk = bytes(self._plain[:n])
        del self._plain[:n]
        return chunk

    def settimeout(self, value: float | None) -> None:
        self.sock.settimeout(value)

    def setsockopt(self, *args: object) -> None:
        self.sock.setsockopt(*args)  # type: ignore[arg-type]

    def fileno(self) -> int:
        return self.sock.fileno()

    def shutdown(self, how: int) -> None:
        self.sock.shutdown(how)

    def close(self) -> None:
        self.sock.close()
