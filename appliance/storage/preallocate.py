"""Disk blocks reserved ahead of an active segment's end: a window that moves with the appends,
ahead of every append with the topic key ``preallocate`` on, and ahead of bulk appends only
(BULK_APPEND_BYTES or more at once) with it off, the default.

Why: a write that reaches blocks the file system has not allocated yet pays for that allocation
(ext4: delayed allocation at the write, the extent at write-back). Measured here, ext4 on a
virtio disk, 880 KB writes of 8,000 100-byte records (``perf/bench_record_walk.py``): ~20 ns of
CPU per record appending, ~13 into blocks reserved first. ``perf/bench_ipc.py --override
log.preallocate=true``: the disk worker's append over IPC 33-34 ns per record against 42-43.

Each reservation waits ~0.5 ms of wall time here while the chunked write-back
(``log.writeback.mode``) is writing the file: with a 1 MiB window (a call every append or two)
a lab loop ran at 53 ns per record of wall time against 26-42 without reserving, and the
runner's ipc bulk cell fell from ~18 M to ~15 M records/s; with WINDOW_BYTES (8 MiB) the loop
ran at 18 and the cell at ~19 M. Not ahead of every append by default, as in Kafka: each
active segment that takes an append would hold up to WINDOW_BYTES more of the disk, which for
thousands of partitions is too much to hold back unasked. Ahead of bulk appends it is on by
default: a partition taking appends of BULK_APPEND_BYTES fills a window within a few dozen of
them, and one that stops taking them gives its window back after one idle check
(``LogSegment.give_back_if_idle``, every few seconds). Measured (28 Nov, this machine, a lab
loop of ``perf/bench_ipc.py``'s bulk cells, 8 runs each way, ``log.preallocate=true`` against
``false`` before the bulk rule, whose ~1 MB appends it now reserves for alike): the disk worker
54 against 65 ns per record over IPC, IPC 15.3 against 13.1 M records/s, TCP 4.8 against 4.4 M;
perf/README.md has the ``bench_ipc.py --runs 5`` pairs with the rule in place.

How: fallocate(2) with FALLOC_FL_KEEP_SIZE, which reserves blocks past the end without changing
the file's size: readers, recovery and every tool still see exactly the bytes written. The
reservation past the end is given back (ftruncate to the size) when the segment rolls or is
closed; a crash leaves at most one window reserved, given back at the segment's next roll or
freed with it.

Departure from Kafka: Kafka's ``preallocate`` creates each segment at segment.bytes and trims it
at roll, which with many partitions holds back a whole segment per partition; here it is
WINDOW_BYTES past each append.

A file system without the call (EOPNOTSUPP) is written as before, and so is a nearly full one:
nothing is reserved while less than FREE_MARGIN_BYTES would stay free. A reservation that meets
ENOSPC keeps what it had allocated, so without the margin it would take the last free blocks,
and the first write to a new page of a memory-mapped index file would then fault (SIGBUS)
instead of the append failing with ENOSPC. No state; safe in any process.
"""

from __future__ import annotations

import ctypes
import errno
import os

from appliance.storage import libc

__all__ = ["WINDOW_BYTES", "BULK_APPEND_BYTES", "BULK_RECHECK_BYTES", "FREE_MARGIN_BYTES", "NEVER",
           "reserve", "give_back"]

WINDOW_BYTES = 8 << 20  # each reservation waits ~0.5 ms here (see above): few, larger ones
BULK_APPEND_BYTES = 256 << 10  # preallocate off: appends this large reserve a window (bulk producers)
BULK_RECHECK_BYTES = 1 << 20  # preallocate off: after a smaller append, look again this far on
FREE_MARGIN_BYTES = 32 << 20  # left free for index pages and metadata: see the module docstring
NEVER = 1 << 62  # a reserve-at position no append reaches: nothing to reserve
_FALLOC_FL_KEEP_SIZE = 1  # <linux/falloc.h>
_UNSUPPORTED = (errno.EOPNOTSUPP, errno.ENOSYS, errno.ENODEV, errno.ESPIPE)


# os.posix_fallocate has no KEEP_SIZE
_fallocate = libc.function("fallocate", [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64])


def reserve(fd: int, offset: int, length: int) -> bool | None:
    """Reserve ``length`` bytes of ``fd``'s file from ``offset`` on without changing its size.
    True when reserved; False when not this time (the file system is nearly full); None when
    this file (system) never will."""
    if _fallocate is None:
        return None
    try:
        st = os.fstatvfs(fd)
    except OSError:
        return False
    if st.f_bavail * st.f_frsize < length + FREE_MARGIN_BYTES:
        return False
    if _fallocate(fd, _FALLOC_FL_KEEP_SIZE, offset, length) == 0:
        return True
    return None if libc.last_errno() in _UNSUPPORTED else False


def give_back(fd: int, size: int) -> None:
    """Free the blocks reserved past ``size``, the file's size (ftruncate to the same size does
    that on ext4 and xfs). Raises OSError."""
    os.ftruncate(fd, size)
