"""A network worker's line to its broker's cluster worker (cluster mode only).

Requests the cluster worker answers (the controller's LeaderAndIsr / StopReplica /
UpdateMetadata, and Metadata and CreateTopics, which need the cluster's view) travel as
``[u32 length][i16 api key][i16 api version][u8 n][listener name, n bytes][encoded request
body]`` over one abstract Unix stream socket per network worker (the listener the client's
request came in on: Metadata, FindCoordinator and DescribeCluster give every broker's address
on that listener); the answer is ``[u32 length][encoded response body]``. One
request at a time per link: these APIs are rare next to produce and fetch.

One request is ours, not an API: :data:`CONFIG_REQUEST` (key -2), JSON both ways, for the configs
ZooKeeper holds. ``{"op": "write", "entity_type": "topics"|"brokers", "entity_name": ..,
"config": {..}}`` carries a validated change, which the cluster worker writes for every broker;
``{"op": "read", "entity_type": "topics", "entity_name": ..}`` asks for a topic's overrides.
The answer: ``{"error_code": .., "error_message": .., "config": {..} or null}``.
:data:`PRODUCER_ID_BLOCK_REQUEST` (key -3), JSON both ways too, asks for the next block of
producer ids from ZooKeeper (``{"timeout_ms": ..}``, how long the asker waits; the answer:
``{"error_code": 0, "block_start": .., "block_end": ..}``, both inclusive, or an error code and
message when none could be had in time).
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
from typing import NamedTuple

__all__ = ["ClusterLink", "ClusterUnavailable", "Forwarded", "FORWARD_HEAD", "LENGTH", "CONFIG_REQUEST",
           "PRODUCER_ID_BLOCK_REQUEST", "forward_frame", "read_forwarded"]

LENGTH = struct.Struct(">I")
FORWARD_HEAD = struct.Struct(">hhB")  # api key, api version, the listener name's length


class Forwarded(NamedTuple):
    api_key: int
    api_version: int
    listener: str  # "" when the request came from no client connection (the controller's)
    body_at: int   # where the encoded request body starts in the frame


def forward_frame(api_key: int, api_version: int, listener: str, body: bytes) -> bytes:
    """One forwarded request, its length first."""
    name = listener.encode()[:255]
    return (LENGTH.pack(FORWARD_HEAD.size + len(name) + len(body))
            + FORWARD_HEAD.pack(api_key, api_version, len(name)) + name + body)


def read_forwarded(frame: bytes) -> Forwarded:
    """The head of a forwarded request (the frame after its length)."""
    api_key, api_version, n = FORWARD_HEAD.unpack_from(frame, 0)
    start = FORWARD_HEAD.size
    return Forwarded(api_key, api_version, frame[start:start + n].decode(errors="replace"), start + n)
_TIMEOUT_S = 60.0  # CreateTopics waits for the controller's elections
CONFIG_REQUEST = -2  # not a Kafka API key: configs in ZooKeeper (see the module doc)
PRODUCER_ID_BLOCK_REQUEST = -3  # not a Kafka API key: the next producer id block (module doc)


class ClusterUnavailable(Exception):
    """The cluster worker is not (yet) listening or went away."""


class ClusterLink:
    """Connections are pooled: a call takes an idle one or opens another, so a CreateTopics
    waiting for the controller's elections never holds up the LeaderAndIsr it waits for."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        # The address is abstract (a leading NUL), which uvloop does not take as a path: the
        # socket is connected here and handed over.
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            await asyncio.get_running_loop().sock_connect(sock, self.address)
        except BaseException:
            sock.close()
            raise
        return await asyncio.open_unix_connection(sock=sock)

    async def call(self, api_key: int, api_version: int, body: bytes, listener: str = "",
                   timeout_s: float = _TIMEOUT_S) -> bytes:
        """The encoded response body; ``listener``: the one the client's request came in on.
        Raises ClusterUnavailable (also when no answer came within ``timeout_s``: the
        connection is closed, so a late answer is never read as another call's)."""
        conn = None
        try:
            conn = self._idle.pop() if self._idle else await self._connect()
            reader, writer = conn
            writer.write(forward_frame(api_key, api_version, listener, body))
            (n,) = LENGTH.unpack(await asyncio.wait_for(reader.readexactly(4), timeout_s))
            answer = await asyncio.wait_for(reader.readexactly(n), timeout_s)
        except (OSError, asyncio.IncompleteReadError, TimeoutError) as e:
            if conn is not None:
                conn[1].close()
            raise ClusterUnavailable(str(e)) from e
        self._idle.append(conn)
        return answer

    async def write_config(self, entity_type: str, entity_name: str,
                           config: dict[str, str]) -> tuple[int, str | None]:
        """(error code, message) of writing the entity's whole config set through ZooKeeper.
        Raises ClusterUnavailable."""
        answer = await self._config({"op": "write", "entity_type": entity_type,
                                     "entity_name": entity_name, "config": config})
        return int(answer["error_code"]), answer.get("error_message")

    async def topic_config(self, topic: str) -> dict[str, str] | None:
        """The topic's overrides in ZooKeeper; None when there is no such topic. Raises
        ClusterUnavailable."""
        answer = await self._config({"op": "read", "entity_type": "topics", "entity_name": topic})
        return answer.get("config")

    async def producer_id_block(self, timeout_s: float) -> tuple[int, int]:
        """(first, last), both inclusive: a block of producer ids allocated in ZooKeeper for this
        broker, for its network workers to hand out. Raises ClusterUnavailable (the cluster
        worker is away, or could not allocate within ``timeout_s``: ZooKeeper out of reach)."""
        ask = json.dumps({"timeout_ms": int(timeout_s * 1000)}).encode()
        answer = json.loads(await self.call(PRODUCER_ID_BLOCK_REQUEST, 0, ask, timeout_s=timeout_s))
        if answer["error_code"]:
            raise ClusterUnavailable(answer.get("error_message") or f"error {answer['error_code']}")
        return int(answer["block_start"]), int(answer["block_end"])

    async def _config(self, request: dict) -> dict:
        return json.loads(await self.call(CONFIG_REQUEST, 0, json.dumps(request).encode()))

    def close(self) -> None:
        for _, writer in self._idle:
            writer.close()
        self._idle.clear()
