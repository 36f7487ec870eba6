"""PartitionLog: one partition's ordered segments, appends, reads, rolls, retention, recovery.

Single-writer rule: exactly one thread of one process (the partition's disk worker) calls the
mutating methods (append, roll, truncate_*, apply_retention, flush, close...). No locks are
taken. The segment list is copy-on-write: every change builds a new tuple and swaps it in one
assignment, so a read in the same process works on a consistent snapshot while segments are
deleted, and a deleted segment's files stay open (renamed ``.deleted``) for
``file.delete.delay.ms`` so slices already handed out can still be sent. Readers in other
processes use :class:`appliance.storage.reader.LogReader`.

Departures from Kafka, on purpose: a segment's roll clock starts at its first append, in broker
time, and restarts when the log is reopened (Kafka measures from the first batch's timestamp,
which a producer with a skewed clock controls); producer-state snapshots
are JSON; ``preallocate`` is accepted but segment files are not preallocated.
"""

from __future__ import annotations

import bisect
import logging
import os
import random
import struct
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from appliance.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaStorageError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
)
from appliance.records import batch_layout as L
from appliance.records.batch import decode_batch, set_log_append_time, validate_records
from appliance.storage.checkpoint import fsync_dir
from appliance.storage.flush import ChunkedWriteback, flush_due
from appliance.storage.producer_state import SNAPSHOT_SUFFIX, ProducerStateManager
from appliance.storage.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INT32_MAX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    LogSegment,
    parse_segment_file_name,
)
from appliance.storage.swap import complete_interrupted_swaps
from native.scan import SCAN_END

__all__ = [
    "PartitionLog", "AppendInfo", "FetchSlice", "SegmentInfo", "partition_dir_name",
    "parse_partition_dir_name", "EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP", "wall_ms",
]

log = logging.getLogger(__name__)

EARLIEST_TIMESTAMP = -2  # ListOffsets: the log start offset
LATEST_TIMESTAMP = -1    # ListOffsets: the log end offset
LONG_MAX = 2**63 - 1
_I64 = struct.Struct(">q")
_unpack_header = L.HEADER_STRUCT.unpack_from
_STOP_NAMES = {0: "end", 1: "partial batch", 2: "bad header (garbage or zero fill)",
               3: "CRC mismatch", 4: "offsets going backwards", 5: "limit"}


def wall_ms() -> int:
    return int(time.time() * 1000)


class AppendInfo(NamedTuple):
    first_offset: int
    last_offset: int
    max_timestamp: int
    log_append_time: int
    log_start_offset: int
    num_batches: int
    num_records: int
    duplicate: bool


class FetchSlice(NamedTuple):
    """A byte range of a segment file holding whole batches.

    ``fd`` stays open at least ``file.delete.delay.ms`` after the segment is deleted; the
    holder must not close it. ``path`` may be renamed (``.deleted``) by then: prefer ``fd``.
    """

    path: str
    fd: int | None
    position: int
    length: int
    first_offset: int
    segment_base: int


class SegmentInfo(NamedTuple):
    base_offset: int
    path: str
    segment: LogSegment


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def parse_partition_dir_name(name: str) -> tuple[str, int] | None:
    """(topic, partition) of ``<topic>-<partition>`` (split on the LAST '-'), else None."""
    topic, dash, part = name.rpartition("-")
    if not dash or not topic or not part.isdigit():
        return None
    return topic, int(part)


class _Batches(NamedTuple):
    rel_positions: list[int]
    sizes: list[int]
    base_offsets: list[int]
    last_deltas: list[int]
    max_timestamps: list[int]
    base_timestamps: list[int]
    producer_ids: list[int]
    producer_epochs: list[int]
    base_sequences: list[int]
    records_counts: list[int]
    attributes: list[int]


