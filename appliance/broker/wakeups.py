"""A network worker's wake-ups: the disk doorbell delivers completions, then sends every answer
they completed (one write per connection) and wakes the long-poll fetches."""

from __future__ import annotations

import asyncio
from typing import Any

from appliance.broker.disk_client import DiskClient

__all__ = ["Wakeups"]


class Wakeups:
    def __init__(self, disks: DiskClient) -> None:
        self.disks = disks
        self._data_waiters: list[asyncio.Future] = []
        self._in_doorbell = False
        self._ready_conns: set[Any] = set()

    def on_doorbell(self) -> None:
        """A disk worker rang: completions to deliver, and maybe new data for long polls."""
        self._in_doorbell = True
        try:
            self.disks.on_doorbell()
        finally:
            self._in_doorbell = False
        # every answer this doorbell completed goes out with one send per connection
        ready, self._ready_conns = self._ready_conns, set()
        for conn in ready:
            conn.flush_answers()
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

    async def wait_for_data(self, timeout: float) -> None:
        """Sleep until some partition may have grown (any append on any disk), or ``timeout``."""
        if timeout <= 0:
            return
        fut = asyncio.get_running_loop().create_future()
        self._data_waiters.append(fut)
        try:
            await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            pass
