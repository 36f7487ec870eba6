"""``queued.max.request.bytes``: the bytes of requests a network worker has read and not yet
answered, and the connections it muted while they were over the bound (Kafka's memory pool:
a muted channel is not read until memory frees; no request already read is ever dropped).

Per network worker (each is its own process with its own memory), where Kafka's pool is per
broker. Not thread-safe (one per worker, used on its event loop).
"""

from __future__ import annotations

from typing import Any

__all__ = ["RequestMemory"]


class RequestMemory:
    def __init__(self, limit: int, recorder: Any = None) -> None:
        self.limit = limit
        self.used = 0
        self.muted: set[Any] = set()  # connections with reading paused for memory
        self.recorder = recorder  # metrics: the gauge of bytes held, mute events

    def hold(self, conn: Any, size: int) -> None:
        """``conn`` read a request of ``size`` bytes; mute it if that exhausts the bound."""
        self.used += size
        if self.used >= self.limit and conn not in self.muted:
            self.muted.add(conn)
            conn.mute()
            if self.recorder is not None:
                self.recorder.muted()
        if self.recorder is not None:
            self.recorder.request_memory(self.used)

    def free(self, size: int) -> None:
        """A held request was answered (or its connection closed)."""
        self.used -= size
        if self.recorder is not None:
            self.recorder.request_memory(self.used)
        if self.muted and self.used < self.limit:
            muted, self.muted = self.muted, set()
            for conn in muted:
                conn.unmute()

    def forget(self, conn: Any) -> None:
        self.muted.discard(conn)
