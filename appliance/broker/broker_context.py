"""Everything a network worker's request handlers share: config, table, disks, readers, wake-ups.

``handle(request)`` routes a decoded request to its handler (``appliance.broker.handlers``) and
encodes the answer with the protocol module; the I/O shell only moves bytes.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any

from appliance.broker.disk_client import DiskClient
from appliance.broker.partition_index import PartitionIndex
from appliance.broker.readers import Readers
from appliance.config import BrokerConfig
from appliance.shm.partition_table import PartitionTable

__all__ = ["BrokerContext", "NO_RESPONSE"]

log = logging.getLogger("appliance.network")

NO_RESPONSE = object()  # a handler's answer to a request that gets none (acks=0 produce)


class BrokerContext:
    def __init__(self, net_index: int, config: BrokerConfig, table: PartitionTable,
                 disks: DiskClient, log_dirs: list[str]) -> None:
        self.net_index = net_index
        self.config = config
        self.table = table
        self.disks = disks
        self.index = PartitionIndex(table)
        self.readers = Readers(log_dirs)
        self.log_dirs = log_dirs
        self.connections: set[Any] = set()
        self.broker_id = int(config["broker.id"])
        host, port = config.advertised_listeners[0]
        if host in ("", "0.0.0.0", "::"):
            host = socket.getfqdn()
        self.advertised = (host, port)
        self.cluster_id = f"appliance-{self.broker_id}"
        self._data_waiters: list[asyncio.Future] = []
        self._in_doorbell = False
        self._ready_conns: set[Any] = set()

    # wake-ups ---------------------------------------------------------------------------
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

    def periodic(self) -> None:
        pass

    # dispatch ---------------------------------------------------------------------------
    async def handle(self, request: Any, client_host: str = "") -> Any:
        from appliance.broker.handlers import dispatch
        return await dispatch(self, request, client_host)

    def can_start(self, request: Any) -> bool:
        """True if ``request`` is served without a task (see :meth:`start`)."""
        from appliance.broker.handlers import START_HANDLERS
        return request.api_key in START_HANDLERS

    def start(self, request: Any, respond: Any) -> None:
        """Start ``request`` without a task; ``respond`` gets its encoded answer (handlers.start)."""
        from appliance.broker.handlers import start
        start(self, request, respond)

    def close(self) -> None:
        self.readers.close()
        self.disks.close()
