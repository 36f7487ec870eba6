"""The abstract mmap'd index of fixed-width entries (Kafka's ``AbstractIndex``).

An index file is preallocated to ``segment.index.bytes`` (rounded down to whole entries) while its
segment is active, memory-mapped, and appended to in place; when the segment rolls it is trimmed
to its valid entries (:meth:`AbstractIndex.trim_to_valid_size`). Entries are sparse and
disposable: they carry no checksum, and recovery rebuilds them from the log.

Entry count on open: a trimmed file holds exactly ``length / entry_size`` entries; an untrimmed
(preallocated, e.g. after a crash) file is a prefix of entries followed by zeros, so the count is
found by a binary search for the last non-zero entry (entry 0 may legitimately be all zeros; an
all-zero entry 0 means "offset base at position 0", which is what an empty index answers too, so
the two are interchangeable). Truncation zeroes the dropped entries to keep that rule true.

Writers (the disk worker) open indexes writable. Readers in other processes open them read-only:
the count is found with ``pread`` (a read past the end of a file that the writer just trimmed
returns short instead of raising SIGBUS), and only ``[0, entries * entry_size)`` is mapped, a range
the writer never cuts (trimming keeps every entry; only replication truncation removes entries).

Thread-safety: none; one thread uses an index object at a time.
"""

from __future__ import annotations

import mmap
import os
import struct
from typing import ClassVar

import numpy as np

from native.index_layout import WARM_SECTION_BYTES

__all__ = ["AbstractIndex", "IndexError_", "IndexFullError", "index_entry_slots"]

_NO_BYTES = np.zeros(0, np.uint8)  # AbstractIndex.u8 with nothing mapped


class IndexError_(Exception):
    """An index operation that breaks the index's invariants (a caller bug, not bad data)."""


class IndexFullError(IndexError_):
    """Append to an index that has no free slot; the segment must roll first."""


