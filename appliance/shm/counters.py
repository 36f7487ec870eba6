"""The broker's shared metrics counters: one POSIX shared-memory object, one slab per worker.

Layout in :mod:`appliance.shm.layout` (``COUNTER_SLAB``). A worker writes only its own slab
(single writer per word, no locks, no atomics); the exporter reads every slab and sums. Reads may
see a count one increment old, never a torn word (aligned 8-byte stores).
"""

from __future__ import annotations

import mmap
import struct

import numpy as np
import posix_ipc

from appliance.shm.layout import (
    COUNTER_PARTITIONS,
    COUNTER_SLAB,
    COUNTERS_HEADER,
    COUNTERS_MAGIC,
    COUNTERS_VERSION,
    MAX_WORKERS,
)
from appliance.shm.mapping import attach_mapped, create_mapped, release_mapped, unlink_mapped

__all__ = ["SharedCounters", "CountersVersionError"]

_SLAB_WORDS = COUNTER_SLAB.size // 8


class CountersVersionError(RuntimeError):
    """The object exists but was made by another layout version."""


class SharedCounters:
    """A mapping of the counters object. :meth:`create` (supervisor) or :meth:`attach`."""

    def __init__(self, shm: posix_ipc.SharedMemory, buf: mmap.mmap) -> None:
        self._shm = shm
        self._buf = buf
        self.name = shm.name
        # every slab as one 2-D array of words: the exporter sums columns with numpy
        self.words = np.frombuffer(buf, dtype=np.uint64, offset=COUNTERS_HEADER.size,
                                   count=MAX_WORKERS * _SLAB_WORDS).reshape(MAX_WORKERS, _SLAB_WORDS)

    @classmethod
    def create(cls, name: str) -> SharedCounters:
        """Create (exclusively) and zero the object. Raises posix_ipc.ExistentialError."""
        size = COUNTERS_HEADER.size + MAX_WORKERS * COUNTER_SLAB.size
        shm, buf = create_mapped(name, size)
        COUNTERS_HEADER.struct.pack_into(  # type: ignore[attr-defined]
            buf, 0, COUNTERS_MAGIC, COUNTERS_VERSION, COUNTER_PARTITIONS, MAX_WORKERS, COUNTER_SLAB.size)
        return cls(shm, buf)

    @classmethod
    def attach(cls, name: str) -> SharedCounters:
        """Map an existing object. Raises posix_ipc.ExistentialError, CountersVersionError."""
        shm, buf = attach_mapped(name)
        magic, version, _, workers, slab = struct.unpack_from("=IIIIQ", buf, 0)
        if (magic, version, workers, slab) != (COUNTERS_MAGIC, COUNTERS_VERSION, MAX_WORKERS,
                                               COUNTER_SLAB.size):
            release_mapped(shm, buf)
            raise CountersVersionError(
                f"{name} has magic {magic:#x} version {version}; this build reads "
                f"{COUNTERS_MAGIC:#x} version {COUNTERS_VERSION}")
        return cls(shm, buf)

    def slab(self, worker_slot: int) -> memoryview:
        """One worker's slab as uint64 words (a memoryview: the cheapest += from Python)."""
        if not 0 <= worker_slot < MAX_WORKERS:
            raise IndexError(f"worker slot {worker_slot} outside 0..{MAX_WORKERS - 1}")
        start = COUNTERS_HEADER.size + worker_slot * COUNTER_SLAB.size
        return memoryview(self._buf)[start:start + COUNTER_SLAB.size].cast("Q")

    def field(self, name: str, workers: list[int]) -> np.ndarray:
        """Field ``name`` summed over the slabs of ``workers`` (a copy)."""
        start = COUNTER_SLAB.offset(name) // 8
        end = start + struct.calcsize("=" + dict(COUNTER_SLAB.fields)[name]) // 8
        return self.words[workers, start:end].sum(axis=0, dtype=np.uint64)

    def reset_partition(self, slot: int) -> None:
        """Zero a partition slot's counters in every slab: a new partition in a reused slot
        starts from 0 (called while the slot is CREATING, before anything can count on it)."""
        for name in ("leo_base", "bytes_in", "bytes_out"):
            self.words[:, COUNTER_SLAB.offset(name) // 8 + slot] = 0

    def close(self) -> None:
        self.words = None  # type: ignore[assignment]
        release_mapped(self._shm, self._buf)

    def unlink(self) -> None:
        unlink_mapped(self._shm)
