"""``connections.max.idle.ms``: a network worker closes client connections idle that long, as
Kafka's socket server does (it frees the descriptors and memory of clients that went away
without closing, behind a NAT that dropped them, or that simply stopped).

Idle means nothing read from the connection and nothing written to it, with no request waiting
for its answer: a long poll in progress keeps its connection open however long it waits.

Not thread-safe: run on the network worker's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import Protocol

__all__ = ["close_idle", "reap_idle_connections", "check_interval"]

log = logging.getLogger("appliance.network")

# the check runs at least this often, so a small connections.max.idle.ms (tests) is kept to
# within half of it, and the default (10 min) within a second: a pass is one comparison per
# connection
MAX_CHECK_INTERVAL_S = 1.0


class Connection(Protocol):
    def idle_since(self) -> float: ...
    def close_idle(self) -> None: ...


def check_interval(idle_ms: int) -> float:
    """Seconds between two passes for ``idle_ms``."""
    return min(idle_ms / 2000, MAX_CHECK_INTERVAL_S)


def close_idle(connections: Iterable[Connection], idle_s: float, now: float) -> int:
    """Close every connection idle for at least ``idle_s`` at ``now`` (monotonic); how many."""
    closed = 0
    for conn in list(connections):
        if now - conn.idle_since() >= idle_s:
            conn.close_idle()
            closed += 1
    return closed


async def reap_idle_connections(connections: Iterable[Connection], idle_ms: int,
                                clock: Callable[[], float] = time.monotonic) -> None:
    """Close idle connections until cancelled (the worker's shutdown)."""
    idle_s = idle_ms / 1000
    while True:
        await asyncio.sleep(check_interval(idle_ms))
        n = close_idle(connections, idle_s, clock())
        if n:
            log.debug("closed %d connection(s) idle for %d ms (connections.max.idle.ms)", n, idle_ms)
