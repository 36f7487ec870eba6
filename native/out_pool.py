"""Output arrays for a loop of kernel calls, handed out again once nothing else holds them.

A reader decodes chunk after chunk into fresh arrays, and fresh memory costs a page fault (and
the kernel zeroing the page) on first touch: with 8 MiB chunks of 100-byte records that was a
third of the decode kernel's time in a profile of a Spark worker (perf/README.md). The arrays of
a chunk end up inside the Arrow batch the reader yields, which its consumer may keep (a list of
batches) or drop (Spark's worker writes each to the JVM and lets it go). So an array is reused
only when the pool's own reference is the last one: the Arrow buffers, numpy views and anything
exported from them all hold a Python reference to the array they came from, so
``sys.getrefcount`` tells whether anyone still can see it. Each name keeps a ring of
``depth`` arrays: the consumer's loop variable still holds the previous batch while the next
one is made, so two entries of a ring are usually in use.

Not thread-safe: one pool per reader (per task).
"""

from __future__ import annotations

import sys

import numpy as np

__all__ = ["OutputPool"]


def _free_refs() -> int:
    """What ``sys.getrefcount`` says of a ring entry no one else holds, read the way take()
    reads it (3 on CPython 3.11: the list slot, the local name, the call's argument; measured
    rather than assumed, as interpreters may count the local name differently)."""
    ring = [np.empty(1)]
    for i in range(len(ring)):
        arr = ring[i]
        return sys.getrefcount(arr)
    raise AssertionError("unreachable")


_FREE_REFS = _free_refs()

# Sizes vary a little from chunk to chunk (whole batches per chunk): room to spare so a
# slightly larger chunk does not replace the array.
_HEADROOM = 1.125


class OutputPool:
    """Rings of reusable arrays by name (one name per output of a kernel)."""

    def __init__(self, depth: int = 3) -> None:
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        self.depth = depth
        self._rings: dict[str, list[np.ndarray]] = {}
        self.reused = 0  # arrays handed out again
        self.allocated = 0  # arrays made (the first ones, and whenever every entry was held)

    def take(self, name: str, size: int, dtype: np.dtype) -> np.ndarray:
        """An uninitialised array of ``size`` elements of ``dtype`` that no one else holds (a
        view of a ring entry, or a fresh array). Its contents are whatever was there before."""
        ring = self._rings.setdefault(name, [])
        dtype = np.dtype(dtype)
        for i in range(len(ring)):
            arr = ring[i]
            if sys.getrefcount(arr) > _FREE_REFS:
                continue  # still inside a batch someone holds
            if arr.shape[0] >= size and arr.dtype == dtype:
                self.reused += 1
                return arr[:size]
            del arr
            ring[i] = fresh = np.empty(int(size * _HEADROOM) + 1, dtype)  # too small: replace
            self.allocated += 1
            return fresh[:size]
        fresh = np.empty(int(size * _HEADROOM) + 1, dtype)
        self.allocated += 1
        if len(ring) < self.depth:
            ring.append(fresh)
        return fresh[:size]
