"""How a client connection is secured: TLS (``client/tls_socket.py``) and/or a SASL login
(``security/sasl_client.py``), from the client keys ``security.protocol``, ``ssl.*`` and
``sasl.*`` (librdkafka's names; ``sasl.jaas.config`` as the Java clients write it)."""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass
from typing import Any

from appliance.client.tls_socket import TlsSocket
from appliance.protocol.connection import ClientConnection, Response
from appliance.security.sasl_client import SaslLoginFailed, exchange

__all__ = ["Security", "secure", "login"]


@dataclass(frozen=True)
class Security:
    tls: ssl.SSLContext | None = None
    sasl: tuple[str, str, str] | None = None  # (mechanism, username, password)


def login(sock: Any, mechanism: str, username: str, password: str, address: str) -> None:
    """SaslHandshake and SaslAuthenticate on a connected socket. Raises SaslLoginFailed."""
    steps = exchange(mechanism, username, password)
    conn = ClientConnection("sasl-login")
    answer = None
    try:
        while True:
            api_key, version, body = steps.send(answer)
            _, frame = conn.send_request(api_key, version, body)
            sock.sendall(frame)
            while not isinstance(event := conn.next_event(), Response):
                data = sock.recv(65536)
                if not data:
                    raise SaslLoginFailed(f"{address} closed the connection during the SASL login")
                conn.receive_data(data)
            answer = event.body
    except StopIteration:
        return


def secure(sock: socket.socket, security: Security | None, host: str, port: int, timeout: float) -> Any:
    """``sock`` with TLS on it and/or logged in with SASL, as ``security`` says (None: as is).
    Raises OSError (ssl.SSLError, SaslLoginFailed included)."""
    if security is None:
        return sock
    out: Any = sock
    if security.tls is not None:
        out = TlsSocket(sock, security.tls, host, timeout)
    if security.sasl is not None:
        login(out, *security.sasl, address=f"{host}:{port}")
    return out
