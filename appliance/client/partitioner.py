"""Kafka's default partitioner: murmur2(key) & 0x7fffffff % partitions, as the Java client.

The same key lands on the same partition whichever client (Java, ours) produced it.
Null keys: sticky — one random partition until the caller asks for a new one (a batch boundary).
"""

from __future__ import annotations

import random

__all__ = ["murmur2", "partition_for", "StickyPartitioner"]

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (Utils.murmur2), as a signed 32-bit int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    n4 = length // 4
    for i in range(n4):
        k = int.from_bytes(data[4 * i:4 * i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    tail = length & 3
    base = n4 * 4
    if tail == 3:
        h ^= data[base + 2] << 16
    if tail >= 2:
        h ^= data[base + 1] << 8
    if tail >= 1:
        h ^= data[base]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a non-null key."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


class StickyPartitioner:
    """Null-key placement: stay on one partition until :meth:`next` (after a batch is sent)."""

    def __init__(self) -> None:
        self._current: dict[str, int] = {}

    def partition(self, topic: str, num_partitions: int) -> int:
        p = self._current.get(topic)
        if p is None or p >= num_partitions:
            p = self._current[topic] = random.randrange(num_partitions)
        return p

    def next(self, topic: str, num_partitions: int) -> int:
        old = self._current.get(topic)
        choices = [p for p in range(num_partitions) if p != old] or [0]
        self._current[topic] = random.choice(choices)
        return self._current[topic]
