"""Raw-socket helpers for tests that talk to the broker below the client libraries."""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

import appliance.protocol as proto

__all__ = ["RawConnection", "request_frame", "read_frame", "produce_body", "fetch_body", "metadata_body"]

_SIZE = struct.Struct(">i")


def request_frame(api_key: int, version: int, body: Any, correlation_id: int = 7,
                  client_id: str | None = "raw-test") -> bytes:
    """A whole request frame built by our protocol module (for tests to corrupt)."""
    return proto.encode_request_frame(api_key, version, correlation_id, client_id, body)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionResetError(f"peer closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def read_frame(sock: socket.socket) -> bytes:
    """One response frame's payload (correlation id first). Raises ConnectionResetError on EOF."""
    (size,) = _SIZE.unpack(_recv_exact(sock, 4))
    return _recv_exact(sock, size)


class RawConnection:
    """A plain socket to the broker plus a protocol ClientConnection to decode answers."""

    def __init__(self, port: int, timeout: float = 10.0, host: str = "127.0.0.1") -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.conn = proto.ClientConnection("raw-test")

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def request(self, api_key: int, version: int, body: Any) -> Any:
        """Send a well-formed request and return the decoded response body."""
        _, frame = self.conn.send_request(api_key, version, body)
        self.sock.sendall(frame)
        if not self.conn.in_flight:
            return None
        while True:
            event = self.conn.next_event()
            if isinstance(event, proto.Response):
                return event.body
            if event is proto.PEER_CLOSED:
                raise ConnectionResetError("broker closed the connection")
            data = self.sock.recv(1 << 20)
            self.conn.receive_data(data)

    def closed_by_peer(self, timeout: float = 5.0) -> bool:
        """True if the broker closes the connection (EOF or reset) within ``timeout`` without
        sending anything more."""
        self.sock.settimeout(0.2)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                try:
                    data = self.sock.recv(65536)
                except TimeoutError:
                    continue
                if not data:
                    return True
                return False
        except ConnectionResetError:
            return True
        return False

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def produce_body(topic: str, partition: int, records: bytes | None, acks: int = 1,
                 timeout_ms: int = 10000) -> dict:
    """A Produce request body with one partition's record bytes."""
    return {"transactional_id": None, "acks": acks, "timeout_ms": timeout_ms,
            "topic_data": [{"name": topic, "partition_data": [{"index": partition,
                                                                "records": records}]}]}


def fetch_body(topic: str, partition: int, offset: int, max_wait_ms: int = 0,
               min_bytes: int = 1, max_bytes: int = 1 << 20) -> dict:
    """A Fetch request body for one partition (sessionless)."""
    return {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes,
            "max_bytes": max_bytes, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [
                {"partition": partition, "fetch_offset": offset, "log_start_offset": -1,
                 "partition_max_bytes": max_bytes}]}],
            "forgotten_topics_data": [], "rack_id": ""}


def metadata_body(topics: list[str] | None = None) -> dict:
    return {"topics": None if topics is None else [{"name": t} for t in topics],
            "allow_auto_topic_creation": False}