def _headers_unvalidated(mv: memoryview) -> list[tuple]:
    """Headers of the batches in ``mv`` checking only magic and lengths (validate=False)."""
    n = len(mv)
    if n == 0:
        raise InvalidRecordError("the records field is empty")
    out = []
    pos = 0
    while pos < n:
        if pos + L.HEADER_SIZE > n:
            raise CorruptRecordError(f"batch header at byte {pos} is truncated")
        h = _unpack_header(mv, pos)
        if h[3] != 2:
            raise CorruptRecordError(f"batch at byte {pos} has magic {h[3]}, expected 2")
        size = h[1] + L.LOG_OVERHEAD
        if h[1] < L.MIN_BATCH_LENGTH or pos + size > n:
            raise CorruptRecordError(f"batch at byte {pos}: batchLength {h[1]} does not fit")
        out.append(h)
        pos += size
    return out


def _require_keys(mv: memoryview, heads: list) -> None:
    """Kafka refuses keyless records in a compacted topic (the cleaner could not dedupe them).
    Control batches carry their own keys and are exempt. Raises InvalidRecordError."""
    pos = 0
    for h in heads:
        if not h[5] & L.CONTROL_BIT:
            for rec in decode_batch(mv, pos)[1]:
                if rec.key is None:
                    raise InvalidRecordError("Compacted topic cannot accept message without key")
        pos += h[1] + L.LOG_OVERHEAD


