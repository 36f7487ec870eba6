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

import os
import time
from collections.abc import Callable

from appliance.errors import KafkaStorageError, OffsetOutOfRangeError
from appliance.records.stored import decode_stored
from appliance.storage.log import parse_partition_dir_name
from appliance.storage.segment import (
    LOG_SUFFIX,
    LogSegment,
    SegmentOpenError,
    parse_segment_file_name,
)
from appliance.storage.segment_list import FetchSlice, SegmentList, SegmentVanished
from appliance.storage.txn_index import AbortedTxn, collect_aborted

__all__ = ["LogReader"]

_NO_BOUND = 2**63 - 1


def _close_now(seg: LogSegment) -> None:
    seg.close(trim=False)


def _same_file(seg: LogSegment) -> bool:
    """The segment's path still names the file its descriptor has open."""
    try:
        st = os.stat(seg.log_path)
    except FileNotFoundError:
        return False
    fst = os.fstat(seg.fd)
    return st.st_ino == fst.st_ino and st.st_dev == fst.st_dev


def _cut(loc, log_start: int, bound: int) -> bool:
    """Whether the batch at ``loc`` holds offsets on both sides of an end of the range."""
    return loc.base_offset < log_start or loc.last_offset >= bound


class LogReader:
    """Read-only view of one ``<topic>-<partition>`` directory."""

    def __init__(self, path: str, *, retire_delay_s: float = 60.0,
                 close_segment: Callable[[LogSegment], None] = _close_now) -> None:
        """``close_segment`` closes a retired segment's files, or every segment's at
        :meth:`close`: a network worker hands them to its FileRemover's thread, since the last
        close of a deleted segment frees its page cache (slow for a big one)."""
        self.path = path
        self._close_segment = close_segment
        tp = parse_partition_dir_name(os.path.basename(os.path.normpath(path)))
        if tp is None:
            raise KafkaStorageError(f"{path}: not a <topic>-<partition> directory")
        self.topic, self.partition = tp
        self.retire_delay_s = retire_delay_s
        self._list = SegmentList()
        self._retired: list[tuple[float, LogSegment]] = []
        self.refresh()

    def _lazy(self, base: int) -> LogSegment:
        return LogSegment(self.path, base, None, writable=False)

    def _retire(self, seg: LogSegment, now: float) -> None:
        if seg.files_open:
            self._retired.append((now + self.retire_delay_s, seg))

    def refresh(self) -> list[int]:
        """Re-list the directory; returns the segment base offsets (oldest first). Segments
        gone from the listing are retired; files of older segments not read for
        ``retire_delay_s`` are closed (they reopen on the next read)."""
        try:
            names = os.listdir(self.path)
        except FileNotFoundError:
            names = []
        bases = sorted(p[0] for p in map(parse_segment_file_name, names)
                       if p is not None and p[1] == LOG_SUFFIX)
        now = time.monotonic()
        known = {s.base_offset: s for s in self._list}
        segs = [known.pop(b, None) or self._lazy(b) for b in bases]
        for seg in known.values():
            self._retire(seg, now)
        idle = now - self.retire_delay_s
        for seg in segs[:-1]:
            if seg.files_open and seg.last_used <= idle:
                seg.release(trim=False)
        still = []
        for due, seg in self._retired:
            if due <= now:
                self._close_segment(seg)
            else:
                still.append((due, seg))
        self._retired = still
        self._list = SegmentList(segs)
        return bases

    def _prepare(self, seg: LogSegment, is_last: bool) -> bool:
        """Before a read of ``seg``: False when it was deleted (renamed ``.deleted``) or
        replaced by the cleaner's output under the same name since it was opened (it is
        retired; the caller re-lists). The last segment picks up what the writer appended."""
        try:
            if seg.files_open and not _same_file(seg):
                self._retire(seg, time.monotonic())
                fresh = self._lazy(seg.base_offset)
                self._list = SegmentList(fresh if s is seg else s for s in self._list)
                return False
            if is_last or not seg.files_open:
                seg.refresh_size()
                seg.offset_index  # noqa: B018 - opened here: a file gone shows as SegmentOpenError now
                seg.index_stale = True  # re-counted when a read needs it (LogSegment.translate_offset)
        except SegmentOpenError:
            return False  # deleted meanwhile
        return True

    @property
    def log_start_offset_on_disk(self) -> int | None:
        """Base offset of the oldest segment (the log start offset may be above it)."""
        bases = self._list.bases
        return bases[0] if bases else None

    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_batch: bool = True) -> FetchSlice | None:
        """Like :meth:`PartitionLog.read`; None when no complete batch at ``offset`` is on disk
        yet. Raises OffsetOutOfRangeError when ``offset`` is below the oldest segment."""
        bound = _NO_BOUND if max_offset is None else max_offset
        if offset >= bound:
            return None
        listed = False
        for _ in range(3):
            bases = self._list.bases
            if not listed and (not bases or offset < bases[0]):
                bases = self.refresh()
            listed = False
            if not bases:
                return None
            if offset < bases[0]:
                raise OffsetOutOfRangeError(
                    f"offset {offset} is below the oldest segment {bases[0]} of {self.path}")
            try:
                r = self._list.read(offset, max_bytes, bound, min_one_batch, self._prepare)
            except SegmentVanished:
                self.refresh()
                listed = True
                continue
            if r is not None:
                return r
            # Maybe a newer segment appeared after our listing: look once more.
            if len(self.refresh()) == len(bases):
                return None
            listed = True
        return None

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [fetch_offset, upper_bound) (a read_committed
        fetch's answer), from the ``.txnindex`` files of the segments from the one holding
        ``fetch_offset`` on. The directory is listed again first: a marker may sit in a
        segment rolled since the last listing. Raises OSError."""
        self.refresh()
        segs = self._list
        if not len(segs):
            return []
        first = max(segs.floor_index(fetch_offset), 0)
        return collect_aborted((segs[i].txn_index_path for i in range(first, len(segs))),
                               fetch_offset, upper_bound)

    def offset_for_timestamp(self, ts: int, log_start: int = 0,
                             bound: int | None = None) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record in [log_start, bound) whose timestamp is
        >= ``ts`` (ListOffsets by time), or None when no such record is readable yet.

        Works from the segment files alone (time index, then a batch scan), so it is safe while
        the writer appends: a stale time index only makes the scan start earlier.
        """
        bound = _NO_BOUND if bound is None else bound
        self.refresh()
        segs = self._list.segments
        for i, seg in enumerate(segs):
            if seg.base_offset >= bound:
                break
            if i + 1 < len(segs) and segs[i + 1].base_offset <= log_start:
                continue  # wholly below the log start offset
            if not self._prepare(seg, True):
                continue  # deleted by retention meanwhile
            loc = seg.find_offset_by_timestamp(ts, log_start)
            if loc is None:
                continue
            if loc.base_offset >= bound:
                return None
            for rec in decode_stored(seg.batch_bytes(loc)):
                if rec.offset >= bound:
                    return None
                if rec.timestamp >= ts and rec.offset >= log_start:
                    return rec.offset, rec.timestamp
        return None

    def max_timestamp(self, log_start: int = 0,
                      bound: int | None = None) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record in [log_start, bound) with the largest
        timestamp (ListOffsets' MAX_TIMESTAMP, -3, KIP-734), or None for an empty range.
        Batch headers find the best batch wholly inside the range (the earliest on ties, as
        Kafka); the batches cut by either end are read record by record; only those few
        batches are decoded."""
        bound = _NO_BOUND if bound is None else bound
        self.refresh()
        segs = self._list.segments
        best = None  # (segment, BatchLocation) of the best batch wholly inside the range
        edges = []  # the same for the batches cut by an end of it
        for i, seg in enumerate(segs):
            if seg.base_offset >= bound:
                break
            nxt = segs[i + 1].base_offset if i + 1 < len(segs) else _NO_BOUND
            if nxt <= log_start:
                continue
            if not self._prepare(seg, True):
                continue
            loc = seg.max_timestamp_batch(log_start, bound)
            if loc is not None and (best is None or loc.max_timestamp > best[1].max_timestamp):
                best = (seg, loc)  # strictly larger: the earlier segment wins a tie
            for edge in (log_start, bound - 1):
                if seg.base_offset <= edge < nxt:
                    e = seg.translate_offset(edge)
                    if e is not None and _cut(e, log_start, bound):
                        edges.append((seg, e))
        found = None
        for seg, loc in edges + ([best] if best is not None else []):
            for rec in decode_stored(seg.batch_bytes(loc)):
                if log_start <= rec.offset < bound and (
                        found is None or (-rec.timestamp, rec.offset) < (-found[1], found[0])):
                    found = (rec.offset, rec.timestamp)
        return found

    def offsets_before(self, ts: int, max_num: int, log_start: int, bound: int,
                       now_ms: int) -> list[int]:
        """ListOffsets v0's answer (0.8's getOffsetsBefore): up to ``max_num`` offsets, newest
        first, out of the segments' base offsets paired with their files' modification times,
        plus ``bound`` (the high watermark) paired with ``now_ms`` (with the last segment's time
        when that segment is empty, just rolled). ``ts`` -1 starts from the newest entry, -2 answers the log start alone, another
        time starts from the newest entry whose time is at or before it (none: empty). A base
        offset below ``log_start`` (records deleted inside the first segment) reads as it."""
        if ts == -2:
            return [log_start][:max_num]
        self.refresh()
        entries: list[tuple[int, int]] = []
        end_time = now_ms
        for seg in self._list.segments:
            try:
                st = os.stat(seg.log_path)
            except FileNotFoundError:
                continue  # deleted by retention meanwhile
            mtime = st.st_mtime_ns // 1_000_000
            if seg.base_offset < bound:
                entries.append((max(seg.base_offset, log_start), mtime))
            # an empty last segment (just rolled) dates the log end by its own time, as in 0.8
            end_time = now_ms if st.st_size > 0 else mtime
        if not entries or entries[-1][0] < bound:
            entries.append((bound, end_time))
        if ts == -1:
            start = len(entries) - 1
        else:
            start = max((i for i, (_, t) in enumerate(entries) if t <= ts), default=-1)
        picked: list[int] = []
        for offset, _ in reversed(entries[:start + 1]):
            if len(picked) == max_num:
                break
            if not picked or picked[-1] != offset:  # two entries clamped to the log start
                picked.append(offset)
        return picked

    def read_bytes(self, offset: int, max_bytes: int, **kw) -> bytes:
        s = self.read(offset, max_bytes, **kw)
        return b"" if s is None else os.pread(s.fd, s.length, s.position)

    def close(self) -> None:
        for seg in self._list:
            if seg.files_open:
                self._close_segment(seg)
        for _, seg in self._retired:
            self._close_segment(seg)
        self._list = SegmentList()
        self._retired.clear()
