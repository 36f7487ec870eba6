"""``max.connections`` and ``max.connections.per.ip`` (with its overrides) across every network
worker of a broker, with Kafka's semantics:

- over ``max.connections`` the broker stops accepting until a connection closes: the network
  worker leaves new connections in its listening socket's backlog (they wait, as in Kafka's
  acceptor) and looks again every :data:`RECHECK_S`; the connections it holds are served as
  usual;
- a connection over its address's limit is closed at once.

The counts live in shared memory (:mod:`appliance.shm.connection_counts`): each worker writes
its own region and sums all of them. A worker adds first and checks after, backing off when the
sum is over: two workers accepting at the same instant at the limit may both back off (the
waiting one gets in on its next look), never both get in. Not thread-safe (one per worker).
"""

from __future__ import annotations

import ipaddress

import numpy as np

from appliance.config import INT_MAX, BrokerConfig, parse_ip_overrides
from appliance.shm.connection_counts import ConnectionCounts

__all__ = ["ConnectionLimits", "RECHECK_S", "address_key"]

RECHECK_S = 0.05  # while accepts are paused: how often the broker-wide count is looked at again
_LOW = (1 << 64) - 1


def address_key(host: str) -> tuple[int, int]:
    """A client address as two 64-bit words (IPv4 as ::ffff:a.b.c.d, as the kernel maps it)."""
    addr = ipaddress.ip_address(host.split("%")[0])
    if addr.version == 4:
        n = (0xFFFF << 32) | int(addr)
    else:
        n = int(addr.ipv4_mapped) | (0xFFFF << 32) if addr.ipv4_mapped else int(addr)
    return n >> 64, n & _LOW


class ConnectionLimits:
    def __init__(self, counts: ConnectionCounts, index: int, num_net: int,
                 config: BrokerConfig) -> None:
        self.counts = counts
        self.region = counts.regions[index]
        self.region[:] = 0  # a predecessor's connections died with it
        self.totals = counts.totals[:num_net]
        self.entries = counts.entries[:num_net]
        self.own = counts.entries[index]
        limit = int(config["max.connections"])
        self.max_total = limit if limit < INT_MAX else None
        self.overrides = {address_key(a): n for a, n in
                          parse_ip_overrides(config["max.connections.per.ip.overrides"]).items()}
        per_ip = int(config["max.connections.per.ip"])
        self.per_ip = per_ip
        self.per_ip_on = per_ip < INT_MAX or bool(self.overrides)
        self._entry_of: dict[tuple[int, int], int] = {}  # our entries, by address
        self.untracked = 0  # connections from addresses past CONN_IP_SLOTS (not limited per IP)

    # -- max.connections -------------------------------------------------------------------
    def take(self) -> bool:
        """Count one more connection, or False (nothing counted) when the broker is full."""
        region = self.region
        region[0] += 1
        if self.max_total is not None and int(self.totals.sum()) > self.max_total:
            region[0] -= 1
            return False
        return True

    def give_back(self) -> None:
        self.region[0] -= 1

    def full(self) -> bool:
        return self.max_total is not None and int(self.totals.sum()) >= self.max_total

    def open_connections(self) -> int:
        return int(self.totals.sum())

    # -- max.connections.per.ip --------------------------------------------------------------
    def limit_for(self, key: tuple[int, int]) -> int:
        return self.overrides.get(key, self.per_ip)

    def admit(self, key: tuple[int, int]) -> bool:
        """Count a connection from ``key``'s address, or False (nothing counted) when that
        address is at its limit broker-wide."""
        if not self.per_ip_on:
            return True
        own = self.own
        i = self._entry_of.get(key)
        if i is None:
            free = np.flatnonzero(own[:, 2] == 0)
            if not len(free):
                self.untracked += 1  # every entry in use: this one is not limited per address
                return True
            i = int(free[0])
            own[i, 0], own[i, 1] = key  # the address first: readers trust an entry by its count
            self._entry_of[key] = i
        own[i, 2] += 1
        e = self.entries
        mask = (e[:, :, 0] == key[0]) & (e[:, :, 1] == key[1])
        if int(e[:, :, 2][mask].sum()) > self.limit_for(key):
            self.release(key)
            return False
        return True

    def release(self, key: tuple[int, int]) -> None:
        """A connection from ``key``'s address closed (or was refused after :meth:`admit`)."""
        if not self.per_ip_on:
            return
        i = self._entry_of.get(key)
        if i is None:
            self.untracked = max(self.untracked - 1, 0)
            return
        own = self.own
        own[i, 2] -= 1
        if own[i, 2] == 0:
            del self._entry_of[key]