class PartitionLog:
    """The log of one partition (Kafka's LocalLog + the parts of UnifiedLog it needs).

    Not thread-safe: see the module docstring (single writer).
    """

    def __init__(self, path: str, config: Any, now_ms: Callable[[], int]) -> None:
        self.path = path
        name = os.path.basename(os.path.normpath(path))
        tp = parse_partition_dir_name(name)
        if tp is None:
            raise KafkaStorageError(f"{path}: not a <topic>-<partition> directory")
        self.topic, self.partition = tp
        self._segs: tuple[LogSegment, ...] = ()
        self.config = config
        self._now_ms = now_ms
        self._segs: tuple[LogSegment, ...] = ()
        self._bases: list[int] = []
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        self.producers = ProducerStateManager()
        self.log_start_offset = 0
        self.log_end_offset = 0
        self.recovery_point = 0
        self._hw = 0
        self.auto_high_watermark = True  # single broker: HW follows LEO
        self.last_flush_ms = now_ms()
        self.writeback_chunk_bytes: int | None = None
        self.writeback_window_bytes = 0
        self._dir_dirty = False
        self._closed = False
        self._rng = random.Random()

    # -- open / recovery --------------------------------------------------------------------

    @classmethod
    def open(cls, path: str, config: Any, *, recovery_point: int = 0, log_start_offset: int = 0,
             clean_shutdown: bool = False, now_ms: Callable[[], int] = wall_ms,
             writeback_chunk_bytes: int | None = None,
             writeback_window_bytes: int = 0) -> PartitionLog:
        """Open (creating if needed) the partition directory ``path`` and recover it.

        Without ``clean_shutdown`` every segment from the one holding ``recovery_point`` on is
        walked with CRC checks and cut at the first invalid or partial batch (later segments are
        deleted); missing or insane indexes are rebuilt in any case. Leftover ``.deleted``,
        ``.cleaned``, ``.swap`` and ``.tmp`` files are removed. ``writeback_chunk_bytes`` turns on
        chunked write-back of the active segment, ``writeback_window_bytes`` ahead of the disk at
        most (see :mod:`appliance.storage.flush`). Raises KafkaStorageError on I/O failure.
        """
        self = cls(path, config, now_ms)
        self.writeback_chunk_bytes = writeback_chunk_bytes
        self.writeback_window_bytes = writeback_window_bytes
        try:
            os.makedirs(path, exist_ok=True)
            self._load(recovery_point, log_start_offset, clean_shutdown)
        except OSError as e:
            self._close_segments()
            raise KafkaStorageError(f"cannot open log {path}: {e}") from e
        return self

    def _remove_leftovers(self) -> list[int]:
        bases = set()
        # An interrupted cleaner swap: finish it or drop it (Kafka's rules, see swap.py).
        complete_interrupted_swaps(self.path)
        names = os.listdir(self.path)
        for name in names:
            full = os.path.join(self.path, name)
            if name.endswith((DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX, ".tmp")):
                # .deleted were on their way out; swap.py has already dealt with .cleaned/.swap.
                log.info("%s: removing leftover %s", self.path, name)
                os.unlink(full)
                continue
            parsed = parse_segment_file_name(name)
            if parsed and parsed[1] == LOG_SUFFIX:
                bases.add(parsed[0])
        for name in names:
            parsed = parse_segment_file_name(name)
            if parsed and parsed[1] in (".index", ".timeindex") and parsed[0] not in bases:
                log.info("%s: removing index %s without a log file", self.path, name)
                os.unlink(os.path.join(self.path, name))
        return sorted(bases)

    def _load(self, recovery_point: int, log_start_offset: int, clean: bool) -> None:
        bases = self._remove_leftovers()
        segs: list[LogSegment] = []
        for b in bases:
            segs.append(LogSegment.open(self.path, b, self.config, create=False))
        if not segs:
            segs.append(self._new_segment(log_start_offset))
        # Recovery: every segment from the one holding the recovery point (unclean shutdown),
        # and any segment whose indexes are missing or fail their sanity check.
        first_unflushed = max(0, bisect.bisect_right([s.base_offset for s in segs], recovery_point) - 1)
        i = 0
        while i < len(segs):
            seg = segs[i]
            problem = seg.index_problem
            if (not clean and i >= first_unflushed) or problem is not None:
                why = problem or f"unclean shutdown, recovery point {recovery_point}"
                res = seg.recover()
                if res.truncated_bytes:
                    log.warning(
                        "%s: cut %d bytes at position %d: %s (recovering after %s)",
                        seg.log_path, res.truncated_bytes, res.valid_bytes,
                        _STOP_NAMES.get(res.stop_reason, res.stop_reason), why)
                if problem is not None:
                    log.warning("%s: rebuilt the indexes (%s)", seg.log_path, problem)
                if res.stop_reason != SCAN_END and i + 1 < len(segs):
                    for later in segs[i + 1:]:
                        log.warning("%s: deleting segment after the corruption in %s",
                                    later.log_path, os.path.basename(seg.log_path))
                        later.delete_files()
                    del segs[i + 1:]
            i += 1
        # An empty non-last segment (e.g. all cut) would break offset ordering: drop it.
        for seg in segs[:-1]:
            if seg.size == 0:
                seg.delete_files()
        segs = [s for s in segs[:-1] if s.size] + [segs[-1]]
        for seg in segs[:-1]:
            seg.on_become_inactive()
        active = segs[-1]
        active.resize_indexes(int(self.config.segment_index_bytes))
        if active.size and active.first_append_ms is None:
            active.first_append_ms = self._now_ms()  # the roll clock restarts with the process
        self._attach_writeback(active)
        self._set_segments(tuple(segs))
        self.log_end_offset = active.next_offset
        self.log_start_offset = min(max(log_start_offset, segs[0].base_offset), self.log_end_offset)
        self.recovery_point = self.log_end_offset if clean else min(recovery_point, self.log_end_offset)
        self._hw = self.log_end_offset
        self._rebuild_producer_state()

    def _rebuild_producer_state(self) -> None:
        self.producers.clear()
        start = self.producers.load_snapshot(self.path, self.log_end_offset)
        if start is None:
            start = self.log_start_offset
        for seg in self._segs:
            if seg.next_offset <= start or seg.size == 0:
                continue
            loc = seg.translate_offset(start)
            if loc is None:
                continue
            r = seg.batches_from(loc.position)
            if r.count == 0:
                continue
            buf = seg._data(seg.size)
            # Gather producerId of every batch with numpy; replay only idempotent batches.
            a = np.frombuffer(buf, dtype=np.uint8)
            pos = r.positions[:r.count]
            pid = a[pos[:, None] + (L.PRODUCER_ID_OFFSET + np.arange(8))].copy().view(">i8")[:, 0]
            del a
            for k in np.flatnonzero(pid >= 0).tolist():
                h = _unpack_header(buf, int(pos[k]))
                if h[11] >= 0:  # base sequence
                    self.producers.load_batch(h[9], h[10], h[11], h[6], h[0])
            del buf

    def _new_segment(self, base_offset: int) -> LogSegment:
        seg = LogSegment.open(self.path, base_offset, self.config, create=True)
        seg.roll_jitter_ms = self._jitter()
        self._dir_dirty = True
        return seg

    def _jitter(self) -> int:
        j, ms = int(self.config.segment_jitter_ms), int(self.config.segment_ms)
        return 0 if j <= 0 else self._rng.randrange(min(j, ms))

    def _attach_writeback(self, seg: LogSegment) -> None:
        if self.writeback_chunk_bytes:
            seg.writeback = ChunkedWriteback(self.writeback_chunk_bytes, self.writeback_window_bytes)
            seg.writeback.reset(seg.size)

    def _set_segments(self, segs: tuple[LogSegment, ...]) -> None:
        # Copy-on-write: build, then swap (one assignment each).
        self._bases = [s.base_offset for s in segs]
        self._segs = segs

    # -- state ------------------------------------------------------------------------------

    @property
    def config(self) -> Any:
        return self._config

    @config.setter
    def config(self, config: Any) -> None:
        """Switch to a new topic config (AlterConfigs); segments follow."""
        self._config = config
        # Plain attributes for the append path (TopicConfig lookups cost ~1 us each).
        self._max_message_bytes = int(config.max_message_bytes)
        self._log_append_time = config.message_timestamp_type == "LogAppendTime"
        self._ts_diff_max = int(config.message_timestamp_difference_max_ms)
        self._flush_messages = int(config.flush_messages)
        self._compact = "compact" in config.cleanup_policy
        for seg in self._segs:
            seg.apply_config(config)

    @property
    def active_segment(self) -> LogSegment:
        return self._segs[-1]

    @property
    def high_watermark(self) -> int:
        return self._hw

    @high_watermark.setter
    def high_watermark(self, value: int) -> None:
        self._hw = max(self.log_start_offset, min(int(value), self.log_end_offset))

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segs)

    def segments(self) -> tuple[SegmentInfo, ...]:
        """An immutable snapshot of the segments, oldest first."""
        return tuple(SegmentInfo(s.base_offset, s.log_path, s) for s in self._segs)

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaStorageError(f"log {self.path} is closed")

    # -- append -----------------------------------------------------------------------------

    def append(self, records: bytes | bytearray | memoryview, *, assign_offsets: bool = True,
               log_append_time_ms: int | None = None, validate: bool = True) -> AppendInfo:
        """Append one or more v2 record batches (a Produce request's records for this partition).

        Validates (``validate``: full record walk and CRC; else header sanity only), checks
        max.message.bytes per batch and the idempotent-producer sequence, assigns offsets by
        rewriting each batch's baseOffset (``assign_offsets``; else the batches' offsets must
        start at or past the log end offset), stamps LogAppendTime when the topic asks for it,
        rolls when due, and writes all batches with one write call. A writable buffer is
        rewritten in place; a read-only one is copied first.

        Raises CorruptRecordError, InvalidRecordError, MessageTooLargeError,
        UnsupportedCompressionTypeError, InvalidTimestampError, OutOfOrderSequenceError,
        InvalidProducerEpochError, UnknownProducerIdError, KafkaStorageError. On any error
        nothing is written and no state changes.
        """
        self._check_open()
        mv = memoryview(records)
        if mv.ndim != 1 or mv.itemsize != 1:
            mv = mv.cast("B")
        max_msg = self._max_message_bytes
        if validate:
            heads = validate_records(mv, max_batch_bytes=max_msg)
        else:
            heads = _headers_unvalidated(mv)
        if self._compact:
            _require_keys(mv, heads)
        now = self._now_ms()
        nb = len(heads)
        lat = self._log_append_time
        diff_max = self._ts_diff_max if not lat else LONG_MAX
        leo = self.log_end_offset
        # One pass over the headers (tuple order: batch_layout.FIELDS): per-batch columns,
        # limits, offsets, producer checks. Nothing is modified until every check passed.
        rel_positions, sizes, bases, last_offsets, max_ts = [], [], [], [], []
        pos = 0
        nxt = leo
        num_records = 0
        pa = None
        need_offsets = False
        for h in heads:
            size = h[1] + 12
            if size > max_msg:
                raise MessageTooLargeError(
                    f"batch of {size} bytes is over max.message.bytes {max_msg}")
            if diff_max < LONG_MAX:
                for ts in (h[7], h[8]):
                    if ts >= 0 and abs(ts - now) > diff_max:
                        raise InvalidTimestampError(
                            f"timestamp {ts} is more than {diff_max} ms from broker time {now}")
            if assign_offsets:
                base = nxt
            else:
                base = h[0]
                if base < nxt:
                    raise InvalidRecordError(
                        f"batch at byte {pos}: base offset {base} is below the next offset {nxt}")
            if base != h[0]:
                need_offsets = True
            if h[9] >= 0 and h[11] >= 0:  # producer id, base sequence: idempotent producer
                if pa is None:
                    pa = self.producers.begin()
                dup = pa.check(h[9], h[10], h[11], h[6])
                if dup is not None:
                    return AppendInfo(dup.first_offset, dup.last_offset, -1, -1,
                                      self.log_start_offset, nb, sum(x[12] for x in heads), True)
            rel_positions.append(pos)
            sizes.append(size)
            bases.append(base)
            last_offsets.append(base + h[6])
            max_ts.append(h[8])
            nxt = base + h[6] + 1
            num_records += h[12]
            pos += size
        first_offset, last_offset = bases[0], last_offsets[-1]

        # Rewrite headers (the CRC does not cover baseOffset; LogAppendTime recomputes it).
        buf = mv
        if need_offsets or lat:
            if mv.readonly:
                buf = memoryview(bytearray(mv))
            if need_offsets:
                for i in range(nb):
                    _I64.pack_into(buf, rel_positions[i], bases[i])
        lat_ts = -1
        if lat:
            lat_ts = now if log_append_time_ms is None else int(log_append_time_ms)
            for i in range(nb):
                set_log_append_time(buf, rel_positions[i], lat_ts)
            max_ts = [lat_ts] * nb

        active = self._segs[-1]
        reason = active.should_roll(len(buf), nb, last_offset, now)
        if reason:
            self._roll(reason)
            active = self._segs[-1]
        active.append(buf, rel_positions, sizes, last_offsets, max_ts, now)
        self.log_end_offset = last_offset + 1
        if self.auto_high_watermark:
            self._hw = self.log_end_offset
        if pa is not None:
            pa.commit([(bases[i], last_offsets[i]) for i in range(nb)
                       if heads[i][9] >= 0 and heads[i][11] >= 0])
        if self.log_end_offset - self.recovery_point >= self._flush_messages:
            self.flush()
        return AppendInfo(first_offset, last_offset, max(max_ts), lat_ts, self.log_start_offset,
                          nb, num_records, False)

    # -- roll -------------------------------------------------------------------------------

    def roll(self) -> None:
        """Start a new active segment at the log end offset (no-op if the active one is empty)."""
        self._check_open()
        if self._segs[-1].size:
            self._roll("requested")

    def _roll(self, reason: str) -> None:
        old = self._segs[-1]
        # Trim the old indexes before the new segment appears: a reader that sees the new
        # segment may then trust the old index files' lengths.
        old.on_become_inactive()
        new = self._new_segment(self.log_end_offset)
        self._attach_writeback(new)
        self._set_segments(self._segs + (new,))
        log.debug("%s: rolled to %s (%s)", self.path, new.log_path, reason)

    # -- read -------------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_batch: bool = True) -> FetchSlice | None:
        """Whole batches from the one holding ``offset``: at most ``max_bytes`` (but one batch
        even if larger, with ``min_one_batch``), none with base offset >= ``max_offset`` (the
        high watermark bound; default the log end offset). None when nothing is available yet.

        Raises OffsetOutOfRangeError when ``offset`` < log start offset or > log end offset.
        """
        segs, bases = self._segs, self._bases
        leo = self.log_end_offset
        if offset < self.log_start_offset or offset > leo:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self.log_start_offset}, {leo}] of {self.path}")
        bound = leo if max_offset is None else min(max_offset, leo)
        if offset >= bound:
            return None
        i = max(0, bisect.bisect_right(bases, offset) - 1)
        for seg in segs[i:]:
            if seg.base_offset >= bound:
                break
            r = seg.read(offset, max_bytes, bound, min_one_batch)
            if r is not None:
                return FetchSlice(seg.log_path, seg.fd, r[0], r[1], r[2], seg.base_offset)
        return None

    def read_bytes(self, offset: int, max_bytes: int, **kw: Any) -> bytes:
        """The bytes of :meth:`read` (b'' when None); for tools and tests."""
        s = self.read(offset, max_bytes, **kw)
        return b"" if s is None else os.pread(s.fd, s.length, s.position)

    def offset_for_timestamp(self, ts: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= ``ts`` at or after the log
        start offset (Kafka ListOffsets); -2/-1 give (log start, -1)/(log end, -1). None if no
        record is that recent."""
        if ts == EARLIEST_TIMESTAMP:
            return self.log_start_offset, -1
        if ts == LATEST_TIMESTAMP:
            return self.log_end_offset, -1
        for seg in self._segs:
            if seg.size == 0 or seg.next_offset <= self.log_start_offset:
                continue
            if seg.max_timestamp < ts:
                continue
            loc = seg.find_offset_by_timestamp(ts, self.log_start_offset)
            if loc is None:
                continue
            _, recs = decode_batch(seg.batch_bytes(loc))
            for rec in recs:
                if rec.timestamp >= ts and rec.offset >= self.log_start_offset:
                    return rec.offset, rec.timestamp
            return loc.base_offset, loc.max_timestamp
        return None

    # -- truncation -------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Drop everything at or after ``offset`` (a follower's truncation). Raises
        KafkaStorageError on I/O failure."""
        self._check_open()
        if offset >= self.log_end_offset:
            return
        if offset < self.log_start_offset or offset <= self._segs[0].base_offset:
            self.truncate_fully_and_start_at(offset)
            return
        keep = tuple(s for s in self._segs if s.base_offset < offset)
        drop = [s for s in self._segs if s.base_offset >= offset]
        active = keep[-1]
        was_inactive = active is not self._segs[-1]
        self._set_segments(keep)
        self._schedule_delete(drop)
        active.truncate_to(offset)
        if was_inactive:
            active.resize_indexes(int(self.config.segment_index_bytes))
            self._attach_writeback(active)
        self.log_end_offset = active.next_offset
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self._hw = min(self._hw, self.log_end_offset)
        self.producers.truncate_after(self.log_end_offset)
        log.info("%s: truncated to offset %d", self.path, self.log_end_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start empty at ``offset``."""
        self._check_open()
        old = list(self._segs)
        for s in old:
            s.rename_to_deleted()
        new = self._new_segment(offset)
        new.resize_indexes(int(self.config.segment_index_bytes))
        self._attach_writeback(new)
        self._set_segments((new,))
        self._schedule_delete(old, renamed=True)
        self.log_start_offset = self.log_end_offset = self.recovery_point = self._hw = offset
        self.producers.clear()

    def maybe_increment_log_start_offset(self, offset: int) -> None:
        """Raise the log start offset (DeleteRecords). Raises OffsetOutOfRangeError when
        ``offset`` is past the high watermark."""
        if offset > self._hw:
            raise OffsetOutOfRangeError(
                f"cannot move the log start offset to {offset}: high watermark is {self._hw}")
        if offset > self.log_start_offset:
            self.log_start_offset = offset

    # -- retention / deletion ---------------------------------------------------------------

    def apply_retention(self, now_ms: int) -> int:
        """Delete old segments by retention.ms (the segment's largest timestamp), retention.bytes
        and the log start offset, oldest first (Kafka's deleteOldSegments). The active segment is
        deleted by time or size only after a roll replaces it. Returns segments deleted."""
        self._check_open()
        cfg = self.config
        deleted = 0
        if "delete" in cfg.cleanup_policy:
            rms = int(cfg.retention_ms)
            if rms >= 0:
                deleted += self._delete_while(
                    lambda seg, nxt, st: now_ms - seg.largest_timestamp > rms, "retention.ms")
            rbytes = int(cfg.retention_bytes)
            if rbytes >= 0:
                state = {"diff": self.size_bytes - rbytes}

                def by_size(seg: LogSegment, nxt: LogSegment | None, st: dict) -> bool:
                    if state["diff"] - seg.size >= 0:
                        state["diff"] -= seg.size
                        return True
                    return False

                deleted += self._delete_while(by_size, "retention.bytes")
        lso = self.log_start_offset
        deleted += self._delete_while(
            lambda seg, nxt, st: nxt is not None and nxt.base_offset <= lso, "log start offset")
        self.purge_deleted(now_ms)
        return deleted

    def _delete_while(self, pred: Callable, why: str) -> int:
        segs = self._segs
        victims: list[LogSegment] = []
        for i, seg in enumerate(segs):
            nxt = segs[i + 1] if i + 1 < len(segs) else None
            if nxt is None and seg.size == 0:
                break  # never the empty active segment
            if not pred(seg, nxt, None):
                break
            victims.append(seg)
        if not victims:
            return 0
        if len(victims) == len(segs):
            self._roll(f"all segments expired by {why}")
        keep = tuple(s for s in self._segs if s not in victims)
        self._set_segments(keep)
        self._schedule_delete(victims)
        self.log_start_offset = max(self.log_start_offset, keep[0].base_offset)
        self._hw = max(self._hw, self.log_start_offset)
        self.recovery_point = max(self.recovery_point, self.log_start_offset)
        for s in victims:
            log.info("%s: deleting segment %d (%s)", self.path, s.base_offset, why)
        return len(victims)

    def replace_segments(self, old: list[LogSegment], new: LogSegment | None,
                         hook: Callable[[str], None] | None = None) -> None:
        """Swap the consecutive inactive segments ``old`` for ``new`` (Kafka's replaceSegments).

        ``new`` is the cleaner's output: written under the ``.cleaned`` suffix, fsynced, its
        indexes trimmed, base offset ``old[0].base_offset``; None drops ``old`` (every record
        in them was redundant). Crash-safe in the order :mod:`appliance.storage.swap`
        documents (``.cleaned`` -> ``.swap``; old -> ``.deleted``; ``.swap`` -> final names);
        ``hook(step)`` is called after the steps "swap", "deleted" and "swapped" (the
        cleaner's crash tests kill the process there). The old segments stay open for
        ``file.delete.delay.ms``. Raises ValueError (``old`` is not a run of inactive segments
        of this log) and KafkaStorageError (I/O failure).
        """
        segs = self._segs
        try:
            i = segs.index(old[0]) if old else -1
        except ValueError:
            i = -1
        if i < 0 or segs[i:i + len(old)] != tuple(old) or i + len(old) >= len(segs):
            raise ValueError(f"{self.path}: segments to replace are not a run of inactive segments")
        if new is not None and new.base_offset != old[0].base_offset:
            raise ValueError(f"{self.path}: cleaned segment base {new.base_offset} != "
                             f"{old[0].base_offset}")
        try:
            if new is not None:
                new.change_suffix(SWAP_SUFFIX)
                fsync_dir(self.path)
            if hook:
                hook("swap")
            for s in old:
                s.rename_to_deleted()
            if hook:
                hook("deleted")
            if new is not None:
                new.change_suffix("")
            fsync_dir(self.path)
        except OSError as e:
            raise KafkaStorageError(f"{self.path}: segment swap failed: {e}") from e
        if hook:
            hook("swapped")
        self._set_segments(segs[:i] + ((new,) if new is not None else ()) + segs[i + len(old):])
        self._schedule_delete(old, renamed=True)

    def _schedule_delete(self, segs: list[LogSegment], renamed: bool = False) -> None:
        due = self._now_ms() + int(self.config.file_delete_delay_ms)
        for s in segs:
            if not renamed:
                s.rename_to_deleted()
            self._pending_deletes.append((due, s))

    def purge_deleted(self, now_ms: int) -> int:
        """Remove the ``.deleted`` files whose delay has passed. Returns segments removed."""
        keep, n = [], 0
        for due, seg in self._pending_deletes:
            if due <= now_ms:
                seg.delete_files()
                n += 1
            else:
                keep.append((due, seg))
        self._pending_deletes = keep
        return n

    # -- flush ------------------------------------------------------------------------------

    def flush(self, up_to_offset: int | None = None) -> None:
        """fsync the segments holding [recovery_point, up_to_offset) and their indexes, then
        advance the recovery point. Raises KafkaStorageError."""
        self._check_open()
        up_to = self.log_end_offset if up_to_offset is None else min(up_to_offset, self.log_end_offset)
        if up_to > self.recovery_point:
            for seg in self._segs:
                if seg.next_offset > self.recovery_point and seg.base_offset < up_to:
                    seg.flush()
            self.recovery_point = up_to
        if self._dir_dirty:
            try:
                fsync_dir(self.path)
            except OSError as e:
                raise KafkaStorageError(f"fsync of {self.path} failed: {e}") from e
            self._dir_dirty = False
        self.last_flush_ms = self._now_ms()

    def maybe_flush(self, now_ms: int) -> None:
        """Flush when flush.messages are unflushed or flush.ms passed since the last flush."""
        if flush_due(self.log_end_offset - self.recovery_point, self.last_flush_ms, now_ms,
                     int(self.config.flush_messages), int(self.config.flush_ms)):
            self.flush()

    # -- close ------------------------------------------------------------------------------

    def close(self) -> None:
        """Snapshot producer state, close every segment (trimming indexes). Does not flush:
        the owner flushes first for a clean shutdown. Idempotent."""
        if self._closed:
            return
        try:
            if self.producers.producers:
                self.producers.write_snapshot(self.path, self.log_end_offset)
        except OSError as e:
            log.warning("%s: producer state snapshot failed: %s", self.path, e)
        self._close_segments()
        self._closed = True

    def _close_segments(self) -> None:
        for s in self._segs:
            s.close()
        for _, s in self._pending_deletes:
            s.close(trim=False)

    def delete_snapshots(self) -> None:
        for name in os.listdir(self.path):
            if name.endswith(SNAPSHOT_SUFFIX):
                os.unlink(os.path.join(self.path, name))

    def __repr__(self) -> str:
        return (f"PartitionLog({self.topic}-{self.partition}, start={self.log_start_offset}, "
                f"end={self.log_end_offset}, segments={len(self._segs)})")


assert INT32_MAX == 0x7FFFFFFF