class AbstractIndex:
    """Fixed-width big-endian entries in a preallocated, memory-mapped file.

    Subclasses set ``ENTRY`` (the struct), ``DTYPE`` (the same layout as a numpy dtype) and
    implement ``_floor(buf, n, key)`` (the native floor kernel), ``sanity_check`` and
    ``_key_of_offset_column``.
    """

    ENTRY: ClassVar[struct.Struct]
    DTYPE: ClassVar[np.dtype]

    def __init__(self, path: str, base_offset: int, max_index_size: int = -1, *,
                 writable: bool = True, max_entries_hint: int | None = None,
                 count_cell: tuple[memoryview, int] | None = None) -> None:
        self.path = path
        self.base_offset = base_offset
        self.writable = writable
        self._esize = self.ENTRY.size
        self._zero = bytes(self._esize)
        self._mm: mmap.mmap | None = None
        #: a writable mapping as a uint8 array, for the append kernel (native.append_commit);
        #: dropped before the mapping closes (an exported buffer cannot be unmapped)
        self.u8: np.ndarray = _NO_BYTES
        self.corrupt_reason: str | None = None
        self._mapped = 0
        self._slots = 0  # entries the mapping holds: _mapped // _esize
        # The entry count lives in a cell of an int64 memoryview: the segment's state array
        # when the segment passes one (the append kernel counts the entries it writes there),
        # else a cell of our own.
        self._cells, self._cell = count_cell if count_cell is not None else (
            memoryview(bytearray(8)).cast("q"), 0)
        self.entries = 0
        flags = os.O_RDWR | os.O_CREAT if writable else os.O_RDONLY
        self._fd = os.open(path, flags, 0o644)
        try:
            self._load(max_index_size, max_entries_hint)
        except BaseException:
            # all or nothing: no descriptor or mapping outlives a failed open
            self.close(trim=False)
            raise

    def _load(self, max_index_size: int, max_entries_hint: int | None) -> None:
        writable = self.writable
        length = os.fstat(self._fd).st_size
        if length % self._esize:
            self.corrupt_reason = f"length {length} is not a multiple of {self._esize}"
        if writable:
            if length == 0:
                # a new file has no entries: counting would fault in ~20 pages of a sparse file,
                # measured at 17 ms per index (a 1,000-partition topic took 47 s to create)
                length = self._round(max_index_size)
                os.ftruncate(self._fd, length)
                self._map(length)
                self.entries = 0
            else:
                # An untrimmed (preallocated) file after a crash: the count's binary search
                # faulted in ~20 pages of a mostly sparse mapping, measured at 0.7 ms each
                # (88 s of a 120 s open of 3,850 partitions). The owner's bound (no more
                # entries than batches in the log) keeps it to a few probes, read with pread.
                n_max = length // self._esize
                if max_entries_hint is not None:
                    n_max = min(n_max, max(0, max_entries_hint))
                self.entries = self._count(self._entry_is_nonzero_pread, n_max)
                self._map(length)
        else:
            self.entries = 0
            self.refresh()

    # -- sizing -----------------------------------------------------------------------------

    def _round(self, size: int) -> int:
        return max(0, size) // self._esize * self._esize

    def _unmap(self) -> None:
        self.u8 = _NO_BYTES
        if self._mm is not None:
            self._mm.close()
            self._mm = None

    def _map(self, length: int) -> None:
        self._unmap()
        if length > 0:
            access = mmap.ACCESS_WRITE if self.writable else mmap.ACCESS_READ
            self._mm = mmap.mmap(self._fd, length, access=access)
            # No read-around: a fault in a file mapping reads ahead up to the device's
            # read_ahead_kb around the page (8 MiB on this machine's disk). A new index is a
            # sparse 10 MiB file, so its first entry filled 8 MiB of page cache with zeros and
            # took 2-8 ms of the disk worker's only thread; run 2 of a 1,000-partition produce
            # paid that for 200 index files and fell from ~560 k to 19-109 k records/s.
            # Lookups are binary searches, random by nature: read-around never helped them.
            self._mm.madvise(mmap.MADV_RANDOM)
            if self.writable:
                self.u8 = np.frombuffer(self._mm, np.uint8)
        self._mapped = length
        self._slots = length // self._esize

    @property
    def entries(self) -> int:
        """Valid entries."""
        return self._cells[self._cell]

    @entries.setter
    def entries(self, n: int) -> None:
        self._cells[self._cell] = n

    @property
    def max_entries(self) -> int:
        return self._slots

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    @property
    def size_bytes(self) -> int:
        return self.entries * self._esize

    def resize(self, new_size: int) -> None:
        """Grow or shrink the file (never below the valid entries) and remap it."""
        length = max(self._round(new_size), self.entries * self._esize)
        if length == self._mapped and os.fstat(self._fd).st_size == length:
            return
        # no msync: the dirty pages of a shared mapping stay in the page cache after
        # munmap, and the owner's flush (or syncfs) makes them durable; msync of a 10 MiB
        # mapping cost ~6 ms per index, 47 s of a 3,850-partition clean shutdown
        self._unmap()
        os.ftruncate(self._fd, length)
        self._map(length)

    def trim_to_valid_size(self) -> None:
        """Shrink the file to exactly its entries (Kafka does this when the segment rolls)."""
        self.resize(self.entries * self._esize)

    # -- counting ---------------------------------------------------------------------------

    def _entry_is_nonzero_pread(self, i: int) -> bool:
        b = os.pread(self._fd, self._esize, i * self._esize)
        return len(b) == self._esize and b != self._zero

    @staticmethod
    def _count(nonzero, n_max: int) -> int:
        """Entries = 1 + last non-zero slot; slots >= 1 are a non-zero prefix then zeros."""
        if n_max <= 0:
            return 0
        lo, hi = 1, n_max  # find the first zero slot in [1, n_max)
        if hi > lo and nonzero(hi - 1):
            return n_max
        while lo < hi:
            mid = (lo + hi) // 2
            if nonzero(mid):
                lo = mid + 1
            else:
                hi = mid
        if lo == 1:
            return 1 if nonzero(0) else 0
        return lo

    def refresh(self) -> int:
        """Read-only indexes: re-count the entries the writer has added, remap. Returns entries."""
        if self.writable:
            return self.entries
        n_max = os.fstat(self._fd).st_size // self._esize
        n = self._count(self._entry_is_nonzero_pread, n_max)
        if n != self.entries or self._mm is None and n:
            self.entries = n
            self._map(n * self._esize)
        return n

    # -- entries ----------------------------------------------------------------------------

    def entry(self, slot: int) -> tuple[int, ...]:
        """The raw entry at ``slot`` (IndexError_ if out of range)."""
        if not 0 <= slot < self.entries:
            raise IndexError_(f"slot {slot} out of range (0..{self.entries - 1}) in {self.path}")
        return self.ENTRY.unpack_from(self._mm, slot * self._esize)

    def _last_raw(self) -> tuple[int, ...]:
        """The last entry (callers check ``entries`` first). Not cached: the append kernel
        adds entries behind this object's back."""
        return self.entry(self.entries - 1)

    def _array(self) -> np.ndarray:
        """The valid entries as a structured array view (drop it before resize/close)."""
        if not self.entries:
            return np.zeros(0, dtype=self.DTYPE)
        return np.frombuffer(self._mm, dtype=self.DTYPE, count=self.entries)

    def _append_raw(self, *fields: int) -> None:
        if self.entries >= self._slots:
            raise IndexFullError(f"index {self.path} is full ({self.entries} entries)")
        self.ENTRY.pack_into(self._mm, self.entries * self._esize, *fields)
        self.entries += 1

    def _append_array(self, entries: np.ndarray) -> None:
        """Append a structured array of entries (``DTYPE``) in one copy; the subclass's
        ``append_many`` checked ordering and capacity."""
        n = len(entries)
        if self.entries + n > self.max_entries:
            raise IndexFullError(f"index {self.path}: {n} entries do not fit")
        e = self._esize
        self._mm[self.entries * e:(self.entries + n) * e] = entries.tobytes()
        self.entries += n

    def _floor_slot(self, key: int) -> int:
        """Largest slot whose key <= ``key`` (-1: none); searches the warm tail first."""
        n = self.entries
        if n == 0:
            return -1
        warm = WARM_SECTION_BYTES // self._esize
        if n > warm:
            first_warm = n - warm
            if self.ENTRY.unpack_from(self._mm, first_warm * self._esize)[self._KEY] <= key:
                view = memoryview(self._mm)[first_warm * self._esize:n * self._esize]
                try:
                    return first_warm + self._floor(view, warm, key)
                finally:
                    view.release()
            n = first_warm
        return self._floor(self._mm, n, key)

    _KEY: ClassVar[int] = 0

    def _floor(self, buf: object, n: int, key: int) -> int:
        raise NotImplementedError

    def truncate_to_entries(self, n: int) -> None:
        """Keep the first ``n`` entries; zero the rest (so a re-open counts right)."""
        n = max(0, min(n, self.entries))
        if self.writable and self._mm is not None and n < self.entries:
            self._mm[n * self._esize:self.entries * self._esize] = bytes(
                (self.entries - n) * self._esize)
        self.entries = n

    def reset(self) -> None:
        """Drop every entry (recovery rebuilds from here)."""
        self.truncate_to_entries(0)

    def flush(self) -> None:
        """msync the mapped entries to disk."""
        if self._mm is not None and self.writable:
            self._mm.flush()

    def rename(self, new_path: str) -> None:
        os.rename(self.path, new_path)
        self.path = new_path

    def close(self, trim: bool = True) -> None:
        """Trim (writable, Kafka does this on close too), unmap, close. Idempotent."""
        if self._fd < 0:
            return
        if self.writable and trim and self._mm is not None:
            self.trim_to_valid_size()
        self._unmap()
        fd, self._fd = self._fd, -1
        os.close(fd)

    def sanity_check(self, log_size: int | None = None) -> str | None:
        """None if the index looks right, else why not (the file length, then the subclass's
        :meth:`_check_entries` on the entries)."""
        if self.corrupt_reason or not self.entries:
            return self.corrupt_reason
        return self._check_entries(log_size)

    def _check_entries(self, log_size: int | None) -> str | None:
        raise NotImplementedError

    def _columns(self, *names: str) -> list[np.ndarray]:
        """int64 copies of the named entry columns (no view of the mapping is kept)."""
        arr = self._array()
        try:
            return [arr[n].astype(np.int64) for n in names]
        finally:
            del arr

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r}, entries={self.entries})"


def index_entry_slots(sizes: list[int] | np.ndarray, since: int,
                      interval: int) -> tuple[list[int] | np.ndarray, int]:
    """Which of consecutive batches get an index entry: Kafka's rule (LogSegment.append), the
    one place it is written down. A batch gets an entry when more than ``interval``
    (index.interval.bytes) bytes were appended since the last entry; ``since`` is that count
    before the first batch. Returns (the batches' slots, the count after the last batch); an
    array of sizes gives an array of slots.
    """
    if isinstance(sizes, np.ndarray):
        n = len(sizes)
        if n and int(sizes.min()) > interval:
            # every batch is over the interval, so each after the first gets an entry (measured:
            # the loop below indexed 16-KiB batches at ~1.5 GB/s and limited recovery)
            return np.arange(0 if since > interval else 1, n), int(sizes[-1])
        slots, since = index_entry_slots(sizes.tolist(), since, interval)
        return np.asarray(slots, dtype=np.int64), since
    out = []
    for i, size in enumerate(sizes):
        if since > interval:
            out.append(i)
            since = 0
        since += size
    return out, since
