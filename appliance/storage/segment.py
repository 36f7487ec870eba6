"""One log segment: the ``.log`` file of record batches plus its offset and time indexes, and
its aborted-transaction index (``.txnindex``, :mod:`appliance.storage.txn_index`) once a
transaction was aborted in it: renamed, truncated and deleted with the rest.

The log file holds RecordBatch v2 batches and, for a topic stored in a pre-0.11 message format
(``message.format.version``), legacy magic 0/1 entries, possibly both after a format change: the
native scan dispatches on the magic byte (see :mod:`native.scan`), and a legacy entry counts as
one "batch" (a compressed wrapper: all its inner messages, last offset = the wrapper's offset).

:meth:`LogSegment.open` is the only factory (Kafka's ``LogSegment.open``). File names are the
segment's base offset in 20 digits; ``.deleted`` marks a segment waiting for removal.

Reads go through a read-only mmap of the log file that is remapped (grown) when a read needs
bytes past its end; the native batch scan walks headers in it, so no batch is copied to find a
fetch's boundaries.

Descriptors are opened lazily (Kafka's lazy indexes, taken to the log file too): a segment's
cached state (size, next offset, largest timestamp) outlives its files, :meth:`LogSegment.release`
closes them, and the next access (``fd``, ``offset_index``, ``time_index``, any read) opens them
again. The owner releases inactive segments, so a partition at rest holds only its active
segment's descriptors. Opening is all or nothing: an error (EMFILE included) raises
:class:`SegmentOpenError` naming the file and leaves no descriptor or half-built segment behind.

Thread-safety: none. A writable segment belongs to the partition's single writer; read-only
segments (``writable=False``) belong to one reader thread.
"""

from __future__ import annotations

import errno
import mmap
import os
import time
from typing import Any, NamedTuple

import numpy as np

from appliance.errors import KafkaStorageError
from appliance.storage.flush import ChunkedWriteback
from appliance.storage.index import index_entry_slots
from appliance.storage.offset_index import OffsetIndex
from appliance.storage.preallocate import (
    BULK_APPEND_BYTES,
    BULK_RECHECK_BYTES,
    NEVER,
    WINDOW_BYTES,
    give_back,
    reserve,
)
from appliance.storage.time_index import NO_TIMESTAMP, TimeIndex
from appliance.storage.txn_index import TXN_INDEX_SUFFIX
from appliance.storage.txn_index import truncate_to as truncate_txn_index
from native.append_commit import (
    NO_FIRST_APPEND,
    S_BASE_OFFSET,
    S_FD,
    S_FIRST_APPEND_MS,
    S_INTERVAL,
    S_JITTER_MS,
    S_MAX_TS,
    S_NEXT_OFFSET,
    S_OFFSET_OF_MAX,
    S_OI_ENTRIES,
    S_SEGMENT_BYTES,
    S_SEGMENT_MS,
    S_SINCE,
    S_SIZE,
    S_TI_ENTRIES,
    new_segment_state,
)
from native.legacy_layout import HEADER_SIZE_V0, LENGTH_SIZE
from native.scan import SCAN_LIMIT, ScanResult, scan_batches

__all__ = [
    "LogSegment", "SegmentOpenError", "BatchLocation", "RecoveryResult", "segment_file_name", "parse_segment_file_name",
    "LOG_SUFFIX", "INDEX_SUFFIX", "TIME_INDEX_SUFFIX", "DELETED_SUFFIX", "CLEANED_SUFFIX",
    "SWAP_SUFFIX", "SEGMENT_SUFFIXES", "TXN_INDEX_SUFFIX",
]

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
INT32_MAX = 0x7FFFFFFF

# Batches walked per native call while looking for an offset: enough to cover an index interval
# of small batches in one call, few enough that a lookup never walks far past its target.
_TRANSLATE_CHUNK = 256
_READ_HINTS = 16  # per segment: a few followers and consumers reading the tail each keep theirs
_MISS = object()  # LogSegment._hinted_read: not answered from a hint
# Log files up to this size are read with pread rather than mapped (LogSegment.data).
PREAD_MAX_BYTES = 64 * 1024
# The smallest entry a log file can hold: a magic 0 message with null key and value.
_MIN_ENTRY_SIZE = HEADER_SIZE_V0 + 2 * LENGTH_SIZE
# Appends of at least this many batches are indexed with array operations.
_VECTOR_MIN = 64


class _ReadCopy(bytes):
    """A small log file read into memory, standing in for its mapping (see LogSegment.data)."""

    def close(self) -> None:
        pass


