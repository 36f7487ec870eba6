"""A blocking connection to one broker, over the sans-I/O protocol module.

Negotiates versions from the broker's ApiVersions answer (the highest version both sides speak,
as aiokafka's Request.prepare does) and sends requests one at a time. Used by the CLI tools.
Not thread-safe: one connection per thread.
"""

from __future__ import annotations

import socket
import ssl
import time
from typing import Any

import appliance.protocol as proto
from appliance.client.security import Security, secure
from appliance.errors import ErrorCode, KafkaError, UnsupportedVersionError

__all__ = ["BrokerConnection", "ConnectionFailed", "KafkaConnectionError", "connect_first", "parse_bootstrap"]


class KafkaConnectionError(KafkaError):
    """The broker at the named address could not be reached, timed out or closed the connection."""

    code = ErrorCode.NETWORK_EXCEPTION


ConnectionFailed = KafkaConnectionError  # the name the CLI tools use


def parse_bootstrap(servers: str) -> list[tuple[str, int]]:
    """'host:port[,host:port]' -> [(host, port)]. Raises ValueError naming the bad entry."""
    out = []
    for item in servers.split(","):
        item = item.strip()
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"bootstrap server {item!r}: expected host:port")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError("no bootstrap servers given")
    return out


# APIs whose newer versions change the body this client's code builds (topics by id, batched
# coordinator keys, several groups): it asks for the last version of the shape it writes
CLIENT_MAX_VERSIONS = {
    1: 12,   # Fetch: v13+ name topics by id
    9: 7,    # OffsetFetch: v8+ take a list of groups
    10: 3,   # FindCoordinator: v4+ take a list of keys
    20: 5,   # DeleteTopics: v6+ take (name, id) pairs
}


class BrokerConnection:
    def __init__(self, host: str, port: int, timeout: float = 10.0, client_id: str = "appliance-cli",
                 security: Security | None = None) -> None:
        """``security``: TLS and/or a SASL login (client/security.py). Raises ConnectionFailed
        naming the address (a refused or failed TLS handshake or login included)."""
        self.address = f"{host}:{port}"
        self.timeout = timeout
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while True:  # a broker that is just starting refuses briefly: retry until the deadline
            try:
                self.sock = socket.create_connection((host, port), timeout=max(deadline - time.monotonic(), 0.1))
                break
            except OSError as e:
                last = e
                if time.monotonic() >= deadline:
                    raise ConnectionFailed(f"cannot connect to {self.address} within {timeout:g} s: "
                                           f"{getattr(last, 'strerror', None) or last}") from e
                time.sleep(0.1)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.settimeout(timeout)
        if security is not None:
            try:
                self.sock = secure(self.sock, security, host, port, max(deadline - time.monotonic(), 0.1))
            except OSError as e:  # ssl.SSLError and SaslLoginFailed included
                self.sock.close()
                what = "TLS handshake" if isinstance(e, ssl.SSLError) else "connection"
                raise ConnectionFailed(f"{what} with {self.address} failed: "
                                       f"{getattr(e, 'reason', None) or e}") from e
            self.sock.settimeout(timeout)
        self.conn = proto.ClientConnection(client_id)
        self.versions: dict[int, tuple[int, int]] = {}
        resp = self.request(18, {}, version=2)  # ApiVersions
        for entry in resp.api_keys:
            self.versions[entry.api_key] = (entry.min_version, entry.max_version)

    def version_for(self, api_key: int) -> int:
        """The highest version of ``api_key`` both sides speak, at most what this client's
        request builders are written for. Raises UnsupportedVersionError."""
        ours = proto.SUPPORTED_VERSIONS.get(api_key)
        if ours is not None and api_key in CLIENT_MAX_VERSIONS:
            ours = (ours[0], min(ours[1], CLIENT_MAX_VERSIONS[api_key]))
        theirs = self.versions.get(api_key)
        if ours is None or theirs is None or max(ours[0], theirs[0]) > min(ours[1], theirs[1]):
            raise UnsupportedVersionError(f"broker {self.address} and this client share no version "
                                          f"of API {api_key}")
        return min(ours[1], theirs[1])

    def request(self, api_key: int, body: Any, version: int | None = None) -> Any:
        """Send one request and wait for its response body. Raises ConnectionFailed on I/O errors
        or timeouts (naming the address), protocol errors as they come."""
        if version is None:
            version = self.version_for(api_key)
        _, frame = self.conn.send_request(api_key, version, body)
        try:
            self.sock.sendall(frame)
            expect = self.conn.in_flight
            if not expect:
                return None
            while True:
                event = self.conn.next_event()
                if isinstance(event, proto.Response):
                    return event.body
                if event is proto.PEER_CLOSED:
                    raise ConnectionFailed(f"broker {self.address} closed the connection")
                data = self.sock.recv(1 << 20)
                self.conn.receive_data(data)
        except TimeoutError as e:
            raise ConnectionFailed(f"no answer from {self.address} within {self.timeout:g} s") from e
        except OSError as e:
            raise ConnectionFailed(f"connection to {self.address} failed: {e.strerror or e}") from e

    def set_timeout(self, seconds: float) -> None:
        """How long :meth:`request` waits for an answer from now on."""
        self.timeout = seconds
        self.sock.settimeout(seconds)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> BrokerConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect_first(servers: list[tuple[str, int]], timeout: float, client_id: str) -> BrokerConnection:
    """A connection to the first of ``servers`` that answers, in order; ConnectionFailed naming
    every one's failure when none does."""
    errors = []
    for host, port in servers:
        try:
            return BrokerConnection(host, port, timeout=timeout, client_id=client_id)
        except ConnectionFailed as e:
            errors.append(str(e))
    raise ConnectionFailed("; ".join(errors))
