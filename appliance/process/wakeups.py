"""A network worker's wake-ups: the disk doorbell delivers completions, then sends every answer
they completed (one write per connection) and wakes the long-poll fetches.

Disk workers ring for new data only the network workers that asked (a word in each completion
ring, :meth:`Ring.want_data`): a worker with no long polls is not woken by appends. The ask is
per kind of long poll (DataWanted: followers' fetches wait for a log end offset to grow,
consumers' for any published change); each is raised by the first long poll of its kind and
kept until none of that kind has waited for DATA_INTEREST_S."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from appliance.process.disk_client import DiskClient
from appliance.shm.layout import DataWanted

__all__ = ["Wakeups", "DATA_INTEREST_S", "FIRST_DATA_WAIT_S"]

# kept this long after the last long poll: a consumer's next fetch comes within its own wait,
# so a polling consumer raises the ask once, not once per fetch
DATA_INTEREST_S = 1.0
# the first wait after raising the ask is this short: an append made between the fetch's read
# and the ask may have found it down and rung no bell (the two sides' stores are not ordered)
FIRST_DATA_WAIT_S = 0.005
# the waiters' list is emptied by each data bell; on a worker that gets none (idle consumers'
# long polls timing out) the finished ones are dropped once it holds this many
_PRUNE_WAITERS = 256


def _wake(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


class Wakeups:
    def __init__(self, disks: DiskClient) -> None:
        self.disks = disks
        self._data_waiters: list[asyncio.Future] = []
        self._in_doorbell = False
        self._ready_conns: set[Any] = set()
        self._wanting = 0  # the DataWanted bits of the ask for data bells that is up
        self._waiting = {DataWanted.LOG_END: 0, DataWanted.ANY: 0}  # long polls waiting, by kind
        self._last_wait = {DataWanted.LOG_END: 0.0, DataWanted.ANY: 0.0}

    def on_doorbell(self) -> None:
        """A disk worker rang: completions to deliver, and maybe new data for long polls."""
        self._in_doorbell = True
        try:
            self.disks.on_doorbell()
        finally:
            self._in_doorbell = False
        # every answer this doorbell completed goes out with one send per connection (the set
        # and list are swapped only when used: this runs once per request under small produces)
        if self._ready_conns:
            ready, self._ready_conns = self._ready_conns, set()
            for conn in ready:
                conn.flush_answers()
        if self._data_waiters:
            waiters, self._data_waiters = self._data_waiters, []
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    def answer_ready(self, conn: Any) -> None:
        """``conn`` has an answer to send: now, or at the end of the doorbell being handled."""
        if self._in_doorbell:
            self._ready_conns.add(conn)
        else:
            conn.flush_answers()

    async def wait_for_data(self, timeout: float, kind: int = DataWanted.ANY) -> None:
        """Sleep until some partition may have changed in a way the long poll's ``kind``
        (DataWanted.LOG_END: a follower's fetch; ANY: a consumer's) waits for, or ``timeout``.
        Any data bell wakes every waiter: the caller checks its own partitions."""
        if timeout <= 0:
            return
        if not self._wanting & kind:
            self._wanting |= kind
            self.disks.want_data(self._wanting)
            timeout = min(timeout, FIRST_DATA_WAIT_S)
        self._waiting[kind] += 1
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        waiters = self._data_waiters
        if len(waiters) >= _PRUNE_WAITERS:  # long polls that timed out with no bell since
            waiters[:] = [f for f in waiters if not f.done()]
        waiters.append(fut)
        # a timer that resolves the future, not asyncio.wait_for: that wraps it in a second
        # future and callbacks and costs one more pass of the loop per wake-up
        timer = loop.call_later(timeout, _wake, fut)
        try:
            await fut
        finally:
            timer.cancel()
            self._waiting[kind] -= 1
            self._last_wait[kind] = time.monotonic()

    def expire_data_interest(self, now: float) -> None:
        """Stop asking for a kind of data bells once no long poll of that kind has waited for
        DATA_INTEREST_S."""
        wanting = self._wanting
        for kind in (DataWanted.LOG_END, DataWanted.ANY):
            if wanting & kind and not self._waiting[kind] and now - self._last_wait[kind] > DATA_INTEREST_S:
                wanting &= ~kind
        if wanting != self._wanting:
            self._wanting = wanting
            self.disks.want_data(wanting)
