"""A network worker's line to its broker's cluster worker (cluster mode only).

Requests the cluster worker answers (the controller's LeaderAndIsr / StopReplica /
UpdateMetadata, and Metadata and CreateTopics, which need the cluster's view) travel as
``[u32 length][i16 api key][i16 api version][encoded request body]`` over one abstract Unix
stream socket per network worker; the answer is ``[u32 length][encoded response body]``. One
request at a time per link: these APIs are rare next to produce and fetch.
"""

from __future__ import annotations

import asyncio
import struct

__all__ = ["ClusterLink", "ClusterUnavailable", "FORWARD_HEAD", "LENGTH"]

LENGTH = struct.Struct(">I")
FORWARD_HEAD = struct.Struct(">hh")
_TIMEOUT_S = 60.0  # CreateTopics waits for the controller's elections


class ClusterUnavailable(Exception):
    """The cluster worker is not (yet) listening or went away."""


class ClusterLink:
    """Connections are pooled: a call takes an idle one or opens another, so a CreateTopics
    waiting for the controller's elections never holds up the LeaderAndIsr it waits for."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def call(self, api_key: int, api_version: int, body: bytes) -> bytes:
        """The encoded response body. Raises ClusterUnavailable."""
        conn = None
        try:
            conn = self._idle.pop() if self._idle else await asyncio.open_unix_connection(self.address)
            reader, writer = conn
            writer.write(LENGTH.pack(FORWARD_HEAD.size + len(body))
                         + FORWARD_HEAD.pack(api_key, api_version) + body)
            (n,) = LENGTH.unpack(await asyncio.wait_for(reader.readexactly(4), _TIMEOUT_S))
            answer = await asyncio.wait_for(reader.readexactly(n), _TIMEOUT_S)
        except (OSError, asyncio.IncompleteReadError, TimeoutError) as e:
            if conn is not None:
                conn[1].close()
            raise ClusterUnavailable(str(e)) from e
        self._idle.append(conn)
        return answer

    def close(self) -> None:
        for _, writer in self._idle:
            writer.close()
        self._idle.clear()
