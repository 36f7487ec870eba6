"""``queued.max.requests``: how many requests a network worker holds read but not yet answered
before it stops reading the connections that have one waiting.

Kafka stops a network thread reading while the request queue in front of its I/O threads is
full; a long poll parked in its purgatory has left that queue, so it never holds the bound against
the produce that would complete it. Here a long poll waits in the network worker beside
everything else, so every unanswered request counts, and at the bound only the connections with a
request waiting are muted. A connection with nothing waiting is still read: its next request gets
in (and mutes it until answered). That cannot deadlock: a request that would complete waiting ones
(a produce for long polls, a group leader's SyncGroup, a heartbeat) is read at once if its
connection has nothing waiting, and otherwise after its own connection's earlier answers -- which
is where Kafka reads it too, as Kafka reads one request per connection at a time. The bound may
be passed by one read of each connection that had nothing waiting.

Per network worker (each is its own process), where Kafka's queue is per broker. Not
thread-safe: one per worker, used on its event loop.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

__all__ = ["RequestQueue", "MUTE_REASON"]

MUTE_REASON = "queued.max.requests"


class Connection(Protocol):
    """What the bound needs of a connection (KafkaConnection)."""

    def waiting(self) -> int: ...
    def mute(self, reason: str) -> None: ...
    def unmute(self, reason: str) -> None: ...


class RequestQueue:
    def __init__(self, limit: int, connections: Iterable[Any]) -> None:
        self.limit = limit
        self.count = 0
        self._connections = connections  # the worker's open connections (BrokerContext's set)
        self.muted: set[Any] = set()

    def hold(self, conn: Connection) -> None:
        """``conn`` queued a request. At the bound, mute every connection with one waiting."""
        self.count += 1
        if self.count < self.limit:
            return
        if self.count == self.limit:  # just reached: the others with a request waiting too
            for other in self._connections:
                if other not in self.muted and other.waiting():
                    self._mute(other)
        if conn not in self.muted:
            self._mute(conn)

    def free(self, conn: Connection, n: int = 1) -> None:
        """``n`` of ``conn``'s requests were answered (or dropped with its connection)."""
        self.count -= n
        if self.count < self.limit:
            if self.muted:
                muted, self.muted = self.muted, set()
                for c in muted:
                    c.unmute(MUTE_REASON)
        elif conn in self.muted and not conn.waiting():
            self.muted.discard(conn)  # nothing waiting on it now: it may send its next one
            conn.unmute(MUTE_REASON)

    def forget(self, conn: Connection) -> None:
        """``conn`` closed (its requests are freed separately)."""
        self.muted.discard(conn)

    def _mute(self, conn: Connection) -> None:
        self.muted.add(conn)
        conn.mute(MUTE_REASON)
