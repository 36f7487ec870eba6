"""Split a buffer of log entries into runs of one framing: v2 RecordBatches or legacy messages.

A segment of a topic whose ``message.format.version`` changed holds both kinds, and a Fetch
answer for it may too. Both framings start ``offset int64, length int32`` and put the magic
byte at byte 16 of the entry, so a walk over those frames tells the two apart without reading
anything else. Each run then goes to the walker of its kind (:func:`native.scan.scan_batches`
for v2, :func:`native.legacy_decode.scan_legacy` for magic 0/1), which judges it in full; this
walk only finds the boundaries. Where a frame cannot be read (too short, a length that is
negative or runs past the end) the rest of the buffer is one last run of the kind its magic byte
says (v2 when it cannot be read), so that walker reports the precise error or the partial entry.

Cost: one read of 5 bytes per entry; on a v2-only chunk of 16 KiB batches that is ~500 reads
per 8 MiB. Never raises for bad data. Thread-safe; the kernel releases the GIL. Its twin is
:func:`native.legacy_decode_twin.entry_runs_twin`.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from native import legacy_layout as L
from native.big_endian import be_i32
from native.buffers import u8_range

__all__ = ["entry_runs"]

# Both framings: offset int64 then length int32 (what the length does not count) ...
_OVERHEAD = L.LOG_OVERHEAD
# ... and the magic byte at the same place (native.batch_layout.MAGIC_OFFSET is 16 as well).
_MAGIC = L.MAGIC_OFFSET


@njit(nogil=True, cache=True)
def _runs(a, pos, end, starts, legacy):
    """Fill starts/legacy with each run's first byte and kind; returns the number of runs, or
    -1 when the arrays are full (the wrapper grows them and calls again from the start)."""
    n = 0
    cap = starts.shape[0]
    while pos < end:
        if end - pos <= _MAGIC:
            kind = legacy[n - 1] if n > 0 else 0  # too short to tell: the run it ends
        else:
            kind = 1 if a[pos + _MAGIC] <= 1 else 0
        if n == 0 or legacy[n - 1] != kind:
            if n == cap:
                return -1
            starts[n] = pos
            legacy[n] = kind
            n += 1
        if end - pos <= _MAGIC:
            break
        size = be_i32(a, pos + L.LOG_OVERHEAD - 4)
        if size < 0 or size > end - pos - _OVERHEAD:
            break  # the rest is this run's: its walker says what is wrong
        pos += _OVERHEAD + size
    return n


def entry_runs(buf: object, start: int = 0, end: int = -1) -> list[tuple[int, int, bool]]:
    """(run start, run end, legacy) for the runs of ``buf[start:end]``, in order; legacy is
    True for magic 0/1 messages. An empty range gives no run. Raises ValueError for a bad
    range, never for bad data."""
    a, s, e = u8_range(buf, start, end)
    cap = 4
    while True:
        starts = np.empty(cap, np.int64)
        legacy = np.empty(cap, np.uint8)
        n = _runs(a, s, e, starts, legacy)
        if n >= 0:
            break
        cap *= 4
    bounds = [int(x) for x in starts[:n]] + [e]
    return [(bounds[i], bounds[i + 1], bool(legacy[i])) for i in range(n)]
