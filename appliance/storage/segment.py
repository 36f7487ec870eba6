"""One log segment: the ``.log`` file of record batches plus its offset and time indexes.

:meth:`LogSegment.open` is the only factory (Kafka's ``LogSegment.open``). File names are the
segment's base offset in 20 digits; ``.deleted`` marks a segment waiting for removal.

Reads go through a read-only mmap of the log file that is remapped (grown) when a read needs
bytes past its end; the native batch scan walks headers in it, so no batch is copied to find a
fetch's boundaries.

Thread-safety: none. A writable segment belongs to the partition's single writer; read-only
segments (``writable=False``) belong to one reader thread.
"""

from __future__ import annotations

import mmap
import os
from typing import Any, NamedTuple

import numpy as np

from appliance.errors import KafkaStorageError
from appliance.storage.flush import ChunkedWriteback
from appliance.storage.offset_index import OffsetIndex
from appliance.storage.time_index import NO_TIMESTAMP, TimeIndex
from native.scan import SCAN_LIMIT, ScanResult, scan_batches

__all__ = [
    "LogSegment", "BatchLocation", "RecoveryResult", "segment_file_name", "parse_segment_file_name",
    "LOG_SUFFIX", "INDEX_SUFFIX", "TIME_INDEX_SUFFIX", "DELETED_SUFFIX", "CLEANED_SUFFIX",
    "SWAP_SUFFIX", "SEGMENT_SUFFIXES",
]

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)
INT32_MAX = 0x7FFFFFFF

# Batches walked per native call while looking for an offset: enough to cover an index interval
# of small batches in one call, few enough that a lookup never walks far past its target.
_TRANSLATE_CHUNK = 256


def segment_file_name(base_offset: int, suffix: str) -> str:
    """``00000000000000000042.log`` for base offset 42 and suffix ``.log``."""
    return f"{base_offset:020d}{suffix}"


def parse_segment_file_name(name: str) -> tuple[int, str] | None:
    """(base offset, suffix) of a segment file name, None if it is not one."""
    stem, dot, rest = name.partition(".")
    if not dot or len(stem) != 20 or not stem.isdigit():
        return None
    return int(stem), "." + rest


class BatchLocation(NamedTuple):
    """Where one batch sits in a segment's log file."""

    position: int
    base_offset: int
    last_offset: int
    size: int
    max_timestamp: int


class RecoveryResult(NamedTuple):
    """What :meth:`LogSegment.recover` found: valid bytes, bytes cut and why the scan stopped."""

    valid_bytes: int
    truncated_bytes: int
    stop_reason: int
    batches: int