class SegmentOpenError(KafkaStorageError):
    """A segment file (or the partition directory holding it) could not be opened or mapped;
    ``path`` names it, ``errno`` says why (EMFILE: the process is out of descriptors)."""

    def __init__(self, path: str, err: OSError) -> None:
        self.path = path
        self.errno = err.errno
        hint = (" (the process is out of file descriptors: raise the open-file limit, "
                "ulimit -n, or hold fewer partitions)" if err.errno == errno.EMFILE else "")
        super().__init__(f"cannot open {path}: {err.strerror or err}{hint}")


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
    """What :meth:`LogSegment.recover` found: valid bytes, bytes cut, why the scan stopped, and
    where the valid batches start (the loader reads their producer fields while the segment is
    still mapped, rather than walking it a second time)."""

    valid_bytes: int
    truncated_bytes: int
    stop_reason: int
    batches: int
    positions: np.ndarray


_BLOCK = 4096  # st_blocks past the size rounded up to this: blocks reserved past the end


class LogSegment:
    """A segment's files and cached state (size, next offset, largest timestamp).

    Attributes: ``base_offset``, ``dir``, ``log_path``, ``size`` (bytes of the log file known to
    hold batches), ``next_offset`` (last offset + 1, or base offset when empty), ``max_timestamp``
    and ``offset_of_max_timestamp`` (largest batch max timestamp and where it first appeared),
    ``deleted``, ``last_used`` (time.monotonic() of the last open or read). ``fd``,
    ``offset_index`` and ``time_index`` open the files on first use (see the module docstring).
    The append state among these (and the indexes' entry counts) is stored in ``state``, the
    int64 array the append kernel updates (native.append_commit's ``S_*`` columns).
    """

    def __init__(self, dir_: str, base_offset: int, config: Any, *, writable: bool,
                 suffix: str = "") -> None:
        # The append state (size, next offset, index state, roll clock, descriptor, index
        # entry counts) lives in an int64 array the append kernel (native.append_commit)
        # reads and updates in one call; the attributes of the same names read it.
        self.state = new_segment_state()
        self._sv = memoryview(self.state).cast("B").cast("q")
        self._sv[S_BASE_OFFSET] = base_offset
        self.dir = dir_
        self.base_offset = base_offset
        # blocks reserved past the end (appliance.storage.preallocate): the append path calls
        # reserve_ahead once an append would pass reserve_at; reserved_to is how far they go
        self.reserve_at = NEVER
        self.reserved_to = 0
        self.reserve_bulk_only = True  # preallocate off: only ahead of bulk appends
        self.idle_check_size = -1  # the size at the last idle check (give_back_if_idle)
        self.apply_config(config)
        self.writable = writable
        self.suffix = suffix
        self.deleted = False
        self.log_path = self._path(LOG_SUFFIX)
        self._fd = -1
        self._closed = False
        self._oi: OffsetIndex | None = None
        self._ti: TimeIndex | None = None
        self.size = 0
        self.next_offset = base_offset
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = base_offset
        self.bytes_since_last_index_entry = 0
        self.first_append_ms: int | None = None
        self.roll_jitter_ms = 0
        self.writeback: ChunkedWriteback | None = None
        self._dmm: mmap.mmap | None = None
        self._dmm_len = 0
        self.index_problem: str | None = None
        self.last_used = 0.0
        # read-only segments: the writer may have added offset-index entries since the last
        # re-count (LogReader sets this at every read of the active segment; the re-count, an
        # fstat and a dozen preads, happens only when a read needs the index)
        self.index_stale = False
        # offset -> file position of the batch that starts there, learnt from the reads served
        # (the batch after each slice): a reader following the log's tail, like a follower's
        # fetch, is read from there without the offset index (see _hinted_batch)
        self._read_hints: dict[int, int] = {}

    def apply_config(self, config: Any) -> None:
        """Use ``config`` (a TopicConfig, or None for read-only segments) from now on; the
        values the append path needs are copied into plain attributes (measured: attribute
        lookups through TopicConfig cost ~1 us each, several per append)."""
        self.config = config
        if config is not None:
            self._segment_bytes = self._sv[S_SEGMENT_BYTES] = int(config.segment_bytes)
            self._segment_ms = self._sv[S_SEGMENT_MS] = int(config.segment_ms)
            self._interval = self._sv[S_INTERVAL] = int(config.index_interval_bytes)
            self.reserve_bulk_only = not config.preallocate
            if self.reserve_at == NEVER:
                self.reserve_at = 0  # at the next append

    # -- the append state (see __init__) ----------------------------------------------------

    def _state_cell(slot: int, doc: str) -> property:  # noqa: N805  (a class-body helper)
        def get(self: LogSegment) -> int:
            return self._sv[slot]

        def set_(self: LogSegment, value: int) -> None:
            self._sv[slot] = value
        return property(get, set_, doc=doc)

    size = _state_cell(S_SIZE, "Bytes of the log file known to hold batches.")
    next_offset = _state_cell(S_NEXT_OFFSET, "Last offset + 1, or the base offset when empty.")
    max_timestamp = _state_cell(S_MAX_TS, "Largest batch max timestamp (NO_TIMESTAMP: none).")
    offset_of_max_timestamp = _state_cell(S_OFFSET_OF_MAX, "Where max_timestamp first appeared.")
    bytes_since_last_index_entry = _state_cell(S_SINCE, "Bytes appended since the last "
                                               "offset-index entry (index.interval.bytes).")
    roll_jitter_ms = _state_cell(S_JITTER_MS, "segment.jitter.ms drawn for this segment.")
    _fd = _state_cell(S_FD, "The log file's descriptor, -1 when closed.")
    del _state_cell

    @property
    def first_append_ms(self) -> int | None:
        """Broker time of the first append since the segment was opened (the roll clock)."""
        v = self._sv[S_FIRST_APPEND_MS]
        return None if v == NO_FIRST_APPEND else v

    @first_append_ms.setter
    def first_append_ms(self, value: int | None) -> None:
        self._sv[S_FIRST_APPEND_MS] = NO_FIRST_APPEND if value is None else value

    # -- opening ----------------------------------------------------------------------------

    @classmethod
    def open(cls, dir_: str, base_offset: int, config: Any, *, create: bool = False,
             writable: bool = True, suffix: str = "") -> LogSegment:
        """Open (or with ``create`` make) the segment ``base_offset`` in ``dir_``.

        ``config`` is a TopicConfig (segment.index.bytes, index.interval.bytes are used).
        Missing index files are created empty and ``index_problem`` says so (the owner then
        rebuilds them with :meth:`recover`); an index that fails its sanity check is reported
        the same way. ``next_offset`` is found by walking from the last index entry.
        Raises SegmentOpenError (a file cannot be opened: nothing is left open) and
        KafkaStorageError (``create`` on a non-empty existing file, unreadable indexes).
        """
        seg = cls(dir_, base_offset, config, writable=writable, suffix=suffix)
        try:
            seg._open_log(create)
            if create and seg.size:
                raise KafkaStorageError(f"segment {seg.log_path} already exists and is not empty")
            seg._open_indexes(create)
            if seg.size:
                seg._load_tail_state()
        except BaseException as e:
            seg.close(trim=False)
            if isinstance(e, (OSError, ValueError)):
                raise KafkaStorageError(f"cannot open indexes of {seg.log_path}: {e}") from e
            raise
        return seg

    def _path(self, ext: str) -> str:
        name = segment_file_name(self.base_offset, ext) + self.suffix
        return os.path.join(self.dir, name + DELETED_SUFFIX if self.deleted else name)

    def _open_log(self, create: bool = False) -> None:
        if self._closed:
            raise KafkaStorageError(f"segment {self.log_path} is closed")
        try:
            if self.writable:
                flags = os.O_RDWR | os.O_APPEND | (os.O_CREAT if create else 0)
                fd = os.open(self.log_path, flags, 0o644)
            else:
                fd = os.open(self.log_path, os.O_RDONLY)
        except OSError as e:
            raise SegmentOpenError(self.log_path, e) from e
        try:
            if not self.writable or create or self.size == 0:
                # the writer's size is authoritative once known (bytes past it are not batches)
                self.size = os.fstat(fd).st_size
        except OSError as e:
            os.close(fd)
            raise SegmentOpenError(self.log_path, e) from e
        self._fd = fd

    @property
    def fd(self) -> int:
        """The log file's descriptor (opened on demand; -1 once closed)."""
        if self._fd < 0 and not self._closed:
            self._open_log()
        return self._fd

    @property
    def files_open(self) -> bool:
        """Whether any of the segment's files is open now."""
        return self._fd >= 0 or self._oi is not None or self._ti is not None

    @property
    def offset_index(self) -> OffsetIndex:
        oi = self._oi
        if oi is None:
            oi = self._oi = self._open_index(OffsetIndex, _EmptyOffsetIndex, INDEX_SUFFIX, 0)
        return oi

    @property
    def time_index(self) -> TimeIndex:
        ti = self._ti
        if ti is None:
            ti = self._ti = self._open_index(TimeIndex, _EmptyTimeIndex, TIME_INDEX_SUFFIX, 0)
        return ti

    def _open_index(self, cls: type, empty: type, ext: str, max_bytes: int) -> Any:
        """An index object for ``ext``; ``max_bytes`` preallocates a new writable file. A
        reader cannot rebuild a missing index: it gets a stand-in that walks from position 0."""
        if self._closed:
            raise KafkaStorageError(f"segment {self.log_path} is closed")
        path = self._path(ext)
        if not self.writable and not os.path.exists(path):
            return empty(self.base_offset)
        # no more entries than batches (plus the time index's closing entry): bounds the
        # count of an untrimmed index after a crash to a few probes. The smallest entry is a
        # legacy magic 0 message (a topic in a pre-0.11 format), not a v2 header.
        hint = self.size // _MIN_ENTRY_SIZE + 2 if self.writable else None
        cell = (self._sv, S_OI_ENTRIES if cls is OffsetIndex else S_TI_ENTRIES)
        try:
            return cls(path, self.base_offset, max_bytes, writable=self.writable,
                       max_entries_hint=hint, count_cell=cell)
        except OSError as e:
            raise SegmentOpenError(path, e) from e

    def _open_indexes(self, create: bool) -> None:
        ipath, tpath = self._path(INDEX_SUFFIX), self._path(TIME_INDEX_SUFFIX)
        missing = [p for p in (ipath, tpath) if not os.path.exists(p)]
        max_bytes = int(self.config.segment_index_bytes) if self.config is not None else 0
        self._oi = self._open_index(OffsetIndex, _EmptyOffsetIndex, INDEX_SUFFIX, max_bytes)
        self._ti = self._open_index(TimeIndex, _EmptyTimeIndex, TIME_INDEX_SUFFIX, max_bytes)
        if missing and not create and self.size:
            self.index_problem = "missing " + ", ".join(os.path.basename(p) for p in missing)
        elif self.writable:
            for idx in (self._oi, self._ti):
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

    def data(self, needed: int) -> mmap.mmap | bytes:
        """A read-only buffer covering at least [0, needed) of the log file (remapped when
        too short); invalid after the next remap, truncation or release."""
        if needed <= 0:
            return b""
        if self._dmm is None or self._dmm_len < needed:
            fd = self.fd
            self.unmap_data()
            try:
                if self.size <= PREAD_MAX_BYTES:
                    # a small file is read, not mapped: the first touch of a new mapping
                    # faulted for ~0.4 ms here, 4 times per partition at start-up
                    self._dmm = _ReadCopy(os.pread(fd, self.size, 0))
                else:
                    self._dmm = mmap.mmap(fd, self.size, access=mmap.ACCESS_READ)
            except OSError as e:  # the mapping needs a descriptor of its own
                raise SegmentOpenError(self.log_path, e) from e
            self._dmm_len = len(self._dmm)
        return self._dmm

    def unmap_data(self) -> None:
        """Drop the data mapping (it holds a descriptor of its own)."""
        if self._dmm is not None:
            try:
                self._dmm.close()
            except BufferError:
                pass  # views of it are still alive (an error mid-scan): it closes with the last
            self._dmm = None
            self._dmm_len = 0

    def _scan(self, start: int, end: int, *, verify_crc: bool, max_batches: int = -1) -> ScanResult:
        buf = self.data(end)
        # legacy: a topic stored in a pre-0.11 message format holds magic 0/1 entries
        return scan_batches(buf, start, end, verify_crc=verify_crc, max_batches=max_batches,
                            legacy=True)

    def _walk(self, pos: int, pick: Any) -> BatchLocation | None:
        """Walk batches from ``pos`` in chunks; ``pick(scan)`` gives the index of the wanted
        batch in a chunk or -1. The first picked batch, None at the end."""
        while pos < self.size:
            r = self._scan(pos, self.size, verify_crc=False, max_batches=_TRANSLATE_CHUNK)
            if r.count == 0:
                return None
            k = pick(r)
            if k >= 0:
                return BatchLocation(int(r.positions[k]), int(r.base_offsets[k]),
                                     int(r.last_offsets[k]), int(r.sizes[k]),
                                     int(r.max_timestamps[k]))
            if r.stop_reason != SCAN_LIMIT:
                return None
            pos = r.stop_position
        return None

    def _fresh_offset_index(self) -> Any:
        if self.index_stale:
            self.index_stale = False
            self.offset_index.refresh()
        return self.offset_index

    def translate_offset(self, offset: int, start_position: int = 0) -> BatchLocation | None:
        """The first batch whose last offset >= ``offset`` (index floor + forward walk), None if
        the segment has no such batch."""
        _, pos = self._fresh_offset_index().lookup(offset)
        pos = max(pos, start_position)
        if pos >= self.size:
            pos = start_position  # a stale or damaged entry: walk from the start instead

        def pick(r: ScanResult) -> int:
            k = int(np.searchsorted(r.last_offsets[:r.count], offset, side="left"))
            return k if k < r.count else -1
        return self._walk(pos, pick)

    def read(self, offset: int, max_bytes: int, max_offset: int,
             min_one_batch: bool = True) -> tuple[int, int, int] | None:
        """(position, length, first batch base offset) of whole batches from the one holding
        ``offset``, at most ``max_bytes`` (or one batch if ``min_one_batch``), none with a base
        offset >= ``max_offset``. None when there is nothing to return."""
        self.last_used = time.monotonic()
        hinted = self._hinted_read(offset, max_bytes, max_offset)
        if hinted is not _MISS:
            return hinted
        loc = self.translate_offset(offset)
        if loc is None or loc.base_offset >= max_offset:
            return None
        end = min(self.size, loc.position + max(0, max_bytes))
        r = self._scan(loc.position, end, verify_crc=False)
        k = int(np.searchsorted(r.base_offsets[:r.count], max_offset, side="left"))
        if k == 0:
            if not min_one_batch:
                return None
            self._hint(loc.last_offset + 1, loc.position + loc.size)
            return loc.position, loc.size, loc.base_offset
        self._hint(int(r.last_offsets[k - 1]) + 1, int(r.positions[k - 1]) + int(r.sizes[k - 1]))
        length = int(r.positions[k - 1]) + int(r.sizes[k - 1]) - loc.position
        return loc.position, length, loc.base_offset

    def _hint(self, offset: int, position: int) -> None:
        hints = self._read_hints
        hints[offset] = position
        if len(hints) > _READ_HINTS:
            del hints[next(iter(hints))]  # the oldest

    def _hinted_read(self, offset: int, max_bytes: int, max_offset: int) -> Any:
        """:meth:`read` from where an earlier read ended at ``offset`` (a reader following the
        tail), without the offset index; _MISS when there is no such hint, the batches do not
        fit ``max_bytes``, or what is there now is not the batch starting at ``offset`` (its
        base offset and CRC are checked in a fresh read of the file, so a file cut and
        rewritten since, by a follower's truncation in another process, is noticed). A tail of
        up to PREAD_MAX_BYTES is read with one pread: a mapping of a growing file was remapped
        (mmap + munmap) at every read."""
        pos = self._read_hints.get(offset)
        if pos is None or pos >= self.size:
            return _MISS
        end = min(self.size, pos + max(0, max_bytes))
        if end - pos <= PREAD_MAX_BYTES:
            # one scan checks every batch's CRC (a few KB at the tail); a bad one ends the read
            buf: Any = os.pread(self.fd, end - pos, pos)
            r = scan_batches(buf, 0, len(buf), verify_crc=True, legacy=True)
            base = pos
        else:
            buf = self.data(end)
            if isinstance(buf, _ReadCopy):
                return _MISS  # a small file's copy may be stale: only a mapping is live
            r = scan_batches(buf, pos, end, verify_crc=False, legacy=True)
            if r.count and not scan_batches(buf, pos, end, verify_crc=True, max_batches=1,
                                                legacy=True).crc_ok[0]:
                r = r._replace(count=0)
            base = 0
        n = r.count if not r.count or r.crc_ok[r.count - 1] else r.count - 1
        if n == 0 or int(r.base_offsets[0]) != offset:
            del self._read_hints[offset]
            return _MISS
        k = int(np.searchsorted(r.base_offsets[:n], max_offset, side="left"))
        if k == 0:
            return None  # the batch at offset is not below max_offset yet
        nxt = int(r.positions[k - 1]) + int(r.sizes[k - 1]) + base
        self._hint(int(r.last_offsets[k - 1]) + 1, nxt)
        return pos, nxt - pos, offset

    def batch_bytes(self, loc: BatchLocation) -> bytes:
        """A copy of one batch's bytes."""
        return bytes(self.data(loc.position + loc.size)[loc.position:loc.position + loc.size])

    def batches_from(self, position: int, end: int | None = None) -> ScanResult:
        """Headers of every batch in [position, end) (no CRC check)."""
        return self._scan(position, self.size if end is None else end, verify_crc=False)

    def find_offset_by_timestamp(self, timestamp: int, start_offset: int) -> BatchLocation | None:
        """First batch with max timestamp >= ``timestamp`` and last offset >= ``start_offset``."""
        self.last_used = time.monotonic()
        _, ts_offset = self.time_index.lookup(timestamp)
        _, pos = self._fresh_offset_index().lookup(max(ts_offset, start_offset))
        if pos >= self.size:
            pos = 0

        def pick(r: ScanResult) -> int:
            ok = np.flatnonzero((r.max_timestamps[:r.count] >= timestamp)
                                & (r.last_offsets[:r.count] >= start_offset))
            return int(ok[0]) if ok.size else -1
        return self._walk(pos, pick)

    def max_timestamp_batch(self, start_offset: int, bound: int) -> BatchLocation | None:
        """The first batch (by offset) with the largest max timestamp among those wholly inside
        [``start_offset``, ``bound``); None when there is none (batches cut by either end are
        the caller's to read record by record). Walks every batch header of the segment
        (ListOffsets' MAX_TIMESTAMP, KIP-734: an admin query)."""
        self.last_used = time.monotonic()
        best: BatchLocation | None = None
        pos = 0
        while pos < self.size:
            r = self._scan(pos, self.size, verify_crc=False, max_batches=_TRANSLATE_CHUNK)
            if r.count == 0:
                break
            n = r.count
            ok = (r.base_offsets[:n] >= start_offset) & (r.last_offsets[:n] < bound)
            if ok.any():
                ts = np.where(ok, r.max_timestamps[:n], np.iinfo(np.int64).min)
                k = int(np.argmax(ts))  # the first of equal maxima: the earliest offset wins
                if best is None or int(ts[k]) > best.max_timestamp:
                    best = BatchLocation(int(r.positions[k]), int(r.base_offsets[k]),
                                         int(r.last_offsets[k]), int(r.sizes[k]), int(ts[k]))
            if r.stop_reason != SCAN_LIMIT or int(r.base_offsets[n - 1]) >= bound:
                break
            pos = r.stop_position
        return best

    @property
    def largest_timestamp(self) -> int:
        """Largest batch timestamp; the file's mtime when no batch carries one (Kafka)."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        st = os.fstat(self._fd) if self._fd >= 0 else os.stat(self.log_path)
        return int(st.st_mtime * 1000)

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
        oi, ti = self._oi, self._ti
        if oi is None or ti is None:
            oi, ti = self.offset_index, self.time_index
        # is_full of each, without two property calls per append (the time index keeps its
        # last slot for the roll)
        if oi.entries >= oi.max_entries or ti.entries >= ti.max_entries - 1:
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
        self._write(data, len(data), now_ms)
        if len(sizes) >= _VECTOR_MIN:  # a large request or IPC hand-off: array operations
            self._index_batches(np.asarray(rel_positions, np.int64) + start,
                                np.asarray(sizes, np.int64), np.asarray(last_offsets, np.int64),
                                np.asarray(max_timestamps, np.int64))
        else:
            self._index_batches([start + p for p in rel_positions], sizes, last_offsets,
                                max_timestamps)
        self.next_offset = last_offsets[-1] + 1
        if self.writeback is not None:
            try:
                self.writeback.after_append(self.fd, self.size)
            except OSError as e:
                raise KafkaStorageError(f"writeback of {self.log_path} failed: {e}") from e
        return start

    def reserve_ahead(self, nbytes: int) -> None:
        """Reserve the blocks of an append of ``nbytes`` and WINDOW_BYTES more past the end
        (preallocate); called by the append paths once ``size + nbytes`` passes
        :attr:`reserve_at`. A failure leaves the append to allocate as it writes."""
        start = self.size
        if self.reserve_bulk_only and nbytes < BULK_APPEND_BYTES:
            self.reserve_at = start + nbytes + BULK_RECHECK_BYTES  # not for small appends: look later
            return
        end = start + nbytes + WINDOW_BYTES
        got = reserve(self.fd, start, end - start)
        if got is None:  # the file system cannot: do not ask again
            self.reserve_at = NEVER
            return
        self.reserve_at = end  # reserved up to there; or no space now: ask again a window on
        if got:
            self.reserved_to = end

    def give_back_if_idle(self) -> None:
        """Called every few seconds on the active segment: with preallocate off, blocks reserved
        ahead of bulk appends are given back once a whole interval passed without an append,
        so partitions that stopped taking them do not hold WINDOW_BYTES each."""
        if not self.reserve_bulk_only or self.reserved_to <= self.size:
            self.idle_check_size = -1
            return
        if self.size != self.idle_check_size:
            self.idle_check_size = self.size  # appended since the last look: not idle
            return
        self.give_back_reserved()
        self.idle_check_size = -1
        if self.reserve_at != NEVER:
            self.reserve_at = self.size  # the next bulk append reserves again

    def give_back_reserved(self) -> None:
        """Free the blocks reserved past the end (at roll and close), ours or a crashed
        predecessor's (preallocate on); the file's size and bytes do not change."""
        reserved, self.reserved_to = self.reserved_to, 0
        if self._fd < 0 or (self.reserve_at == NEVER and not reserved):
            return  # off, and nothing of ours: no fstat on every roll and close
        try:
            st = os.fstat(self._fd)
            # only when the file is exactly our bytes and holds blocks past them
            if st.st_size == self.size and st.st_blocks * 512 > -(-self.size // _BLOCK) * _BLOCK:
                give_back(self._fd, self.size)
        except OSError:
            pass  # blocks held until the segment is deleted; its data is untouched

    def _write(self, data: Any, nbytes: int, now_ms: int) -> None:
        """Write ``data`` (a buffer, or a list of buffers: one writev) at the end of the file.
        Raises KafkaStorageError (the file cut back to where it was first)."""
        start = self.size
        if self.reserve_at != NEVER and start + nbytes > self.reserve_at:
            self.reserve_ahead(nbytes)
        fd = self._fd if self._fd >= 0 else self.fd
        try:
            if type(data) is list:
                n = os.writev(fd, data)
                if n < nbytes:
                    data = memoryview(b"".join(data))
            else:
                n = os.write(fd, data)
            while n < nbytes:  # regular files write fully unless interrupted or ENOSPC
                n += os.write(fd, data[n:])
        except OSError as e:
            try:
                os.ftruncate(fd, start)
            except OSError:
                pass
            raise KafkaStorageError(f"write to {self.log_path} failed: {e}") from e
        if start == 0 and self.first_append_ms is None:
            self.first_append_ms = now_ms
        self.size = start + nbytes

    @property
    def index_interval_bytes(self) -> int:
        return self._interval

    def _index_batches(self, positions: list[int] | np.ndarray, sizes: list[int] | np.ndarray,
                       last_offsets: list[int] | np.ndarray,
                       max_timestamps: list[int] | np.ndarray) -> None:
        """Index batches at file ``positions``: the batches :func:`index_entry_slots` picks get
        an offset-index entry, and the time index then records the running max timestamp and
        where it first appeared (Kafka's LogSegment.append). Lists take a loop, arrays
        (many batches: a large request, recovery) array operations; the result is the same."""
        slots, self.bytes_since_last_index_entry = index_entry_slots(
            sizes, self.bytes_since_last_index_entry, self._interval)
        max_ts, max_off = self.max_timestamp, self.offset_of_max_timestamp
        if isinstance(sizes, np.ndarray):
            cm = np.maximum.accumulate(np.maximum(max_timestamps, max_ts))
            rises = np.empty(len(cm), dtype=bool)
            rises[0] = cm[0] > max_ts
            rises[1:] = cm[1:] > cm[:-1]
            src = np.maximum.accumulate(np.where(rises, np.arange(len(cm)), -1))
            off_of_max = np.where(src >= 0, last_offsets[np.maximum(src, 0)], max_off)
            if len(slots):
                self.offset_index.append_many(last_offsets[slots], positions[slots])
                self.time_index.append_many(cm[slots], off_of_max[slots])
            self.max_timestamp = int(cm[-1])
            self.offset_of_max_timestamp = int(off_of_max[-1])
            return
        # few batches (the common produce request): entry by entry, as Kafka does
        oi, ti = self.offset_index, self.time_index
        j, n_slots = 0, len(slots)
        for i, ts in enumerate(max_timestamps):
            if ts > max_ts:
                max_ts, max_off = ts, last_offsets[i]
            if j < n_slots and slots[j] == i:
                if not oi.is_full:
                    oi.append(last_offsets[i], positions[i])
                if max_ts >= 0 and not ti.is_full:
                    ti.maybe_append(max_ts, max_off)
                j += 1
        self.max_timestamp, self.offset_of_max_timestamp = max_ts, max_off

    def on_become_inactive(self) -> None:
        """Roll: record the final max timestamp in the time index and trim both indexes."""
        ti = self.time_index
        if self.max_timestamp >= 0 and ti.entries < ti.max_entries:
            ti.maybe_append(self.max_timestamp, self.offset_of_max_timestamp,
                            skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        ti.trim_to_valid_size()
        self.writeback = None
        self.give_back_reserved()

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
        self._read_hints.clear()
        oi, ti = self.offset_index, self.time_index
        oi.reset()
        ti.reset()
        max_idx = int(self.config.segment_index_bytes)
        oi.resize(max_idx)
        ti.resize(max_idx)
        self.bytes_since_last_index_entry = 0
        self.max_timestamp, self.offset_of_max_timestamp = NO_TIMESTAMP, self.base_offset
        if size_before:
            buf = self.data(size_before)
            r = scan_batches(buf, 0, size_before, verify_crc=True, legacy=True,
                             expect_offset=self.base_offset, max_batch_size=max_batch_size)
        else:
            r = scan_batches(b"", 0, 0)
        valid = int(r.stop_position)
        n = int(np.count_nonzero(r.positions[:r.count] < valid))
        if valid < size_before:
            self.unmap_data()
            try:
                os.ftruncate(self.fd, valid)
            except OSError as e:
                raise KafkaStorageError(f"cannot truncate {self.log_path}: {e}") from e
        self.size = valid
        if n:
            self._index_batches(r.positions[:n], r.sizes[:n], r.last_offsets[:n],
                                r.max_timestamps[:n])
            self.next_offset = int(r.last_offsets[n - 1]) + 1
        else:
            self.next_offset = self.base_offset
        # markers cut with the log leave the index; the producer-state replay of this segment
        # (storage/loader.py) writes back any entry the index lacks
        try:
            truncate_txn_index(self.txn_index_path, self.next_offset)
        except OSError as e:
            raise KafkaStorageError(f"cannot truncate {self.txn_index_path}: {e}") from e
        self.index_problem = None
        if self.writeback is not None:
            self.writeback.reset(valid)
        return RecoveryResult(valid, size_before - valid, int(r.stop_reason), n, r.positions[:n])

    def truncate_to(self, offset: int) -> int:
        """Drop every batch whose last offset >= ``offset`` (the whole batch holding ``offset``).

        Returns the bytes removed. Raises KafkaStorageError on I/O failure.
        """
        loc = self.translate_offset(offset)
        if loc is None:
            return 0
        self._read_hints.clear()
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        try:
            truncate_txn_index(self.txn_index_path, offset)
        except OSError as e:
            raise KafkaStorageError(f"cannot truncate {self.txn_index_path}: {e}") from e
        removed = self.size - loc.position
        self.unmap_data()
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
        """fsync the log file and both indexes; files that are not open are synced through a
        short-lived descriptor (their dirty pages outlive the descriptor that wrote them).
        Raises KafkaStorageError."""
        try:
            if self._fd >= 0:
                os.fsync(self._fd)
            else:
                _fsync_path(self.log_path)
            for idx, ext in ((self._oi, INDEX_SUFFIX), (self._ti, TIME_INDEX_SUFFIX)):
                if idx is not None:
                    idx.flush()
                elif self.writable:
                    _fsync_path(self._path(ext), missing_ok=True)
            if self.writable:
                _fsync_path(self.txn_index_path, missing_ok=True)
        except OSError as e:
            raise KafkaStorageError(f"flush of {self.log_path} failed: {e}") from e

    # -- lifecycle --------------------------------------------------------------------------

    @property
    def txn_index_path(self) -> str:
        """The segment's ``.txnindex`` (it exists once a transaction was aborted in it)."""
        return self._path(TXN_INDEX_SUFFIX)

    def paths(self) -> list[str]:
        return [self.log_path, self._path(INDEX_SUFFIX), self._path(TIME_INDEX_SUFFIX),
                self.txn_index_path]

    def _rename_files(self, change: Any) -> None:
        """Rename the indexes (those that exist), then the log file, after ``change()`` has
        set the new name parts; open descriptors keep working."""
        exts = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
        old = [self._path(e) for e in exts]
        change()
        new = [self._path(e) for e in exts]
        for idx, a, b in ((self._oi, old[1], new[1]), (self._ti, old[2], new[2]),
                          (None, old[3], new[3])):
            if os.path.exists(a):
                os.rename(a, b)
            if idx is not None:
                idx.path = b
        os.rename(old[0], new[0])
        self.log_path = new[0]

    def rename_to_deleted(self) -> None:
        """Add ``.deleted`` to every file's name; open descriptors keep working."""
        if not self.deleted:
            self._rename_files(lambda: setattr(self, "deleted", True))

    def change_suffix(self, new_suffix: str) -> None:
        """Rename the three files from the current suffix (``.cleaned``, ``.swap`` or none) to
        ``new_suffix``; open descriptors keep working. The indexes go first and the log file
        last, so a log file carrying a suffix means its indexes were renamed before it (the
        cleaner's crash recovery relies on this). Raises OSError."""
        self._rename_files(lambda: setattr(self, "suffix", new_suffix))

    def delete_files(self) -> None:
        """Close and unlink every file of the segment (missing ones are fine)."""
        self.close(trim=False)
        for p in self.paths():
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass

    def release(self, trim: bool = True) -> None:
        """Close the files but keep the cached state: the next access opens them again. A
        writable segment's indexes are trimmed first (only an inactive segment is released)."""
        self.unmap_data()
        for idx in (self._oi, self._ti):
            if idx is not None:
                idx.close(trim=trim and self.writable)
        self._oi = self._ti = None
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def close(self, trim: bool = True) -> None:
        """Close the files for good; a writable segment with open indexes records its final
        time-index entry and trims its indexes first (Kafka's close). Idempotent."""
        if self._closed:
            return
        if self.writable and trim and not self.deleted:
            if self._oi is None:
                self.give_back_reserved()  # on_become_inactive's last step otherwise
            else:
                try:
                    self.on_become_inactive()
                except (OSError, ValueError, KafkaStorageError):
                    # closing anyway: recovery rebuilds what the last entry would have said
                    self.give_back_reserved()
        self.release(trim=trim)
        self._closed = True

    def __repr__(self) -> str:
        return (f"LogSegment(base={self.base_offset}, size={self.size}, "
                f"next_offset={self.next_offset}, path={self.log_path!r})")


def _fsync_path(path: str, missing_ok: bool = False) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        if missing_ok:
            return
        raise
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _EmptyOffsetIndex:
    """Stand-in for a missing index file of a read-only segment: every lookup says position 0."""

    entries = 0
    max_entries = 0
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
