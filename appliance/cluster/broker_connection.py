"""Every connection this broker opens to another broker: the controller's requests
(``wire_channel.py``), the replica fetcher (``fetcher.py``) and a controlled shutdown's request
to the controller (``controlled_shutdown.py``) are opened here and nowhere else.

A broker registers one endpoint per listener ("NAME://host:port", with its listener's security
protocol in ``listener_security_protocol_map``); brokers speak to each other on the listener
named by ``inter.broker.listener.name`` (Kafka's rule). :class:`BrokerConnector` picks that
endpoint of a registration and opens the connection to it: plain TCP, TLS with the client
context of ``security/tls.py`` (the other broker's certificate checked against the trust store,
its host name too with ``ssl.endpoint.identification.algorithm=https``), and on a SASL_* listener
the login with ``sasl.mechanism.inter.broker.protocol`` (``client/security.py`` blocking,
:meth:`BrokerConnector._login` on an event loop). No caller knows which protocol it speaks.

Thread-safety: immutable; :meth:`connect` may be called from any thread, :meth:`open` from an
event loop.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from dataclasses import dataclass

from appliance.client.security import login
from appliance.cluster.zk_paths import BrokerInfo
from appliance.config import PLAINTEXT, SERVED_PROTOCOLS, BrokerConfig
from appliance.protocol.connection import ClientConnection, Response
from appliance.security.sasl import uses_sasl
from appliance.security.sasl_client import SaslLoginFailed, exchange, login_of
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

    def __init__(self, listener: str = PLAINTEXT, tls: ssl.SSLContext | None = None,
                 sasl: tuple[str, str, str] | None = None) -> None:
        self.listener = listener.upper()
        self.tls = tls  # the client side of TLS, for a listener whose protocol uses it
        self.sasl = sasl  # (mechanism, username, password) this broker logs in with

    @classmethod
    def from_config(cls, config: BrokerConfig) -> BrokerConnector:
        """Raises TlsError when the inter-broker listener uses TLS and its settings cannot be
        loaded (the supervisor checked them at start-up)."""
        inter = config.inter_broker_listener
        tls = sasl = None
        ep = next((e for e in config.listener_endpoints if e.listener == inter), None)
        if ep is not None and uses_tls(ep.security_protocol):
            tls = client_context(config)
        if ep is not None and uses_sasl(ep.security_protocol):
            mechanism = config["sasl.mechanism.inter.broker.protocol"]
            user, password = login_of(config.listener_value(inter, f"{mechanism.lower()}.sasl.jaas.config"))
            sasl = (mechanism, user, password)
        return cls(inter, tls, sasl)

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
        try:
            if tls is not None:
                sock = tls.wrap_socket(sock, server_hostname=addr.host)
            if uses_sasl(addr.security_protocol):
                login(sock, *self._sasl_for(addr), address=str(addr))
        except BaseException:
            sock.close()
            raise
        return sock

    def _sasl_for(self, addr: BrokerAddress) -> tuple[str, str, str]:
        if self.sasl is None:
            raise NoEndpoint(f"{addr} uses {addr.security_protocol}, but this broker has no "
                             f"SASL login for its {self.listener} listener")
        return self.sasl

    async def _login(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     addr: BrokerAddress) -> None:
        steps = exchange(*self._sasl_for(addr))
        conn = ClientConnection("broker-login")
        answer = None
        try:
            while True:
                api_key, version, body = steps.send(answer)
                _, frame = conn.send_request(api_key, version, body)
                writer.write(frame)
                await writer.drain()
                while not isinstance(event := conn.next_event(), Response):
                    data = await asyncio.wait_for(reader.read(65536), TLS_HANDSHAKE_TIMEOUT_S)
                    if not data:
                        raise SaslLoginFailed(f"{addr} closed the connection during the SASL login")
                    conn.receive_data(data)
                answer = event.body
        except StopIteration:
            return

    async def open(self, broker: BrokerInfo | BrokerAddress, rcvbuf: int = -1
                   ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """An asyncio stream pair to ``broker``, with TLS and the SASL login its listener's
        protocol asks for; ``rcvbuf`` > 0 sets SO_RCVBUF before connecting (the replica
        fetchers' replica.socket.receive.buffer.bytes; -1 keeps the OS default and its
        autotuning). Raises OSError (NoEndpoint included)."""
        addr = broker if isinstance(broker, BrokerAddress) else self.address(broker)
        reader, writer = await self._connect(addr, rcvbuf)
        if uses_sasl(addr.security_protocol):
            try:
                await self._login(reader, writer, addr)
            except BaseException:
                writer.close()
                raise
        return reader, writer

    async def _connect(self, addr: BrokerAddress, rcvbuf: int
                       ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
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
