"""Every connection this broker opens to another broker: the controller's requests
(``wire_channel.py``), the replica fetcher (``fetcher.py``) and a controlled shutdown's request
to the controller (``controlled_shutdown.py``) are opened here and nowhere else.

A broker registers one endpoint per listener ("NAME://host:port", with its listener's security
protocol in ``listener_security_protocol_map``); brokers speak to each other on the listener
named by ``inter.broker.listener.name`` (Kafka's rule). :class:`BrokerConnector` picks that
endpoint of a registration and opens the connection to it. Today only PLAINTEXT exists, so a
connection is plain TCP; this is the one place that will wrap it in TLS or run SASL (issue 44),
so no caller knows which protocol it speaks.

Thread-safety: immutable; :meth:`connect` may be called from any thread, :meth:`open` from an
event loop.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from dataclasses import dataclass

from appliance.cluster.zk_paths import BrokerInfo
from appliance.config import PLAINTEXT, SERVED_PROTOCOLS, BrokerConfig
from appliance.security.tls import client_context, uses_tls

TLS_HANDSHAKE_TIMEOUT_S = 10.0

__all__ = ["BrokerConnector", "BrokerAddress", "NoEndpoint", "endpoint_of", "registered_endpoints"]


class NoEndpoint(ConnectionError):
    """The broker registered no endpoint this broker can use on the inter-broker listener. An
    OSError, so the callers' reconnect-and-retry paths take it as an unreachable broker (the
    registration may yet change)."""


@dataclass(frozen=True, slots=True)
class BrokerAddress:
    """Where to reach one broker on one listener."""

    broker_id: int
    listener: str
    host: str
    port: int
    security_protocol: str

    def __str__(self) -> str:
        return f"broker {self.broker_id} at {self.listener}://{self.host}:{self.port}"


def registered_endpoints(broker: BrokerInfo) -> list[BrokerAddress]:
    """Every endpoint ``broker`` registered, in its order, with its security protocol. A
    registration without endpoints (ZooKeeper's version 1 znode, or a test's) has one PLAINTEXT
    listener, its host and port. A malformed entry is skipped: another broker's registration is
    not ours to refuse."""
    if not broker.endpoints:
        return [BrokerAddress(broker.broker_id, PLAINTEXT, broker.host, broker.port, PLAINTEXT)]
    out = []
    for ep in broker.endpoints:
        name, sep, rest = ep.partition("://")
        host, colon, port = rest.rpartition(":")
        if not sep or not colon or not port.isdigit():
            continue
        name = name.upper()
        # Kafka's default map: a listener named after a protocol uses that protocol
        protocol = broker.security_protocol_map.get(name, name)
        out.append(BrokerAddress(broker.broker_id, name, host.strip("[]"), int(port), protocol))
    return out


def endpoint_of(broker: BrokerInfo, listener: str) -> BrokerAddress:
    """``broker``'s endpoint on ``listener``. Raises NoEndpoint."""
    for addr in registered_endpoints(broker):
        if addr.listener == listener:
            return addr
    names = ", ".join(e.listener for e in registered_endpoints(broker))
    raise NoEndpoint(f"broker {broker.broker_id} has no {listener} listener (it has {names}); "
                     f"check inter.broker.listener.name on every broker")


class BrokerConnector:
    """Opens connections to other brokers on the inter-broker listener ``listener``."""

    def __init__(self, listener: str = PLAINTEXT, tls: ssl.SSLContext | None = None) -> None:
        self.listener = listener.upper()
        self.tls = tls  # the client side of TLS, for a listener whose protocol uses it

    @classmethod
    def from_config(cls, config: BrokerConfig) -> BrokerConnector:
        """Raises TlsError when the inter-broker listener uses TLS and its settings cannot be
        loaded (the supervisor checked them at start-up)."""
        inter = config.inter_broker_listener
        tls = None
        if any(ep.listener == inter and uses_tls(ep.security_protocol) for ep in config.listener_endpoints):
            tls = client_context(config)
        return cls(inter, tls)

    def _tls_for(self, addr: BrokerAddress) -> ssl.SSLContext | None:
        if not uses_tls(addr.security_protocol):
            return None
        if self.tls is None:
            raise NoEndpoint(f"{addr} uses {addr.security_protocol}, but this broker's "
                             f"{self.listener} listener does not: no TLS settings to connect with")
        return self.tls

    def address(self, broker: BrokerInfo) -> BrokerAddress:
        """Where ``broker`` listens for other brokers. Raises NoEndpoint, also when its listener
        uses a protocol this build cannot speak yet."""
        addr = endpoint_of(broker, self.listener)
        if addr.security_protocol not in SERVED_PROTOCOLS:
            raise NoEndpoint(f"{addr} uses {addr.security_protocol}, which this broker cannot "
                             f"speak yet (PLAINTEXT and SSL)")
        return addr

    def connect(self, broker: BrokerInfo | BrokerAddress, timeout: float) -> socket.socket:
        """A blocking socket connected to ``broker`` (TCP_NODELAY: requests are small and each
        waits for its answer). Raises OSError (NoEndpoint included)."""
        addr = broker if isinstance(broker, BrokerAddress) else self.address(broker)
        tls = self._tls_for(addr)
        sock = socket.create_connection((addr.host, addr.port), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls is not None:
            try:
                sock = tls.wrap_socket(sock, server_hostname=addr.host)
            except BaseException:
                sock.close()
                raise
        return sock

    async def open(self, broker: BrokerInfo | BrokerAddress, rcvbuf: int = -1
                   ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """An asyncio stream pair to ``broker`` (TLS on a listener whose protocol uses it);
        ``rcvbuf`` > 0 sets SO_RCVBUF (the replica
        fetchers' replica.socket.receive.buffer.bytes; -1 keeps the OS default and its
        autotuning). Raises OSError (NoEndpoint included)."""
        addr = broker if isinstance(broker, BrokerAddress) else self.address(broker)
        tls = self._tls_for(addr)
        secure = {} if tls is None else {"ssl": tls, "server_hostname": addr.host,
                                         "ssl_handshake_timeout": TLS_HANDSHAKE_TIMEOUT_S}
        if rcvbuf <= 0:
            return await asyncio.open_connection(addr.host, addr.port, **secure)
        loop = asyncio.get_running_loop()
        failure: OSError = OSError(f"{addr}: no address to connect to")
        for family, kind, proto, _, sockaddr in await loop.getaddrinfo(
                addr.host, addr.port, type=socket.SOCK_STREAM):
            sock = socket.socket(family, kind, proto)
            try:
                # before connect: the TCP window scale is agreed in the handshake
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
                sock.setblocking(False)
                await loop.sock_connect(sock, sockaddr)
            except OSError as e:
                sock.close()
                failure = e
                continue
            return await asyncio.open_connection(sock=sock, **secure)
        raise failure
