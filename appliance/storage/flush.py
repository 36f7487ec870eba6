"""Flush policy (Kafka's flush.messages / flush.ms) and page-cache write-back for spinning disks.

Kafka leaves durability to replication and the OS by default (flush.messages and flush.ms are
Long.MAX). On a JBOD of SATA disks that default lets the page cache pile up gigabytes of dirty
pages, which the kernel then writes in one burst that stalls every writer of the disk. The
``writeback`` mode avoids that: as a segment grows, each completed ``log.writeback.chunk.bytes``
chunk gets asynchronous write-back started (``sync_file_range(SYNC_FILE_RANGE_WRITE)``) and the
chunk before it is waited for, so at most about two chunks per active segment are dirty, and the
disk sees long sequential writes. It is not a durability guarantee (no metadata is synced); the
recovery point only advances on :meth:`PartitionLog.flush`.

Thread-safety: stateless functions; a :class:`ChunkedWriteback` belongs to its segment's writer.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable, Iterable
from typing import Any

from appliance.storage import libc

__all__ = [
    "SYNC_FILE_RANGE_WAIT_BEFORE", "SYNC_FILE_RANGE_WRITE", "SYNC_FILE_RANGE_WAIT_AFTER",
    "sync_file_range", "have_sync_file_range", "ChunkedWriteback", "choose_writeback_mode",
    "flush_due", "flush_segments", "flush_observers", "WRITEBACK_OS", "WRITEBACK_CHUNKED",
]

SYNC_FILE_RANGE_WAIT_BEFORE = 1
SYNC_FILE_RANGE_WRITE = 2
SYNC_FILE_RANGE_WAIT_AFTER = 4

WRITEBACK_OS = "os"
WRITEBACK_CHUNKED = "writeback"


_sync_file_range = libc.function("sync_file_range",
                                 [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint])


def have_sync_file_range() -> bool:
    """True when libc exposes sync_file_range (Linux)."""
    return _sync_file_range is not None


def sync_file_range(fd: int, offset: int, nbytes: int, flags: int) -> None:
    """Call Linux sync_file_range(2). Raises OSError (errno set) on failure or if unavailable."""
    if _sync_file_range is None:
        raise OSError("sync_file_range is not available on this platform")
    if _sync_file_range(fd, offset, nbytes, flags) != 0:
        err = libc.last_errno()
        raise OSError(err, os.strerror(err))


class ChunkedWriteback:
    """Start write-back of each completed chunk of a growing file at once (so the disk streams
    sequentially), and wait only for the chunk that falls ``window_bytes`` behind the head.

    The window lets the page cache absorb bursts at memory speed while dirty data per active
    segment stays bounded; a sustained stream then runs at the disk's rate with no stalls and
    no flush ever writing more than a window at once. Measured reason: waiting on the previous
    chunk (a 2-chunk window) held every append to the disk's ~100 MB/s even for bursts that
    fit easily in memory. ``started`` is the end of the last chunk whose write-back was started.
    Not thread-safe.
    """

    def __init__(self, chunk_bytes: int, window_bytes: int = 0) -> None:
        if chunk_bytes < 4096:
            raise ValueError(f"chunk_bytes must be >= 4096, got {chunk_bytes}")
        self.chunk = chunk_bytes
        self.window_chunks = max(1, window_bytes // chunk_bytes)
        self.started = 0

    def reset(self, position: int = 0) -> None:
        """Start over (new segment, or the file was truncated below ``started``)."""
        self.started = position - position % self.chunk

    def after_append(self, fd: int, size: int) -> int:
        """Called after the file grew to ``size``; returns the number of chunks started.

        Raises OSError if sync_file_range fails.
        """
        n = 0
        while size >= self.started + self.chunk:
            sync_file_range(fd, self.started, self.chunk, SYNC_FILE_RANGE_WRITE)
            behind = self.started - self.window_chunks * self.chunk
            if behind >= 0:
                # the chunk a window behind must be on disk before we dirty more
                sync_file_range(fd, behind, self.chunk, SYNC_FILE_RANGE_WAIT_BEFORE
                                | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER)
            self.started += self.chunk
            n += 1
        return n


def flush_due(unflushed_messages: int, last_flush_ms: int, now_ms: int,
              flush_messages: int, flush_ms: int) -> bool:
    """Kafka's rule: flush when flush.messages are unflushed or flush.ms passed since the last."""
    if unflushed_messages <= 0:
        return False
    return unflushed_messages >= flush_messages or now_ms - last_flush_ms >= flush_ms


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _block_device_dir(path: str) -> str | None:
    """/sys/block/<disk> directory of the disk holding ``path`` (parent disk of a partition)."""
    st = os.stat(path)
    major, minor = os.major(st.st_dev), os.minor(st.st_dev)
    if major == 0:
        return None  # tmpfs, overlay, btrfs subvolume...: no single block device
    sys_dir = f"/sys/dev/block/{major}:{minor}"
    if not os.path.exists(sys_dir):
        return None
    real = os.path.realpath(sys_dir)
    if os.path.exists(os.path.join(real, "partition")):
        real = os.path.dirname(real)
    return real


def choose_writeback_mode(log_dir: str, configured: str) -> tuple[str, str]:
    """(mode, reason) for ``log_dir``: ``os`` or ``writeback``.

    ``configured`` is log.writeback.mode: ``os``/``writeback`` force the mode; ``auto`` picks
    ``writeback`` when the disk reports itself rotational (``queue/rotational`` = 1) and
    sync_file_range exists, else ``os``. The reason names the device and the dirty-page limits.
    """
    if configured in (WRITEBACK_OS, WRITEBACK_CHUNKED):
        if configured == WRITEBACK_CHUNKED and not have_sync_file_range():
            return WRITEBACK_OS, "writeback configured but sync_file_range is unavailable"
        return configured, f"configured log.writeback.mode={configured}"
    if configured != "auto":
        raise ValueError(f"unknown log.writeback.mode {configured!r}")
    dirty = ", ".join(
        f"{k}={_read('/proc/sys/vm/' + k)}"
        for k in ("dirty_bytes", "dirty_ratio", "dirty_background_bytes", "dirty_background_ratio")
    )
    try:
        dev = _block_device_dir(log_dir)
    except OSError as e:
        return WRITEBACK_OS, f"cannot stat {log_dir}: {e}"
    if dev is None:
        return WRITEBACK_OS, f"{log_dir} is not on a block device; {dirty}"
    rot = _read(os.path.join(dev, "queue", "rotational"))
    name = os.path.basename(dev)
    if rot == "1" and have_sync_file_range():
        return WRITEBACK_CHUNKED, f"{name} is rotational; {dirty}"
    return WRITEBACK_OS, f"{name} rotational={rot}; {dirty}"


# called with the seconds each log flush took (the disk worker's metrics; storage knows no more)
flush_observers: list[Callable[[float], None]] = []


def flush_segments(segments: Iterable[Any], from_offset: int, up_to: int) -> None:
    """fsync the segments (and their indexes) holding offsets in [from_offset, up_to): the
    log's flush from its recovery point. Raises KafkaStorageError."""
    started = time.monotonic()
    for seg in segments:
        if seg.next_offset > from_offset and seg.base_offset < up_to:
            seg.flush()
    for observe in flush_observers:
        observe(time.monotonic() - started)
