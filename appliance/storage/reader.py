"""LogReader: read-only access to a partition directory from another process.

Network workers, Spark executors and CLI tools read segment files in place while the disk worker
appends, rolls and deletes. The reader lists the directory, opens segments lazily (read-only fd,
read-only mmaps of the indexes' valid entries, see :mod:`appliance.storage.index`), and refreshes
its list when asked for an offset beyond what it knows or when a file vanished. Segments that
disappear are retired: their descriptors stay open ``retire_delay_s`` seconds so slices already
handed out stay readable, then they are closed.

The reader cannot know the log end offset or the high watermark; callers pass ``max_offset`` (the
high watermark from the shared partition table or the replication-offset checkpoint). Without
it, every complete batch on disk is readable.

Known limit: if the writer truncates a file (replication truncation, recovery after a crash of the
disk worker) below what a reader has mapped, touching the cut pages raises SIGBUS in the reader.

Thread-safety: none; use one LogReader per thread.
"""

from __future__ import annotations

import bisect
import os
import time

from appliance.errors import KafkaStorageError, OffsetOutOfRangeError
from appliance.storage.log import FetchSlice, parse_partition_dir_name
from appliance.storage.segment import LOG_SUFFIX, LogSegment, parse_segment_file_name

__all__ = ["LogReader"]

_NO_BOUND = 2**63 - 1


def _same_file(seg: LogSegment) -> bool:
    """The segment's path still names the file its descriptor has open."""
    try:
        st = os.stat(seg.log_path)
    except FileNotFoundError:
        return False
    fst = os.fstat(seg.fd)
    return st.st_ino == fst.st_ino and st.st_dev == fst.st_dev


class LogReader:
    """Read-only view of one ``<topic>-<partition>`` directory."""

    def __init__(self, path: str, *, retire_delay_s: float = 60.0) -> None:
        self.path = path
        tp = parse_partition_dir_name(os.path.basename(os.path.normpath(path)))
        if tp is None:
            raise KafkaStorageError(f"{path}: not a <topic>-<partition> directory")
        self.topic, self.partition = tp
        self.retire_delay_s = retire_delay_s
        self._bases: list[int] = []
        self._open: dict[int, LogSegment] = {}
        self._retired: list[tuple[float, LogSegment]] = []
        self.refresh()

    def refresh(self) -> list[int]:
        """Re-list the directory; returns the segment base offsets (oldest first)."""
        try:
            names = os.listdir(self.path)
        except FileNotFoundError:
            names = []
        bases = sorted(p[0] for p in map(parse_segment_file_name, names)
                       if p is not None and p[1] == LOG_SUFFIX)
        now = time.monotonic()
        live = set(bases)
        for b in list(self._open):
            if b not in live:
                self._retired.append((now + self.retire_delay_s, self._open.pop(b)))
        still = []
        for due, seg in self._retired:
            if due <= now:
                seg.close(trim=False)
            else:
                still.append((due, seg))
        self._retired = still
        self._bases = bases
        return bases

    def _segment(self, base: int) -> LogSegment | None:
        seg = self._open.get(base)
        if seg is not None and not _same_file(seg):
            # Deleted (renamed .deleted) by the writer, or replaced by the cleaner's output
            # under the same name: retire it; the caller re-lists.
            self._retired.append((time.monotonic() + self.retire_delay_s, self._open.pop(base)))
            return None
        if seg is None:
            try:
                seg = LogSegment.open(self.path, base, None, writable=False)
            except KafkaStorageError:
                return None  # deleted meanwhile
            self._open[base] = seg
        return seg

    @property
    def log_start_offset_on_disk(self) -> int | None:
        """Base offset of the oldest segment (the log start offset may be above it)."""
        return self._bases[0] if self._bases else None

    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_batch: bool = True) -> FetchSlice | None:
        """Like :meth:`PartitionLog.read`; None when no complete batch at ``offset`` is on disk
        yet. Raises OffsetOutOfRangeError when ``offset`` is below the oldest segment."""
        bound = _NO_BOUND if max_offset is None else max_offset
        if offset >= bound:
            return None
        for attempt in range(2):
            if attempt or not self._bases or offset < self._bases[0]:
                self.refresh()
            if not self._bases:
                return None
            if offset < self._bases[0]:
                raise OffsetOutOfRangeError(
                    f"offset {offset} is below the oldest segment {self._bases[0]} of {self.path}")
            i = bisect.bisect_right(self._bases, offset) - 1
            vanished = False
            for base in self._bases[i:]:
                if base >= bound:
                    return None
                seg = self._segment(base)
                if seg is None:
                    vanished = True
                    break
                last = base == self._bases[-1]
                if last:
                    seg.refresh_size()
                    seg.offset_index.refresh()
                r = seg.read(offset, max_bytes, bound, min_one_batch)
                if r is not None:
                    return FetchSlice(seg.log_path, seg.fd, r[0], r[1], r[2], base)
            if not vanished and attempt == 0:
                # Maybe a newer segment appeared after our listing: look once more.
                known = len(self._bases)
                self.refresh()
                if len(self._bases) == known:
                    return None
        return None

    def offset_for_timestamp(self, ts: int, log_start: int = 0,
                             bound: int | None = None) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record in [log_start, bound) whose timestamp is
        >= ``ts`` (ListOffsets by time), or None when no such record is readable yet.

        Works from the segment files alone (time index, then a batch scan), so it is safe while
        the writer appends: a stale time index only makes the scan start earlier.
        """
        from appliance.records.batch import decode_batch
        bound = _NO_BOUND if bound is None else bound
        bases = self.refresh()
        for i, base in enumerate(bases):
            if base >= bound:
                break
            if i + 1 < len(bases) and bases[i + 1] <= log_start:
                continue  # wholly below the log start offset
            seg = self._segment(base)
            if seg is None:
                continue  # deleted by retention meanwhile
            seg.refresh_size()
            loc = seg.find_offset_by_timestamp(ts, log_start)
            if loc is None:
                continue
            if loc.base_offset >= bound:
                return None
            for rec in decode_batch(seg.batch_bytes(loc))[1]:
                if rec.offset >= bound:
                    return None
                if rec.timestamp >= ts and rec.offset >= log_start:
                    return rec.offset, rec.timestamp
        return None

    def read_bytes(self, offset: int, max_bytes: int, **kw) -> bytes:
        s = self.read(offset, max_bytes, **kw)
        return b"" if s is None else os.pread(s.fd, s.length, s.position)

    def close(self) -> None:
        for seg in self._open.values():
            seg.close(trim=False)
        for _, seg in self._retired:
            seg.close(trim=False)
        self._open.clear()
        self._retired.clear()
