"""Every network worker's open connections, in total and per client address, in shared memory.

Layout in :mod:`appliance.shm.layout` (``CONN_HEADER``, ``CONN_REGION_WORDS``). Each network
worker writes only its own region (one writer per word: no locks); the limits are checked by
summing every region. A worker adds first and checks after (:class:`~appliance.broker.
connection_limits.ConnectionLimits`), so two workers accepting at the same instant can both
back off but never both get in over a limit.
"""

from __future__ import annotations

import mmap
import struct

import numpy as np
import posix_ipc

from appliance.shm.layout import (
    CONN_HEADER,
    CONN_IP_SLOTS,
    CONN_MAGIC,
    CONN_REGION_WORDS,
    CONN_VERSION,
    MAX_WORKERS,
)
from appliance.shm.mapping import attach_mapped, create_mapped, release_mapped

__all__ = ["ConnectionCounts"]


class ConnectionCounts:
    """A mapping of the object: :meth:`create` (supervisor) or :meth:`attach`."""

    def __init__(self, shm: posix_ipc.SharedMemory, buf: mmap.mmap) -> None:
        self._shm = shm
        self._buf = buf
        self.name = shm.name
        words = np.frombuffer(buf, dtype=np.uint64, offset=CONN_HEADER.size,
                              count=MAX_WORKERS * CONN_REGION_WORDS)
        self.regions = words.reshape(MAX_WORKERS, CONN_REGION_WORDS)
        self.totals = self.regions[:, 0]  # a view: each worker's open connections
        # (worker, entry, [high, low, count])
        self.entries = self.regions[:, 8:].reshape(MAX_WORKERS, CONN_IP_SLOTS, 3)

    @classmethod
    def create(cls, name: str) -> ConnectionCounts:
        """Create (exclusively) and zero the object. Raises posix_ipc.ExistentialError."""
        size = CONN_HEADER.size + MAX_WORKERS * CONN_REGION_WORDS * 8
        shm, buf = create_mapped(name, size)
        CONN_HEADER.struct.pack_into(buf, 0, CONN_MAGIC, CONN_VERSION,  # type: ignore[attr-defined]
                                     CONN_IP_SLOTS, MAX_WORKERS)
        return cls(shm, buf)

    @classmethod
    def attach(cls, name: str) -> ConnectionCounts:
        """Map an existing object. Raises posix_ipc.ExistentialError, RuntimeError (layout)."""
        shm, buf = attach_mapped(name)
        magic, version, slots, workers = struct.unpack_from("=IIII", buf, 0)
        if (magic, version, slots, workers) != (CONN_MAGIC, CONN_VERSION, CONN_IP_SLOTS, MAX_WORKERS):
            release_mapped(shm, buf)
            raise RuntimeError(f"{name}: connection counts of version {version}, expected {CONN_VERSION}")
        return cls(shm, buf)

    def close(self) -> None:
        self.regions = self.totals = self.entries = None  # type: ignore[assignment]
        release_mapped(self._shm, self._buf)