class LogSegment:
    """A segment's files and cached state (size, next offset, largest timestamp).

    Attributes: ``base_offset``, ``dir``, ``log_path``, ``size`` (bytes of the log file known to
    hold batches), ``next_offset`` (last offset + 1, or base offset when empty), ``max_timestamp``
    and ``offset_of_max_timestamp`` (largest batch max timestamp and where it first appeared),
    ``offset_index``, ``time_index``, ``deleted``.
    """

    def __init__(self, dir_: str, base_offset: int, config: Any, *, writable: bool,
                 fd: int, size: int, suffix: str = "") -> None:
        self.dir = dir_
        self.base_offset = base_offset
        self.apply_config(config)
        self.writable = writable
        self.suffix = suffix
        self.log_path = os.path.join(dir_, segment_file_name(base_offset, LOG_SUFFIX) + suffix)
        self.fd = fd
        self.size = size
        self.deleted = False
        self.next_offset = base_offset
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = base_offset
        self.bytes_since_last_index_entry = 0
        self.first_append_ms: int | None = None
        self.roll_jitter_ms = 0
        self.writeback: ChunkedWriteback | None = None
        self._dmm: mmap.mmap | None = None
        self._dmm_len = 0
        self.offset_index: OffsetIndex
        self.time_index: TimeIndex
        self.index_problem: str | None = None

    def apply_config(self, config: Any) -> None:
        """Use ``config`` (a TopicConfig, or None for read-only segments) from now on; the
        values the append path needs are copied into plain attributes (measured: attribute
        lookups through TopicConfig cost ~1 us each, several per append)."""
        self.config = config
        if config is not None:
            self._segment_bytes = int(config.segment_bytes)
            self._segment_ms = int(config.segment_ms)
            self._interval = int(config.index_interval_bytes)

    # -- opening ----------------------------------------------------------------------------

    @classmethod
    def open(cls, dir_: str, base_offset: int, config: Any, *, create: bool = False,
             writable: bool = True, suffix: str = "") -> LogSegment:
        """Open (or with ``create`` make) the segment ``base_offset`` in ``dir_``.

        ``config`` is a TopicConfig (segment.index.bytes, index.interval.bytes are used).
        Missing index files are created empty and ``index_problem`` says so (the owner then
        rebuilds them with :meth:`recover`); an index that fails its sanity check is reported
        the same way. ``next_offset`` is found by walking from the last index entry.
        Raises KafkaStorageError (I/O failure, or ``create`` on a non-empty existing file).
        """
        log_path = os.path.join(dir_, segment_file_name(base_offset, LOG_SUFFIX) + suffix)
        try:
            if writable:
                flags = os.O_RDWR | os.O_APPEND | (os.O_CREAT if create else 0)
                fd = os.open(log_path, flags, 0o644)
            else:
                fd = os.open(log_path, os.O_RDONLY)
            size = os.fstat(fd).st_size
        except OSError as e:
            raise KafkaStorageError(f"cannot open segment {log_path}: {e}") from e
        if create and size:
            os.close(fd)
            raise KafkaStorageError(f"segment {log_path} already exists and is not empty")
        seg = cls(dir_, base_offset, config, writable=writable, fd=fd, size=size, suffix=suffix)
        try:
            seg._open_indexes(create)
            if size:
                seg._load_tail_state()
        except (OSError, ValueError) as e:
            seg.close()
            raise KafkaStorageError(f"cannot open indexes of {log_path}: {e}") from e
        return seg

    def _index_path(self, suffix: str) -> str:
        return os.path.join(self.dir, segment_file_name(self.base_offset, suffix) + self.suffix)

    def _open_indexes(self, create: bool) -> None:
        ipath, tpath = self._index_path(INDEX_SUFFIX), self._index_path(TIME_INDEX_SUFFIX)
        missing = [p for p in (ipath, tpath) if not os.path.exists(p)]
        # A reader cannot rebuild a missing index: it walks the log from position 0 instead.
        max_bytes = int(self.config.segment_index_bytes) if self.config is not None else 0
        if self.writable or os.path.exists(ipath):
            self.offset_index = OffsetIndex(ipath, self.base_offset, max_bytes, writable=self.writable)
        else:
            self.offset_index = _EmptyOffsetIndex(self.base_offset)  # type: ignore[assignment]
        if self.writable or os.path.exists(tpath):
            self.time_index = TimeIndex(tpath, self.base_offset, max_bytes, writable=self.writable)
        else:
            self.time_index = _EmptyTimeIndex(self.base_offset)  # type: ignore[assignment]
        if missing and not create and self.size:
            self.index_problem = "missing " + ", ".join(os.path.basename(p) for p in missing)
        elif self.writable:
            for idx in (self.offset_index, self.time_index):
                reason = idx.sanity_check(self.size)
                if reason:
                    self.index_problem = f"{os.path.basename(idx.path)}: {reason}"
                    break

    def _load_tail_state(self) -> None:
        """next_offset from a walk starting at the last offset-index entry; max timestamp from
        the time index's last entry (Kafka keeps it there when the segment closes)."""
        _, pos = self.offset_index.last_entry() if self.index_problem is None else (0, 0)
        if pos >= self.size:
            pos = 0
        r = self._scan(pos, self.size, verify_crc=False)
        if r.count:
            self.next_offset = int(r.last_offsets[r.count - 1]) + 1
        ts, off = self.time_index.last_entry()
        if ts > self.max_timestamp:
            self.max_timestamp, self.offset_of_max_timestamp = ts, off
        # Batches after the last time-index entry of an active segment are not indexed.
        for i in range(r.count):
            if int(r.max_timestamps[i]) > self.max_timestamp:
                self.max_timestamp = int(r.max_timestamps[i])
                self.offset_of_max_timestamp = int(r.last_offsets[i])

    # -- data access ------------------------------------------------------------------------

    def refresh_size(self) -> int:
        """Read-only segments: pick up bytes the writer appended (fstat). Returns size."""
        if not self.writable:
            self.size = os.fstat(self.fd).st_size
        return self.size

    def _data(self, needed: int) -> mmap.mmap | bytes:
        """A buffer covering at least [0, needed) of the log file (remapped when too short)."""
        if needed <= 0:
            return b""
        if self._dmm is None or self._dmm_len < needed:
            if self._dmm is not None:
                self._dmm.close()
            self._dmm = mmap.mmap(self.fd, self.size, access=mmap.ACCESS_READ)
            self._dmm_len = self.size
        return self._dmm

    def _unmap_data(self) -> None:
        if self._dmm is not None:
            self._dmm.close()
            self._dmm = None
            self._dmm_len = 0

    def _scan(self, start: int, end: int, *, verify_crc: bool, max_batches: int = -1) -> ScanResult:
        buf = self._data(end)
        return scan_batches(buf, start, end, verify_crc=verify_crc, max_batches=max_batches)

    def translate_offset(self, offset: int, start_position: int = 0) -> BatchLocation | None:
        """The first batch whose last offset >= ``offset`` (index floor + forward walk), None if
        the segment has no such batch."""
        _, pos = self.offset_index.lookup(offset)
        pos = max(pos, start_position)
        if pos >= self.size:
            pos = start_position  # a stale or damaged entry: walk from the start instead
        while pos < self.size:
            r = self._scan(pos, self.size, verify_crc=False, max_batches=_TRANSLATE_CHUNK)
            if r.count == 0:
                return None
            k = int(np.searchsorted(r.last_offsets[:r.count], offset, side="left"))
            if k < r.count:
                return BatchLocation(int(r.positions[k]), int(r.base_offsets[k]),
                                     int(r.last_offsets[k]), int(r.sizes[k]),
                                     int(r.max_timestamps[k]))
            if r.stop_reason != SCAN_LIMIT:
                return None
            pos = r.stop_position
        return None

    def read(self, offset: int, max_bytes: int, max_offset: int,
             min_one_batch: bool = True) -> tuple[int, int, int] | None:
        """(position, length, first batch base offset) of whole batches from the one holding
        ``offset``, at most ``max_bytes`` (or one batch if ``min_one_batch``), none with a base
        offset >= ``max_offset``. None when there is nothing to return."""
        loc = self.translate_offset(offset)
        if loc is None or loc.base_offset >= max_offset:
            return None
        end = min(self.size, loc.position + max(0, max_bytes))
        r = self._scan(loc.position, end, verify_crc=False)
        k = int(np.searchsorted(r.base_offsets[:r.count], max_offset, side="left"))
        if k == 0:
            if not min_one_batch:
                return None
            return loc.position, loc.size, loc.base_offset
        length = int(r.positions[k - 1]) + int(r.sizes[k - 1]) - loc.position
        return loc.position, length, loc.base_offset

    def batch_bytes(self, loc: BatchLocation) -> bytes:
        """A copy of one batch's bytes."""
        return bytes(self._data(loc.position + loc.size)[loc.position:loc.position + loc.size])

    def batches_from(self, position: int, end: int | None = None) -> ScanResult:
        """Headers of every batch in [position, end) (no CRC check)."""
        return self._scan(position, self.size if end is None else end, verify_crc=False)

    def find_offset_by_timestamp(self, timestamp: int, start_offset: int) -> BatchLocation | None:
        """First batch with max timestamp >= ``timestamp`` and last offset >= ``start_offset``."""
        _, ts_offset = self.time_index.lookup(timestamp)
        _, pos = self.offset_index.lookup(max(ts_offset, start_offset))
        if pos >= self.size:
            pos = 0
        while pos < self.size:
            r = self._scan(pos, self.size, verify_crc=False, max_batches=_TRANSLATE_CHUNK)
            if r.count == 0:
                return None
            ok = np.flatnonzero((r.max_timestamps[:r.count] >= timestamp)
                                & (r.last_offsets[:r.count] >= start_offset))
            if ok.size:
                k = int(ok[0])
                return BatchLocation(int(r.positions[k]), int(r.base_offsets[k]),
                                     int(r.last_offsets[k]), int(r.sizes[k]),
                                     int(r.max_timestamps[k]))
            if r.stop_reason != SCAN_LIMIT:
                return None
            pos = r.stop_position
        return None

    @property
    def largest_timestamp(self) -> int:
        """Largest batch timestamp; the file's mtime when no batch carries one (Kafka)."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return int(os.fstat(self.fd).st_mtime * 1000)

    # -- writing ----------------------------------------------------------------------------

    def should_roll(self, append_bytes: int, append_batches: int, last_offset: int,
                    now_ms: int) -> str | None:
        """Why this (non-empty) segment must roll before an append, or None."""
        if self.size == 0:
            return None
        if self.size > self._segment_bytes - append_bytes:
            return f"segment.bytes {self._segment_bytes} would be exceeded"
        if (self.first_append_ms is not None
                and now_ms - self.first_append_ms > self._segment_ms - self.roll_jitter_ms):
            return f"segment.ms {self._segment_ms} (jitter {self.roll_jitter_ms}) elapsed"
        if self.offset_index.is_full or self.time_index.is_full:
            return "index full"
        if last_offset - self.base_offset > INT32_MAX:
            return "relative offset overflow"
        return None

    def append(self, data: memoryview, rel_positions: list[int], sizes: list[int],
               last_offsets: list[int], max_timestamps: list[int], now_ms: int) -> int:
        """Write ``data`` (whole batches) with one write call, then index its batches.

        The per-batch lists describe the batches in ``data``. Returns the file position the
        data starts at. Raises KafkaStorageError on I/O failure (the file is cut back first).
        """
        start = self.size
        try:
            n = os.write(self.fd, data)
            while n < len(data):  # regular files write fully unless interrupted or ENOSPC
                n += os.write(self.fd, data[n:])
        except OSError as e:
            try:
                os.ftruncate(self.fd, start)
            except OSError:
                pass
            raise KafkaStorageError(f"write to {self.log_path} failed: {e}") from e
        if start == 0 and self.first_append_ms is None:
            self.first_append_ms = now_ms
        self.size = start + len(data)
        if len(sizes) >= 64:  # a large request or IPC hand-off: index it with array operations
            self._index_batches_np(np.asarray(rel_positions, np.int64) + start,
                                   np.asarray(sizes, np.int64), np.asarray(last_offsets, np.int64),
                                   np.asarray(max_timestamps, np.int64))
        else:
            self._index_batches(start, rel_positions, sizes, last_offsets, max_timestamps)
        self.next_offset = last_offsets[-1] + 1
        if self.writeback is not None:
            try:
                self.writeback.after_append(self.fd, self.size)
            except OSError as e:
                raise KafkaStorageError(f"writeback of {self.log_path} failed: {e}") from e
        return start

    def _index_batches(self, start: int, rel_positions: list[int], sizes: list[int],
                       last_offsets: list[int], max_timestamps: list[int]) -> None:
        """Kafka's rule: a batch gets an offset-index entry when more than index.interval.bytes
        were appended since the last entry; the time index then records the max timestamp."""
        interval = self._interval
        oi, ti = self.offset_index, self.time_index
        since = self.bytes_since_last_index_entry
        max_ts, max_ts_off = self.max_timestamp, self.offset_of_max_timestamp
        for i in range(len(sizes)):
            ts = max_timestamps[i]
            if ts > max_ts:
                max_ts, max_ts_off = ts, last_offsets[i]
            if since > interval:
                if not oi.is_full:
                    oi.append(last_offsets[i], start + rel_positions[i])
                if not ti.is_full and max_ts >= 0:
                    ti.maybe_append(max_ts, max_ts_off)
                since = 0
            since += sizes[i]
        self.bytes_since_last_index_entry = since
        self.max_timestamp, self.offset_of_max_timestamp = max_ts, max_ts_off

    def _index_batches_np(self, positions: np.ndarray, sizes: np.ndarray,
                          last_offsets: np.ndarray, max_timestamps: np.ndarray) -> None:
        """:meth:`_index_batches` for many batches at file positions ``positions``, vectorized
        when every batch is larger than index.interval.bytes (then every batch after the first
        gets an entry); otherwise the per-batch loop.

        Measured (perf/bench_storage.py): the loop indexed 16-KiB batches at ~1.5 GB/s, which
        made it, not the CRC scan (~13 GB/s), the limit of recovery.
        """
        interval = self._interval
        n = len(sizes)
        oi, ti = self.offset_index, self.time_index
        if n < 64 or int(sizes.min()) <= interval:
            self._index_batches(0, (positions - 0).tolist(), sizes.tolist(),
                                last_offsets.tolist(), max_timestamps.tolist())
            return
        lo = last_offsets.astype(np.int64)
        ts = max_timestamps.astype(np.int64)
        first = 0 if self.bytes_since_last_index_entry > interval else 1
        # running max timestamp and the last offset of the batch that first reached it
        cm = np.maximum.accumulate(np.maximum(ts, self.max_timestamp))
        rises = np.empty(n, dtype=bool)
        rises[0] = cm[0] > self.max_timestamp
        rises[1:] = cm[1:] > cm[:-1]
        src = np.where(rises, np.arange(n), -1)
        src = np.maximum.accumulate(src)
        off_of_max = np.where(src >= 0, lo[np.maximum(src, 0)], self.offset_of_max_timestamp)
        idx = np.arange(first, n)
        k = min(len(idx), oi.max_entries - oi.entries)
        if k > 0:
            ent = np.empty(k, dtype=oi.DTYPE)
            ent["rel"] = lo[idx[:k]] - self.base_offset
            ent["pos"] = positions[idx[:k]]
            oi._write_entries(ent)
        # time index: an entry wherever the running max grew since the previous entry
        t_ts, t_off = cm[idx], off_of_max[idx]
        keep = t_ts >= 0
        if len(t_ts):
            grew = np.empty(len(t_ts), dtype=bool)
            # maybe_append's rule: only a timestamp above the last entry's makes an entry
            grew[0] = not ti.entries or t_ts[0] > ti.last_entry()[0]
            grew[1:] = t_ts[1:] > t_ts[:-1]
            keep &= grew
        t_ts, t_off = t_ts[keep], t_off[keep]
        k = min(len(t_ts), ti.max_entries - 1 - ti.entries)
        if k > 0:
            ent = np.empty(k, dtype=ti.DTYPE)
            ent["ts"] = t_ts[:k]
            ent["rel"] = t_off[:k] - self.base_offset
            ti._write_entries(ent)
        self.bytes_since_last_index_entry = int(sizes[-1])
        self.max_timestamp = int(cm[-1])
        self.offset_of_max_timestamp = int(off_of_max[-1])

    def on_become_inactive(self) -> None:
        """Roll: record the final max timestamp in the time index and trim both indexes."""
        if self.max_timestamp >= 0 and self.time_index.entries < self.time_index.max_entries:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp,
                                         skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        self.writeback = None

    def resize_indexes(self, size: int) -> None:
        """Grow the indexes back to ``size`` (the active segment's preallocation)."""
        self.offset_index.resize(size)
        self.time_index.resize(size)

    def recover(self, max_batch_size: int = 1 << 30) -> RecoveryResult:
        """Walk every batch with CRC checks, cut the file at the first invalid or partial batch
        and rebuild both indexes from the valid batches (Kafka's LogSegment.recover).

        Raises KafkaStorageError on I/O failure.
        """
        size_before = self.size
        oi, ti = self.offset_index, self.time_index
        oi.reset()
        ti.reset()
        max_idx = int(self.config.segment_index_bytes)
        oi.resize(max_idx)
        ti.resize(max_idx)
        self.bytes_since_last_index_entry = 0
        self.max_timestamp, self.offset_of_max_timestamp = NO_TIMESTAMP, self.base_offset
        if size_before:
            buf = self._data(size_before)
            r = scan_batches(buf, 0, size_before, verify_crc=True,
                             expect_offset=self.base_offset, max_batch_size=max_batch_size)
        else:
            r = scan_batches(b"", 0, 0)
        valid = int(r.stop_position)
        n = int(np.count_nonzero(r.positions[:r.count] < valid))
        if valid < size_before:
            self._unmap_data()
            try:
                os.ftruncate(self.fd, valid)
            except OSError as e:
                raise KafkaStorageError(f"cannot truncate {self.log_path}: {e}") from e
        self.size = valid
        if n:
            self._index_batches_np(r.positions[:n], r.sizes[:n], r.last_offsets[:n],
                                   r.max_timestamps[:n])
            self.next_offset = int(r.last_offsets[n - 1]) + 1
        else:
            self.next_offset = self.base_offset
        self.index_problem = None
        if self.writeback is not None:
            self.writeback.reset(valid)
        return RecoveryResult(valid, size_before - valid, int(r.stop_reason), n)

    def truncate_to(self, offset: int) -> int:
        """Drop every batch whose last offset >= ``offset`` (the whole batch holding ``offset``).

        Returns the bytes removed. Raises KafkaStorageError on I/O failure.
        """
        loc = self.translate_offset(offset)
        if loc is None:
            return 0
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        removed = self.size - loc.position
        self._unmap_data()
        try:
            os.ftruncate(self.fd, loc.position)
        except OSError as e:
            raise KafkaStorageError(f"cannot truncate {self.log_path}: {e}") from e
        self.size = loc.position
        self.bytes_since_last_index_entry = 0
        self.max_timestamp, self.offset_of_max_timestamp = NO_TIMESTAMP, self.base_offset
        self.next_offset = self.base_offset
        if self.size:
            self._load_tail_state()
        else:
            self.first_append_ms = None
        if self.writeback is not None:
            self.writeback.reset(self.size)
        return removed

    def flush(self) -> None:
        """fsync the log file and msync both indexes. Raises KafkaStorageError."""
        try:
            os.fsync(self.fd)
            self.offset_index.flush()
            self.time_index.flush()
        except OSError as e:
            raise KafkaStorageError(f"flush of {self.log_path} failed: {e}") from e

    # -- lifecycle --------------------------------------------------------------------------

    def paths(self) -> list[str]:
        return [self.log_path, self.offset_index.path, self.time_index.path]

    def rename_to_deleted(self) -> None:
        """Add ``.deleted`` to all three file names; open descriptors keep working."""
        if self.deleted:
            return
        new_log = self.log_path + DELETED_SUFFIX
        os.rename(self.log_path, new_log)
        self.log_path = new_log
        for idx in (self.offset_index, self.time_index):
            if os.path.exists(idx.path):
                idx.rename(idx.path + DELETED_SUFFIX)
        self.deleted = True

    def change_suffix(self, new_suffix: str) -> None:
        """Rename the three files from the current suffix (``.cleaned``, ``.swap`` or none) to
        ``new_suffix``; open descriptors keep working. The indexes go first and the log file
        last, so a log file carrying a suffix means its indexes were renamed before it (the
        cleaner's crash recovery relies on this). Raises OSError."""
        old_suffix = self.suffix
        for idx in (self.offset_index, self.time_index):
            path = getattr(idx, "path", "")
            if path and os.path.exists(path):
                stem = path[:len(path) - len(old_suffix)] if old_suffix else path
                idx.rename(stem + new_suffix)
        stem = self.log_path[:len(self.log_path) - len(old_suffix)] if old_suffix else self.log_path
        os.rename(self.log_path, stem + new_suffix)
        self.log_path = stem + new_suffix
        self.suffix = new_suffix

    def delete_files(self) -> None:
        """Close and unlink all three files (missing ones are fine)."""
        self.close(trim=False)
        for p in self.paths():
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass

    def close(self, trim: bool = True) -> None:
        """Close the files; a writable segment records its final time-index entry and trims its
        indexes first (Kafka's close). Idempotent."""
        if self.fd < 0:
            return
        if self.writable and trim and not self.deleted:
            try:
                self.on_become_inactive()
            except (OSError, ValueError):
                pass
        self._unmap_data()
        self.offset_index.close(trim=trim and self.writable)
        self.time_index.close(trim=trim and self.writable)
        os.close(self.fd)
        self.fd = -1

    def __repr__(self) -> str:
        return (f"LogSegment(base={self.base_offset}, size={self.size}, "
                f"next_offset={self.next_offset}, path={self.log_path!r})")


class _EmptyOffsetIndex:
    """Stand-in for a missing index file of a read-only segment: every lookup says position 0."""

    entries = 0
    is_full = True

    def __init__(self, base_offset: int) -> None:
        self.base_offset = base_offset
        self.path = ""

    def lookup(self, target: int) -> tuple[int, int]:
        return self.base_offset, 0

    def last_entry(self) -> tuple[int, int]:
        return self.base_offset, 0

    def refresh(self) -> int:
        return 0

    def close(self, trim: bool = True) -> None:
        pass


class _EmptyTimeIndex(_EmptyOffsetIndex):
    def lookup(self, target: int) -> tuple[int, int]:
        return NO_TIMESTAMP, self.base_offset

    def last_entry(self) -> tuple[int, int]:
        return NO_TIMESTAMP, self.base_offset
