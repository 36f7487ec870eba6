"""Cluster mode's metadata cache in shared memory (Kafka's MetadataCache): every topic and
partition of the cluster with its leader and leader epoch, as the controller's UpdateMetadata
said — not only the partitions this broker holds a replica of.

Written only by the cluster worker (:meth:`MetadataCache.publish`, after each UpdateMetadata it
applies), under the header's seqlock; read by the network workers and the disk workers, each of
which keeps the decoded view until the sequence number moves, so a lookup costs one aligned
8-byte read. Layouts: ``METADATA_*`` in :mod:`appliance.shm.layout`.
"""

from __future__ import annotations

import mmap
import struct
import time
from collections.abc import Iterable, Mapping

import posix_ipc

from appliance.shm.layout import (
    METADATA_BYTES,
    METADATA_HEADER,
    METADATA_MAGIC,
    METADATA_PARTITION,
    METADATA_TOPIC,
    METADATA_VERSION,
)
from appliance.shm.mapping import attach_mapped, create_mapped, release_mapped

__all__ = ["MetadataCache", "ClusterTopics", "PartitionLeader", "MetadataTooLarge", "from_states"]

_HEAD = METADATA_HEADER.struct  # type: ignore[attr-defined]
_TOPIC = METADATA_TOPIC.struct  # type: ignore[attr-defined]
_PART = METADATA_PARTITION.struct  # type: ignore[attr-defined]
_BODY = METADATA_HEADER.size
_SEQ_WORD = METADATA_HEADER.offset("seq") // 8
_FENCED_WORD = METADATA_HEADER.offset("fenced") // 8
assert METADATA_HEADER.offset("seq") % 8 == 0 and METADATA_HEADER.offset("fenced") % 8 == 0
# body_bytes and topic_count, written together after the body (never the seq word with them)
_COUNTS_AT = METADATA_HEADER.offset("body_bytes")
_COUNTS = struct.Struct("=QQ")
assert METADATA_HEADER.offset("topic_count") == _COUNTS_AT + 8 and _BODY == _COUNTS_AT + _COUNTS.size
_READ_TRIES = 1000  # a writer rewrites the body in well under a millisecond

# (leader, leader epoch) of one partition
PartitionLeader = tuple[int, int]
# topic -> partition -> (leader, leader epoch)
ClusterTopics = Mapping[str, Mapping[int, PartitionLeader]]


class MetadataTooLarge(ValueError):
    """The cluster's metadata does not fit the object (METADATA_BYTES)."""


def encode(topics: ClusterTopics) -> bytes:
    """The body for ``topics``: per topic its record, its name, its partitions."""
    out = bytearray()
    for name, parts in topics.items():
        raw = name.encode()
        out += _TOPIC.pack(len(raw), len(parts)) + raw
        for p, (leader, epoch) in parts.items():
            out += _PART.pack(p, leader, epoch)
    return bytes(out)


def decode(body: bytes | memoryview, topic_count: int) -> dict[str, dict[int, PartitionLeader]]:
    topics: dict[str, dict[int, PartitionLeader]] = {}
    pos = 0
    for _ in range(topic_count):
        name_len, count = _TOPIC.unpack_from(body, pos)
        pos += _TOPIC.size
        name = bytes(body[pos:pos + name_len]).decode()
        pos += name_len
        end = pos + count * _PART.size
        topics[name] = {p: (leader, epoch) for p, leader, epoch in _PART.iter_unpack(body[pos:end])}
        pos = end
    return topics


class MetadataCache:
    def __init__(self, shm: posix_ipc.SharedMemory, buf: mmap.mmap) -> None:
        self._shm = shm
        self._buf = buf
        # the seqlock word as one aligned 8-byte store (struct.pack_into zero-fills its target
        # first, so a reader could see 0 mid-write: docs/architecture.md, Processes)
        self._words = memoryview(buf)[:_BODY].cast("Q")
        self._seen = -1
        self._topics: dict[str, dict[int, PartitionLeader]] = {}

    @classmethod
    def create(cls, name: str, size: int = METADATA_BYTES) -> MetadataCache:
        cache = cls(*create_mapped(name, size))
        _HEAD.pack_into(cache._buf, 0, METADATA_MAGIC, METADATA_VERSION, 0, 0, 0, 0)
        return cache

    @classmethod
    def attach(cls, name: str) -> MetadataCache:
        cache = cls(*attach_mapped(name))
        magic, version = _HEAD.unpack_from(cache._buf, 0)[:2]
        if magic != METADATA_MAGIC or version != METADATA_VERSION:
            cache.close()
            raise ValueError(f"{name}: not a metadata cache of version {METADATA_VERSION} "
                             f"(magic {magic:#x}, version {version})")
        return cache

    def close(self) -> None:
        self._words.release()
        release_mapped(self._shm, self._buf)

    # -- the cluster worker ------------------------------------------------------------------

    def publish(self, topics: ClusterTopics) -> None:
        """Replace the whole view with ``topics`` (the single writer: the cluster worker)."""
        body = encode(topics)
        if _BODY + len(body) > len(self._buf):
            raise MetadataTooLarge(f"the cluster's metadata takes {len(body)} bytes; the cache "
                                   f"holds {len(self._buf) - _BODY}")
        seq = self._words[_SEQ_WORD]
        self._words[_SEQ_WORD] = seq + 1  # odd: readers wait
        self._buf[_BODY:_BODY + len(body)] = body
        _COUNTS.pack_into(self._buf, _COUNTS_AT, len(body), len(topics))
        self._words[_SEQ_WORD] = seq + 2

    def set_fenced(self, fenced: bool) -> None:
        """One aligned 8-byte store, outside the seqlock: it is a word of its own."""
        self._words[_FENCED_WORD] = 1 if fenced else 0

    # -- readers -------------------------------------------------------------------------------

    @property
    def fenced(self) -> bool:
        """Whether this broker's ZooKeeper session is in doubt (see cluster/session_fence.py)."""
        return self._words[_FENCED_WORD] != 0

    def topics(self) -> dict[str, dict[int, PartitionLeader]]:
        """The cluster's topics now (decoded once per change; callers must not modify it)."""
        seq = self._words[_SEQ_WORD]
        if seq == self._seen:
            return self._topics
        for _ in range(_READ_TRIES):
            seq = self._words[_SEQ_WORD]
            if seq & 1:
                time.sleep(0)
                continue
            _, _, _, _, body_bytes, topic_count = _HEAD.unpack_from(self._buf, 0)
            body = self._buf[_BODY:_BODY + min(body_bytes, len(self._buf) - _BODY)]
            if self._words[_SEQ_WORD] != seq:
                continue
            self._topics = decode(body, topic_count)
            self._seen = seq
            break
        return self._topics

    @property
    def published(self) -> bool:
        """Whether the cluster worker has published anything yet (its first UpdateMetadata)."""
        return self._words[_SEQ_WORD] != 0


def from_states(states: Iterable[tuple[str, int, int, int]]) -> dict[str, dict[int, PartitionLeader]]:
    """(topic, partition, leader, epoch) rows grouped as :meth:`MetadataCache.publish` takes them."""
    topics: dict[str, dict[int, PartitionLeader]] = {}
    for topic, partition, leader, epoch in states:
        topics.setdefault(topic, {})[partition] = (leader, epoch)
    return topics
