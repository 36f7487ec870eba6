"""The 0.8.2 producer's ``kafka.producer.DefaultPartitioner``: ``abs(key.hashCode) % partitions``.

0.8.2 hands the partitioner the key object *before* it is encoded, and hashes it with Java's
``hashCode``. So a String key lands where Java's ``String.hashCode`` (over UTF-16 code units)
sends it, whatever ``serializer.class`` then makes of it, and an application moving from the
Scala producer keeps its key-to-partition mapping.

``abs`` is 0.8.2's ``Utils.abs`` (kafka/utils/Utils.scala at the 0.8.2.0-0.8.2.2 tags): ``0``
for ``Integer.MIN_VALUE``, else the absolute value. 0.8.1 computed ``n & 0x7fffffff``, which
differs for every negative hash; KAFKA-1469, in 0.8.2.0, replaced it.

Keys Java would not hash the same way in every process get a documented choice:

- bytes: 0.8.2 hashed a ``byte[]`` by identity (a different partition in every JVM run, so no
  mapping to keep); here it is ``java.util.Arrays.hashCode(byte[])`` over signed bytes, which
  is what 0.8.2's ``kafka.producer.ByteArrayPartitioner`` used.
- int: ``Integer.hashCode`` (the value) within 32 bits, ``Long.hashCode`` beyond.
- None: a random partition, kept per topic until the next periodic metadata refresh
  (``topic.metadata.refresh.interval.ms``), as 0.8.2's ``sendPartitionPerTopicCache``.

Thread-safety: :class:`HashCodePartitioner` may be called from several threads.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

__all__ = ["java_string_hash", "java_bytes_hash", "java_hash_code", "java_abs", "HashCodePartitioner"]

_INT_MIN = -(1 << 31)


def _int32(h: int) -> int:
    h &= 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode``: ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units, as
    a signed 32-bit int (a character beyond the BMP counts as its two surrogates)."""
    units = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return _int32(h)


def java_bytes_hash(b: bytes | bytearray | memoryview) -> int:
    """``java.util.Arrays.hashCode(byte[])``: seed 1, ``31*h + b`` over signed bytes."""
    h = 1
    for x in bytes(b):
        h = (31 * h + (x - 256 if x > 127 else x)) & 0xFFFFFFFF
    return _int32(h)


def java_hash_code(key: Any) -> int:
    """The hashCode 0.8.2's DefaultPartitioner takes of ``key`` (see the module docstring).
    Raises TypeError for a key type with no Java counterpart here."""
    if isinstance(key, str):
        return java_string_hash(key)
    if isinstance(key, (bytes, bytearray, memoryview)):
        return java_bytes_hash(key)
    if isinstance(key, int) and not isinstance(key, bool):
        if _INT_MIN <= key < -_INT_MIN:
            return key  # Integer.hashCode
        v = key & 0xFFFFFFFFFFFFFFFF  # Long.hashCode: (int)(value ^ (value >>> 32))
        return _int32(v ^ (v >> 32))
    raise TypeError(f"kafka.producer.DefaultPartitioner: no Java hashCode for a {type(key).__name__} key "
                    "(str, bytes or int)")


def java_abs(n: int) -> int:
    """0.8.2's ``Utils.abs``: Integer.MIN_VALUE (whose Java ``Math.abs`` is itself) gives 0."""
    return 0 if n == _INT_MIN else abs(n)


class HashCodePartitioner:
    """``partitioner.class=kafka.producer.DefaultPartitioner``: ``abs(hashCode(key)) % n`` of the
    key as given to send() (not its encoded bytes: ``takes_key_object``)."""

    takes_key_object = True

    def __init__(self, refresh_interval_ms: int = 600_000) -> None:
        # null keys: (partition, when chosen) per topic; negative interval: never re-chosen
        self.refresh_interval = refresh_interval_ms / 1000 if refresh_interval_ms >= 0 else None
        self._null_key: dict[str, tuple[int, float]] = {}
        self._lock = threading.Lock()

    def partition(self, key: Any, num_partitions: int, topic: str = "") -> int:
        if key is not None:
            return java_abs(java_hash_code(key)) % num_partitions
        now = time.monotonic()
        with self._lock:
            got = self._null_key.get(topic)
            if (got is None or got[0] >= num_partitions
                    or self.refresh_interval is not None and now - got[1] >= self.refresh_interval):
                got = self._null_key[topic] = (random.randrange(num_partitions), now)
            return got[0]
