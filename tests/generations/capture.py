"""A loopback TCP proxy that records the (api_key, api_version) of every request a client sends.

Test scaffolding: the broker advertises the proxy's address (``advertised.listeners``), so every
connection a client opens — bootstrap, partition leader, group coordinator — goes through it and
its request headers are read off the wire as the client wrote them. Bytes pass unchanged.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections import defaultdict

__all__ = ["CaptureProxy"]

_HEAD = struct.Struct(">ihhi")  # frame size, api_key, api_version, correlation_id


class CaptureProxy:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self._lock = threading.Lock()
        self._client_id = ""
        self.seen: dict[str, set[tuple[int, int]]] = defaultdict(set)  # client id -> (key, version)
        self._stop = False
        self._conns: list[socket.socket] = []
        self._accepter = threading.Thread(target=self._accept, daemon=True)
        self._accepter.start()

    def versions(self, client_prefix: str) -> dict[int, set[int]]:
        """api_key -> the versions requested by connections whose client id starts with the
        prefix."""
        out: dict[int, set[int]] = defaultdict(set)
        with self._lock:
            for cid, pairs in self.seen.items():
                if cid.startswith(client_prefix):
                    for k, v in pairs:
                        out[k].add(v)
        return dict(out)

    def _accept(self) -> None:
        self.sock.settimeout(0.2)
        while not self._stop:
            try:
                client, _ = self.sock.accept()
            except OSError:
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._conns += [client, upstream]
            threading.Thread(target=self._requests, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    def _requests(self, src: socket.socket, dst: socket.socket) -> None:
        buf = bytearray()
        try:
            while True:
                data = src.recv(1 << 16)
                if not data:
                    break
                buf += data
                while len(buf) >= _HEAD.size:
                    size, key, version, _ = _HEAD.unpack_from(buf, 0)
                    if len(buf) < 4 + size:
                        break
                    (n,) = struct.unpack_from(">h", buf, _HEAD.size)
                    cid = bytes(buf[_HEAD.size + 2:_HEAD.size + 2 + max(n, 0)]).decode(errors="replace")
                    with self._lock:
                        self.seen[cid].add((key, version))
                    del buf[:4 + size]
                dst.sendall(data)
        except OSError:
            pass
        finally:
            self._shut(src, dst)

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(1 << 16):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            self._shut(src, dst)

    @staticmethod
    def _shut(*socks: socket.socket) -> None:
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        self._stop = True
        self.sock.close()
        self._accepter.join(timeout=5)
        with self._lock:
            for s in self._conns:
                try:
                    s.close()
                except OSError:
                    pass
