"""What the fetcher hands to the application: each owned partition's :class:`PartitionTopicInfo`
(fetch and consume positions), the chunks of fetched records on a stream's queue, and
:class:`KafkaStream`, the iterator of :class:`MessageAndMetadata` one application thread reads.

A partition's positions are guarded by its own lock: the stream marks a record consumed and a
rebalance revokes the partition (then commits its consumed offset) under it, so a record is
either counted in that commit or never handed out (the new owner reads it; no duplicate).

Thread-safety: one thread iterates a stream; the fetcher and the rebalance run on others.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from appliance.client.fetching import ConsumerRecord
from appliance.client.zk_consumer.errors import ConsumerTimeout

__all__ = ["MessageAndMetadata", "PartitionTopicInfo", "Chunk", "KafkaStream", "SHUTDOWN"]

SHUTDOWN = object()  # put on every queue by shutdown(): the iterators end
_POLL_S = 0.5  # how often a waiting iterator looks for a failed rebalance


class MessageAndMetadata(NamedTuple):
    key: Any
    message: Any
    topic: str
    partition: int
    offset: int


class PartitionTopicInfo:
    """One owned partition: where the fetcher reads next, and the offset after the last record a
    stream handed out (what commits store: the next offset to read)."""

    def __init__(self, topic: str, partition: int, stream_queue: queue.Queue, offset: int) -> None:
        self.topic, self.partition = topic, partition
        self.queue = stream_queue
        self.fetched_offset = offset
        self.consumed_offset = offset
        self.revoked = False
        self.lock = threading.Lock()

    def revoke(self) -> int:
        """Stop handing out this partition's records; the consumed offset to commit."""
        with self.lock:
            self.revoked = True
            return self.consumed_offset

    def __repr__(self) -> str:
        return f"{self.topic}-{self.partition}@{self.consumed_offset}"


class Chunk(NamedTuple):
    info: PartitionTopicInfo
    records: list[ConsumerRecord]


class KafkaStream:
    """Iterates MessageAndMetadata of the partitions given to it, blocking while none is fetched.

    ``next()`` raises ConsumerTimeout after consumer.timeout.ms without a message (the stream
    stays usable), the rebalance's ConsumerRebalanceFailed once a background rebalance gave up,
    and StopIteration after the connector's shutdown."""

    def __init__(self, stream_queue: queue.Queue, timeout_ms: int, failure: Callable[[], BaseException | None],
                 key_decoder: Any = None, value_decoder: Any = None) -> None:
        self.queue = stream_queue
        self.timeout_ms = timeout_ms
        self._failure = failure
        self._key_decoder, self._value_decoder = key_decoder, value_decoder
        self._chunk: Chunk | None = None
        self._index = 0
        self._ended = False

    def __iter__(self) -> KafkaStream:
        return self

    def __next__(self) -> MessageAndMetadata:
        deadline = None if self.timeout_ms < 0 else time.monotonic() + self.timeout_ms / 1000
        while True:
            if self._ended:
                raise StopIteration
            chunk = self._chunk
            if chunk is not None and self._index < len(chunk.records):
                r = chunk.records[self._index]
                self._index += 1
                with chunk.info.lock:
                    if chunk.info.revoked:  # the partition moved on: its records are the new owner's
                        self._chunk = None
                        continue
                    chunk.info.consumed_offset = r.offset + 1
                key = self._key_decoder.from_bytes(r.key) if self._key_decoder and r.key is not None else r.key
                value = (self._value_decoder.from_bytes(r.value) if self._value_decoder and r.value is not None
                         else r.value)
                return MessageAndMetadata(key, value, r.topic, r.partition, r.offset)
            self._chunk = None
            failure = self._failure()
            if failure is not None:
                raise failure
            wait = _POLL_S if deadline is None else min(_POLL_S, deadline - time.monotonic())
            try:
                item = self.queue.get(timeout=max(wait, 0.0)) if wait > 0 else self.queue.get_nowait()
            except queue.Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    raise ConsumerTimeout(f"no message within consumer.timeout.ms={self.timeout_ms}") from None
                continue
            if item is SHUTDOWN:
                self._ended = True
                continue
            self._chunk, self._index = item, 0

    def clear(self) -> None:
        """Drop the queued chunks (a rebalance: their partitions were revoked)."""
        while True:
            try:
                item = self.queue.get_nowait()
            except queue.Empty:
                return
            if item is SHUTDOWN:
                self.queue.put(SHUTDOWN)
                return
