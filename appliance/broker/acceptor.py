"""A network worker's accept loop: the connection limits applied before a connection is served.

asyncio's ``create_server`` accepts whatever the backlog holds; Kafka's acceptor instead stops
accepting while the broker holds ``max.connections`` (the clients wait in the backlog) and
closes at once a connection over its address's ``max.connections.per.ip``. This does the same
on the listening socket the worker shares with the others (SO_REUSEPORT), then hands each
accepted socket to the event loop with a :class:`KafkaConnection`-like protocol.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any

from appliance.broker.connection_limits import RECHECK_S, ConnectionLimits, address_key

__all__ = ["Acceptor"]

log = logging.getLogger("appliance.network")

ACCEPT_BATCH = 64  # accepts per wake-up, so a connection storm cannot starve the requests
LOG_INTERVAL_S = 10.0  # a refused client retrying in a loop must not flood the log
TLS_HANDSHAKE_TIMEOUT_S = 10.0


class Acceptor:
    def __init__(self, sock: socket.socket, limits: ConnectionLimits,
                 protocol_factory: Callable[[], Any], metrics: Any = None,
                 tls: ssl.SSLContext | None = None) -> None:
        self.sock = sock
        self.tls = tls  # a TLS listener's context: the handshake runs before the protocol sees bytes
        self.limits = limits
        self.factory = protocol_factory
        self.metrics = metrics
        self.loop = asyncio.get_running_loop()
        self._reading = False
        self._closed = False
        self._recheck: asyncio.TimerHandle | None = None
        self._logged: dict[str, tuple[float, int]] = {}  # message key -> (last logged, repeats)

    def start(self) -> None:
        self._resume()

    def close(self) -> None:
        """Stop accepting (what waits in the backlog is refused by the kernel on close)."""
        self._closed = True
        self._pause_reading()
        if self._recheck is not None:
            self._recheck.cancel()
        self.sock.close()

    def connection_closed(self) -> None:
        """A connection of this worker closed: if accepts wait for room, look now."""
        if not self._reading and not self._closed and self._recheck is not None:
            self._recheck.cancel()
            self._look_again()

    # -- accepting ---------------------------------------------------------------------------
    def _on_readable(self) -> None:
        limits = self.limits
        for _ in range(ACCEPT_BATCH):
            if not limits.take():
                self._wait_for_room()
                return
            try:
                conn, addr = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                limits.give_back()
                return
            except OSError as e:
                limits.give_back()
                if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    # out of descriptors: back off like a full broker (the backlog waits)
                    self._log(logging.ERROR, "accept", "cannot accept connections: %s",
                              e.strerror)
                    self._wait_for_room()
                return
            key = None
            if limits.per_ip_on:
                key = address_key(addr[0])
                if not limits.admit(key):
                    limits.give_back()
                    conn.close()
                    if self.metrics is not None:
                        self.metrics.rejected_connection()
                    self._log(logging.INFO, f"ip {addr[0]}", "rejected a connection from %s: "
                              "the address already has the configured maximum of %d connections",
                              addr[0], limits.limit_for(key))
                    continue
            conn.setblocking(False)
            protocol = self.factory()
            protocol.limit_key = key
            self.loop.create_task(self._serve(conn, protocol))

    async def _serve(self, conn: socket.socket, protocol: Any) -> None:
        try:
            if self.tls is None:
                await self.loop.connect_accepted_socket(lambda: protocol, conn)
            else:
                # a client that stops half-way through the handshake holds its slot only this long
                await self.loop.connect_accepted_socket(lambda: protocol, conn, ssl=self.tls,
                                                        ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S)
        except Exception as e:  # the socket died before it could be served, or its handshake failed
            log.debug("connection lost before it was served: %s", e)
            if self.tls is not None and self.metrics is not None:
                self.metrics.failed_handshake()
            conn.close()
            protocol.release_limits()

    def _wait_for_room(self) -> None:
        """max.connections reached (or no descriptor left): leave new connections in the
        backlog and look again shortly, or as soon as one of ours closes."""
        if self._reading and self.metrics is not None:
            self.metrics.delayed_accept()
        if self._reading:
            self._log(logging.INFO, "full", "max.connections (%s) reached: new connections wait "
                      "to be accepted", self.limits.max_total)
        self._pause_reading()
        self._recheck = self.loop.call_later(RECHECK_S, self._look_again)

    def _look_again(self) -> None:
        self._recheck = None
        if self._closed:
            return
        if self.limits.full():
            self._recheck = self.loop.call_later(RECHECK_S, self._look_again)
            return
        self._resume()
        self._on_readable()

    def _resume(self) -> None:
        if not self._reading and not self._closed:
            self.loop.add_reader(self.sock.fileno(), self._on_readable)
            self._reading = True

    def _pause_reading(self) -> None:
        if self._reading:
            self.loop.remove_reader(self.sock.fileno())
            self._reading = False

    def _log(self, level: int, key: str, msg: str, *args: object) -> None:
        now = time.monotonic()
        last, repeats = self._logged.get(key, (0.0, 0))
        if last and now - last < LOG_INTERVAL_S:
            self._logged[key] = (last, repeats + 1)
            return
        if len(self._logged) > 1000:
            self._logged.clear()
        self._logged[key] = (now, 0)
        if repeats:
            log.log(level, msg + " (%d more times in the last %.0f s)", *args, repeats, now - last)
        else:
            log.log(level, msg, *args)
