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
are JSON; ``preallocate`` reserves blocks a window past the active segment's end without
changing its size (:mod:`appliance.storage.preallocate`), not whole segments.
"""

from __future__ import annotations

import logging
import os
import random
import struct
import time
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from appliance.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaStorageError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
)
from appliance.records.batch import set_log_append_time, validate_records
from appliance.records.batch_layout import CONTROL_BIT, TRANSACTIONAL_BIT
from appliance.records.control import build_marker, parse_marker
from appliance.records.stored import decode_stored, has_legacy_entry, stored_legacy_magic
from appliance.storage import txn_index
from appliance.storage.append_checks import headers_unvalidated, require_keys
from appliance.storage.checkpoint import fsync_dir
from appliance.storage.file_remover import remove_now
from appliance.storage.flush import ChunkedWriteback, flush_due, flush_segments
from appliance.storage.legacy_append import to_legacy_entries
from appliance.storage.loader import load_segments, recover_producers, replay_producer_state
from appliance.storage.preallocate import NEVER
from appliance.storage.producer_state import SNAPSHOT_SUFFIX, ProducerStateManager
from appliance.storage.retention import apply_retention
from appliance.storage.segment import LogSegment, SegmentOpenError
from appliance.storage.segment_list import FetchSlice, SegmentList
from appliance.storage.swap import swap_in
from native.append_commit import (
    APPEND_NO_FD,
    APPEND_PRODUCERS,
    APPEND_ROLL,
    APPEND_WRITE_FAILED,
    CALL_IN,
    CALL_IN_AT,
    CALL_OUT,
    CALL_OUT_AT,
    MODE_COMMIT,
    MODE_PLAN,
    NOW_FROM_CLOCK,
    O_BATCHES,
    O_ERRNO,
    P_MODE,
    P_PRODUCERS_CHECKED,
    append_commit,
    new_work,
    work_views,
)
from native.append_plan import (
    O_LAST_OFFSET,
    O_RECORDS,
    P_MAX_BATCH,
    P_NOW,
    P_TS_DIFF_MAX,
    P_VALIDATE,
    PLAN_MORE_ROWS,
    PLAN_SLOW,
    R_BASE,
    R_BASE_SEQUENCE,
    R_DELTA,
    R_LAST,
    R_PRODUCER_EPOCH,
    R_PRODUCER_ID,
)
from native.batch_layout import LOG_OVERHEAD
from native.buffers import as_u8
from native.scan import ScanResult, ScanStop, scan_batches

__all__ = [
    "PartitionLog", "AppendInfo", "FetchSlice", "SegmentInfo", "partition_dir_name",
    "parse_partition_dir_name", "EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP", "wall_ms",
    "IDLE_RELEASE_MS",
]

log = logging.getLogger(__name__)

EARLIEST_TIMESTAMP = -2  # ListOffsets: the log start offset
LATEST_TIMESTAMP = -1    # ListOffsets: the log end offset
LONG_MAX = 2**63 - 1
OFFSETS_TOPIC = "__consumer_offsets"
#: An inactive segment's files are closed after this long without a read (see FetchSlice).
IDLE_RELEASE_MS = 60_000
_I64 = struct.Struct(">q")
#: Batches the planned append's work array holds at first (it doubles when a request has more).
_PLAN_ROWS = 16


def wall_ms() -> int:
    return int(time.time() * 1000)


_tuple_new = tuple.__new__


class AppendInfo(NamedTuple):
    first_offset: int
    last_offset: int
    max_timestamp: int
    log_append_time: int
    log_start_offset: int
    num_batches: int
    num_records: int
    duplicate: bool


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
        self._list = SegmentList()
        self._segs: tuple[LogSegment, ...] = ()
        self.config = config
        self._now_ms = now_ms
        # the append kernel reads the wall clock itself unless a test injected a clock
        self._kernel_clock = now_ms is wall_ms
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        self.producers = ProducerStateManager()
        # the markers of the last append that had any, and the AbortedTxn each indexed (or None)
        self.txns_ended: list = []
        self.log_start_offset = 0
        self.log_end_offset = 0
        self.recovery_point = 0
        self._hw = 0
        self.last_flush_ms = now_ms()
        self.writeback_chunk_bytes: int | None = None
        self.writeback_window_bytes = 0
        self.remove_files: Callable[[Iterable[str]], None] = remove_now
        self._dir_dirty = False
        self._closed = False
        self._rng = random.Random()

    # -- open / recovery --------------------------------------------------------------------

    @classmethod
    def open(cls, path: str, config: Any, *, recovery_point: int = 0, log_start_offset: int = 0,
             clean_shutdown: bool = False, now_ms: Callable[[], int] = wall_ms,
             writeback_chunk_bytes: int | None = None,
             writeback_window_bytes: int = 0,
             remove_files: Callable[[Iterable[str]], None] = remove_now) -> PartitionLog:
        """Open (creating if needed) the partition directory ``path`` and recover it.

        Without ``clean_shutdown`` every segment from the one holding ``recovery_point`` on is
        walked with CRC checks and cut at the first invalid or partial batch (later segments are
        deleted); missing or insane indexes are rebuilt in any case. Leftover ``.deleted``,
        ``.cleaned``, ``.swap`` and ``.tmp`` files are removed. ``writeback_chunk_bytes`` turns on
        chunked write-back of the active segment, ``writeback_window_bytes`` ahead of the disk at
        most (see :mod:`appliance.storage.flush`). ``remove_files`` removes expired ``.deleted``
        files (a log dir's :class:`~appliance.storage.file_remover.FileRemover` does it off the
        loop). Raises SegmentOpenError (a KafkaStorageError naming the file or directory; EMFILE
        says the process is out of descriptors) and KafkaStorageError on other I/O failures, with
        nothing left open.
        """
        self = cls(path, config, now_ms)
        self.writeback_chunk_bytes = writeback_chunk_bytes
        self.writeback_window_bytes = writeback_window_bytes
        self.remove_files = remove_files
        try:
            os.makedirs(path, exist_ok=True)
            self._load(recovery_point, log_start_offset, clean_shutdown)
        except OSError as e:
            self._close_segments()
            raise SegmentOpenError(path, e) from e
        except BaseException:
            self._close_segments()
            raise
        return self

    def _load(self, recovery_point: int, log_start_offset: int, clean: bool) -> None:
        recovered: dict[int, Any] = {}  # base offset -> producer batches read in recovery
        segs = load_segments(self.path, self.config, recovery_point, log_start_offset, clean,
                             self._new_segment, recovered)
        active = segs[-1]
        if active.size and active.first_append_ms is None:
            active.first_append_ms = self._now_ms()  # the roll clock restarts with the process
        self._attach_writeback(active)
        self._set_segments(tuple(segs))
        self.log_end_offset = active.next_offset
        self.log_start_offset = min(max(log_start_offset, segs[0].base_offset), self.log_end_offset)
        self.recovery_point = self.log_end_offset if clean else min(recovery_point, self.log_end_offset)
        self._hw = self.log_end_offset
        replay_producer_state(self.producers, self.path, self._segs, self.log_start_offset,
                              self.log_end_offset, recovered)
        # at rest a partition holds only its active segment's descriptors
        for seg in segs[:-1]:
            seg.release()
        active.unmap_data()

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
        # Copy-on-write: build, then swap in one assignment (``_segs`` is the append path's
        # shortcut to the same tuple).
        self._list = SegmentList(segs)
        self._segs = self._list.segments

    def give_back_idle_reservation(self) -> None:
        """The blocks reserved ahead of bulk appends (appliance.storage.preallocate), given back
        when the active segment took no append since the previous call."""
        if self._segs:
            self._segs[-1].give_back_if_idle()

    def release_idle_segments(self, idle_ms: int = IDLE_RELEASE_MS) -> int:
        """Close the files of inactive segments not read for ``idle_ms`` (they reopen on the
        next read). Returns the segments released."""
        cutoff = time.monotonic() - idle_ms / 1000.0
        n = 0
        for seg in self._segs[:-1]:
            if seg.files_open and seg.last_used <= cutoff:
                seg.release()
                n += 1
        return n

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
        # A pre-0.11 message.format.version: produce is stored as magic 0/1 entries
        # (storage/legacy_append.py); None: RecordBatch v2.
        # __consumer_offsets stays v2 whatever the broker default says: the group coordinator
        # reads its own log as v2 batches.
        self._legacy_magic = (None if self.topic == OFFSETS_TOPIC
                              else stored_legacy_magic(config))
        # The planned append (native.append_plan) covers all but LogAppendTime stamping and
        # the compacted topics' key check; those take the general path.
        self._plannable = (not self._log_append_time and not self._compact
                           and self._legacy_magic is None)
        if getattr(self, "_work", None) is None:
            self._new_work(_PLAN_ROWS)
        self._plan_params[P_MAX_BATCH] = self._max_message_bytes
        self._plan_params[P_TS_DIFF_MAX] = self._ts_diff_max
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
               log_append_time_ms: int | None = None, validate: bool = True,
               markers_ok: bool = False) -> AppendInfo:
        """Append one or more v2 record batches (a Produce request's records for this partition).

        Validates (``validate``: full record walk and CRC; else header sanity only), checks
        max.message.bytes per batch and the idempotent-producer sequence, assigns offsets by
        rewriting each batch's baseOffset (``assign_offsets``; else the batches' offsets must
        start at or past the log end offset), stamps LogAppendTime when the topic asks for it,
        rolls when due, and writes all batches with one write call. A writable buffer is
        rewritten in place; a read-only one is copied first. A topic in a pre-0.11
        ``message.format.version`` stores them as magic 0/1 entries (legacy_append.py; headers
        and producer ids raise UnsupportedForMessageFormatError); without ``assign_offsets``
        (a follower) legacy entries are appended as they come, CRC-checked.

        Transactions: a transactional batch must carry a producer id (INVALID_RECORD otherwise)
        and opens its producer's transaction; a control batch (a
        transaction marker) is refused from a client (INVALID_RECORD, as Kafka refuses them),
        taken from a leader's log (``assign_offsets`` False) or :meth:`append_marker`
        (``markers_ok``), and ends its producer's transaction (an ABORT indexed in the active
        segment's ``.txnindex``).

        Raises CorruptRecordError, InvalidRecordError, MessageTooLargeError,
        UnsupportedCompressionTypeError, InvalidTimestampError, OutOfOrderSequenceError,
        InvalidProducerEpochError, UnknownProducerIdError, KafkaStorageError. On any error
        nothing is written and no state changes.
        """
        if self._plannable and not self._closed:
            info = self._append_planned(records, assign_offsets, validate)
            if info is not None:
                return info
        self._check_open()
        mv = memoryview(records)
        if mv.ndim != 1 or mv.itemsize != 1:
            mv = mv.cast("B")
        if not assign_offsets and (self._legacy_magic is not None or has_legacy_entry(mv)):
            return self._append_as_stored(mv)
        max_msg = self._max_message_bytes
        if validate:
            heads = validate_records(mv, max_batch_bytes=max_msg)
        else:
            heads = headers_unvalidated(mv)
        if self._compact:
            require_keys(mv, heads)
        if self._legacy_magic is not None:
            return self._append_legacy(mv, heads, log_append_time_ms)
        now = self._now_ms()
        nb = len(heads)
        lat = self._log_append_time
        diff_max = self._ts_diff_max if not lat else LONG_MAX
        leo = self.log_end_offset
        # One pass over the headers (BatchHeader, fields by name): per-batch columns,
        # limits, offsets, producer checks. Nothing is modified until every check passed.
        rel_positions, sizes, bases, last_offsets, max_ts = [], [], [], [], []
        pos = 0
        nxt = leo
        num_records = 0
        pa = None
        need_offsets = False
        markers: list[int] = []  # indexes of the control batches
        unsequenced: list[int] = []  # of the transactional batches without a sequence
        for h in heads:
            size = h.batch_length + LOG_OVERHEAD
            if size > max_msg:
                raise MessageTooLargeError(
                    f"batch of {size} bytes is over max.message.bytes {max_msg}")
            if diff_max < LONG_MAX:
                for ts in (h.base_timestamp, h.max_timestamp):
                    if ts >= 0 and abs(ts - now) > diff_max:
                        raise InvalidTimestampError(
                            f"timestamp {ts} is more than {diff_max} ms from broker time {now}")
            if assign_offsets:
                base = nxt
            else:
                base = h.base_offset
                if base < nxt:
                    raise InvalidRecordError(
                        f"batch at byte {pos}: base offset {base} is below the next offset {nxt}")
            if base != h.base_offset:
                need_offsets = True
            txn = h.attributes & TRANSACTIONAL_BIT
            if h.attributes & CONTROL_BIT:
                if assign_offsets and not markers_ok:
                    raise InvalidRecordError("clients may not write control batches")
                markers.append(len(bases))
            elif txn and h.producer_id < 0:
                raise InvalidRecordError(f"transactional batch at byte {pos} without a producer id")
            elif txn and h.base_sequence < 0:
                # no sequence: the group coordinator's transactional offset commits (Kafka
                # writes them as the coordinator, unchecked); they open the transaction too
                unsequenced.append(len(bases))
            if h.producer_id >= 0 and h.base_sequence >= 0:  # an idempotent producer
                if pa is None:
                    pa = self.producers.begin()
                dup = pa.check(h.producer_id, h.producer_epoch, h.base_sequence,
                               h.last_offset_delta, assign_offsets, bool(txn))
                if dup is not None:
                    return AppendInfo(dup.first_offset, dup.last_offset, -1, -1,
                                      self.log_start_offset, nb,
                                      sum(x.records_count for x in heads), True)
            rel_positions.append(pos)
            sizes.append(size)
            bases.append(base)
            last_offsets.append(base + h.last_offset_delta)
            max_ts.append(h.max_timestamp)
            nxt = base + h.last_offset_delta + 1
            num_records += h.records_count
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
        if pa is not None:
            pa.commit([(bases[i], last_offsets[i]) for i in range(nb)
                       if heads[i].producer_id >= 0 and heads[i].base_sequence >= 0])
        for i in unsequenced:
            self.producers.open_txn(heads[i].producer_id, bases[i], heads[i].producer_epoch)
        if markers:
            self._end_txns(buf, [(rel_positions[i], last_offsets[i]) for i in markers], active)
        if self.log_end_offset - self.recovery_point >= self._flush_messages:
            self.flush()
        return AppendInfo(first_offset, last_offset, max(max_ts), lat_ts, self.log_start_offset,
                          nb, num_records, False)

    def _end_txns(self, buf: memoryview, at: list[tuple[int, int]], seg: LogSegment) -> list:
        """The markers just appended (each a control batch's position in ``buf`` and offset)
        end their producers' transactions; an aborted one goes into ``seg``'s ``.txnindex``.
        Returns [(TxnMarker, AbortedTxn or None)] in order."""
        out = []
        for pos, offset in at:
            marker = parse_marker(buf, pos)
            if marker is None:
                continue  # a control type other than a marker: nothing to end
            aborted = self.producers.complete_txn(marker.producer_id, marker.producer_epoch,
                                                  marker.commit, marker.coordinator_epoch,
                                                  offset, check=False)
            if aborted is not None:
                try:
                    txn_index.append_entry(seg.txn_index_path, aborted)
                except OSError as e:
                    raise KafkaStorageError(f"cannot write {seg.txn_index_path}: {e}") from e
            out.append((marker, aborted))
        self.txns_ended = out
        return out

    def append_marker(self, producer_id: int, producer_epoch: int, commit: bool,
                      coordinator_epoch: int, leader_epoch: int = -1) -> tuple[AppendInfo, Any]:
        """Write the marker ending ``producer_id``'s transaction (WriteTxnMarkers on the
        leader) and end it. Kafka's checks first: an epoch older than the producer's raises
        InvalidProducerEpochError, an older coordinator's TransactionCoordinatorFencedError;
        a producer with no open transaction still gets its marker, which changes nothing.
        Returns (the append's info, the AbortedTxn indexed or None)."""
        self._check_open()
        self.producers.check_marker(producer_id, producer_epoch, coordinator_epoch)
        batch = build_marker(producer_id, producer_epoch, commit, coordinator_epoch,
                             base_offset=self.log_end_offset, partition_leader_epoch=leader_epoch,
                             timestamp=self._now_ms())
        self.txns_ended = []
        info = self.append(memoryview(bytearray(batch)), markers_ok=True)
        ended = self.txns_ended
        return info, (ended[0][1] if ended else None)

    def _append_legacy(self, mv: memoryview, heads: list, log_append_time_ms: int | None) -> AppendInfo:
        """:meth:`append` for a topic stored in a pre-0.11 message format: the validated v2
        batches become magic 0/1 entries with their offsets assigned (legacy_append.py)."""
        now = self._now_ms()
        lat_ts = None
        if self._log_append_time and self._legacy_magic:
            lat_ts = now if log_append_time_ms is None else int(log_append_time_ms)
        first = self.log_end_offset
        conv = to_legacy_entries(
            mv, heads, magic=self._legacy_magic, first_offset=first,
            compression_type=str(getattr(self.config, "compression_type", "producer")),
            log_append_time=lat_ts, now_ms=now, timestamp_diff_max=self._ts_diff_max,
            max_message_bytes=self._max_message_bytes)
        if not conv.data:  # only empty batches
            return AppendInfo(first, first - 1, -1, -1, self.log_start_offset, len(heads), 0, False)
        self._write_entries(memoryview(conv.data), first, now)
        return AppendInfo(first, conv.last_offset, conv.max_timestamp,
                          -1 if lat_ts is None else lat_ts, self.log_start_offset, len(heads),
                          conv.num_records, False)

    def _append_as_stored(self, mv: memoryview) -> AppendInfo:
        """A follower's append of what its leader stored, legacy entries included, offsets
        kept (Kafka's appendAsFollower: CRCs checked, nothing converted)."""
        r = scan_batches(mv, 0, len(mv), verify_crc=True, legacy=True,
                         expect_offset=self.log_end_offset)
        if r.stop_reason != ScanStop.END or r.count == 0:
            raise CorruptRecordError(
                f"replicated records at byte {r.stop_position} of {len(mv)}: {r.stop_reason.name}")
        big = int(r.sizes.max())
        if big > self._max_message_bytes:
            raise MessageTooLargeError(
                f"batch of {big} bytes is over max.message.bytes {self._max_message_bytes}")
        now = self._now_ms()
        self._write_entries(mv, int(r.base_offsets[0]), now, r)
        return AppendInfo(int(r.base_offsets[0]), int(r.last_offsets[r.count - 1]),
                          int(r.max_timestamps.max()), -1, self.log_start_offset, r.count,
                          int(r.record_counts.sum()), False)

    def _write_entries(self, data: memoryview, first_offset: int, now: int,
                       r: ScanResult | None = None) -> None:
        """Write whole entries (legacy or v2, offsets final) to the active segment, rolling
        first when due, and index them from their scan ``r`` (scanned here if None)."""
        if r is None:
            r = scan_batches(data, 0, len(data), verify_crc=False, legacy=True,
                             expect_offset=first_offset)
        n = r.count
        last_offset = int(r.last_offsets[n - 1])
        active = self._segs[-1]
        reason = active.should_roll(len(data), n, last_offset, now)
        if reason:
            self._roll(reason)
            active = self._segs[-1]
        active.append(data, r.positions[:n].tolist(), r.sizes[:n].tolist(),
                      r.last_offsets[:n].tolist(), r.max_timestamps[:n].tolist(), now)
        self.log_end_offset = last_offset + 1
        if self.log_end_offset - self.recovery_point >= self._flush_messages:
            self.flush()

    def _new_work(self, capacity: int) -> None:
        """The planned append's work array (native.append_commit) for ``capacity`` batches."""
        self._work = new_work(capacity, self._max_message_bytes, self._ts_diff_max)
        self._work_rows = capacity
        self._work_mv = memoryview(self._work).cast("B")
        self._plan_params, self._plan_rows = work_views(self._work, capacity)

    def _append_planned(self, records: bytes | bytearray | memoryview, assign_offsets: bool,
                        validate: bool) -> AppendInfo | None:
        """:meth:`append` in one kernel call (native.append_commit: the plan, the roll check,
        the write, the index entries); None when the kernel leaves the decision to the general
        path (anything not plainly valid: that path raises the precise error, or takes
        compressed batches). Idempotent batches and rolls take a second call.

        The same checks as the general path, in effect: every batch CRC-checked and walked
        (``validate``), max.message.bytes, timestamps, offsets, then the producer checks."""
        # The kernel takes bytes, bytearray and byte memoryviews as they are (measured: a numpy
        # view made per call cost ~0.3 us of a ~12 us append); anything else as a uint8 array.
        t = type(records)
        if t is bytes or t is bytearray:
            a = records
        elif t is memoryview and records.format == "B" and records.c_contiguous:
            a = records if records.ndim == 1 else records.cast("B")
        else:
            mv = memoryview(records)
            a = as_u8(mv if mv.ndim == 1 and mv.itemsize == 1 else mv.cast("B"))
        active = self._segs[-1]
        oi, ti = active._oi, active._ti
        if oi is None or ti is None:
            oi, ti = active.offset_index, active.time_index
        now = NOW_FROM_CLOCK if self._kernel_clock else self._now_ms()
        CALL_IN.pack_into(self._work_mv, CALL_IN_AT, validate, assign_offsets,
                          self.log_end_offset, now)
        ra = active.reserve_at  # blocks ahead (storage.preallocate); NEVER when the fs cannot
        if ra != NEVER and active.size + len(a) > ra:
            active.reserve_ahead(len(a))
        nb = append_commit(a, self._work, active.state, oi.u8, ti.u8)
        if nb < 0:
            nb, pa, done = self._append_planned_again(nb, a, assign_offsets,
                                                      int(self._plan_params[P_NOW]))
            if type(nb) is not int:
                return nb  # a duplicate's AppendInfo
            if nb < 0:
                return None  # the general path decides
            if pa is not None:
                pa.commit(done)
            active = self._segs[-1]
        first_offset, last_offset, max_ts, num_records = CALL_OUT.unpack_from(
            self._work_mv, CALL_OUT_AT)
        self.log_end_offset = last_offset + 1
        wb = active.writeback
        if wb is not None:
            try:
                wb.after_append(active.fd, active.size)
            except OSError as e:
                raise KafkaStorageError(f"writeback of {active.log_path} failed: {e}") from e
        if self.log_end_offset - self.recovery_point >= self._flush_messages:
            self.flush()
        # tuple.__new__ directly: AppendInfo(...) runs the NamedTuple's Python-level __new__
        return _tuple_new(AppendInfo, (first_offset, last_offset, max_ts, -1,
                                       self.log_start_offset, nb, num_records, False))

    def _append_planned_again(self, nb: int, a: Any, assign_offsets: bool,
                              now: int) -> tuple:
        """The planned append's rarer turns: more rows, the producer checks of idempotent
        batches (a duplicate ends the append: its AppendInfo comes back in place of the
        count), a roll, a failed write. Returns (batch count or PLAN_SLOW or a duplicate's
        AppendInfo, the producer append to commit, its (first, last) offsets)."""
        p = self._plan_params
        pa, done = None, []
        try:
            while nb < 0:
                active = self._segs[-1]
                if nb == PLAN_MORE_ROWS:
                    validate, leo = int(p[P_VALIDATE]), self.log_end_offset
                    self._new_work(2 * self._work_rows)
                    CALL_IN.pack_into(self._work_mv, CALL_IN_AT, validate, assign_offsets,
                                      leo, now)
                    p = self._plan_params
                elif nb == APPEND_PRODUCERS:
                    rows = self._plan_rows
                    pa = self.producers.begin()
                    for r in rows[:int(p[O_BATCHES])].tolist():
                        if r[R_PRODUCER_ID] >= 0 and r[R_BASE_SEQUENCE] >= 0:
                            dup = pa.check(r[R_PRODUCER_ID], r[R_PRODUCER_EPOCH],
                                           r[R_BASE_SEQUENCE], r[R_DELTA], assign_offsets)
                            if dup is not None:
                                n = int(p[O_BATCHES])
                                return (AppendInfo(dup.first_offset, dup.last_offset, -1, -1,
                                                   self.log_start_offset, n,
                                                   int(p[O_RECORDS]), True), None, None)
                            done.append((r[R_BASE], r[R_LAST]))
                    p[P_MODE] = MODE_COMMIT
                    p[P_PRODUCERS_CHECKED] = 1
                elif nb == APPEND_ROLL:
                    nbytes = len(a)
                    reason = active.should_roll(nbytes, int(p[O_BATCHES]),
                                                int(p[O_LAST_OFFSET]), now)
                    if not reason:
                        return PLAN_SLOW, None, None  # the kernel and should_roll disagree
                    self._roll(reason)
                    active = self._segs[-1]
                    # plan again for the new segment's index; the batches were validated
                    p[P_MODE] = MODE_PLAN
                    p[P_VALIDATE] = 0
                elif nb == APPEND_NO_FD:
                    pass  # opened below
                elif nb == APPEND_WRITE_FAILED:
                    err = int(p[O_ERRNO])
                    try:
                        os.ftruncate(active.fd, active.size)
                    except OSError:
                        pass
                    # chained to the OSError: the disk worker tells a dead disk (EIO: the dir
                    # goes offline) from a full one (ENOSPC: retried) by the cause's errno
                    raise KafkaStorageError(
                        f"write to {active.log_path} failed: {os.strerror(err)}"
                    ) from OSError(err, os.strerror(err), str(active.log_path))
                else:
                    return nb, None, None  # PLAN_SLOW
                oi, ti = active.offset_index, active.time_index
                active.fd  # noqa: B018  (opens the file)
                ra = active.reserve_at  # a new segment after a roll
                if ra != NEVER and active.size + len(a) > ra:
                    active.reserve_ahead(len(a))
                nb = append_commit(a, self._work, active.state, oi.u8, ti.u8)
        finally:
            p[P_MODE] = MODE_PLAN
            p[P_PRODUCERS_CHECKED] = 0
        return nb, pa, done

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
        try:
            new = self._new_segment(self.log_end_offset)
        except KafkaStorageError:
            old.resize_indexes(int(self.config.segment_index_bytes))  # still the active one
            raise
        self._attach_writeback(new)
        self._set_segments(self._segs + (new,))
        if old.last_used <= time.monotonic() - IDLE_RELEASE_MS / 1000.0:
            old.release()  # nobody here reads it: close its files now (reopened on demand)
        log.debug("%s: rolled to %s (%s)", self.path, new.log_path, reason)

    # -- read -------------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_batch: bool = True) -> FetchSlice | None:
        """Whole batches from the one holding ``offset``: at most ``max_bytes`` (but one batch
        even if larger, with ``min_one_batch``), none with base offset >= ``max_offset`` (the
        high watermark bound; default the log end offset). None when nothing is available yet.

        Raises OffsetOutOfRangeError when ``offset`` < log start offset or > log end offset.
        """
        leo = self.log_end_offset
        if offset < self.log_start_offset or offset > leo:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self.log_start_offset}, {leo}] of {self.path}")
        bound = leo if max_offset is None else min(max_offset, leo)
        if offset >= bound:
            return None
        return self._list.read(offset, max_bytes, bound, min_one_batch)

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
            for rec in decode_stored(seg.batch_bytes(loc)):
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
        if self.producers.transactional:
            # a cut marker reopens its transaction: the state is read back from the log (a
            # snapshot at or below the new end, else the log start), as Kafka reloads it
            self.producers.truncate_after(self.log_end_offset)
            replay_producer_state(self.producers, self.path, self._segs, self.log_start_offset,
                                  self.log_end_offset)
            self.producers.transactional = True
        else:
            earlier = self.producers.truncate_after(self.log_end_offset)
            if earlier:
                recover_producers(self.producers, self._segs, earlier, self.log_start_offset)
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
        self.producers.transactional = False

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
        deleted = apply_retention(self, now_ms)
        self.purge_deleted(now_ms)
        return deleted

    def delete_oldest_while(self, pred: Callable[[LogSegment, LogSegment | None], bool],
                            why: str) -> int:
        """Delete the oldest segments while ``pred(segment, next segment or None)`` holds
        (never an empty active segment; a non-empty one after a roll), moving the log start
        offset past them; their files are removed after file.delete.delay.ms. Returns the
        segments deleted. Used by :mod:`appliance.storage.retention`."""
        segs = self._segs
        victims: list[LogSegment] = []
        for i, seg in enumerate(segs):
            nxt = segs[i + 1] if i + 1 < len(segs) else None
            if nxt is None and seg.size == 0:
                break  # never the empty active segment
            if not pred(seg, nxt):
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
        swap_in(self.path, old, new, hook)
        self._set_segments(segs[:i] + ((new,) if new is not None else ()) + segs[i + len(old):])
        self._schedule_delete(old, renamed=True)

    def _schedule_delete(self, segs: list[LogSegment], renamed: bool = False) -> None:
        due = self._now_ms() + int(self.config.file_delete_delay_ms)
        for s in segs:
            if not renamed:
                s.rename_to_deleted()
            self._pending_deletes.append((due, s))

    def purge_deleted(self, now_ms: int) -> int:
        """Remove (with ``remove_files``) the ``.deleted`` files whose delay has passed. Returns
        how many segments' files went."""
        keep, n = [], 0
        for due, seg in self._pending_deletes:
            if due <= now_ms:
                seg.close(trim=False)
                self.remove_files(seg.paths())
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
            flush_segments(self._segs, self.recovery_point, up_to)
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

    def abandon(self) -> None:
        """Close every file without writing anything (its log dir failed: KIP-112), so the dead
        file system can be unmounted and replaced. Errors are ignored. Idempotent."""
        for s in (*self._segs, *(seg for _, seg in self._pending_deletes)):
            try:
                s.release(trim=False)
            except Exception:  # noqa: BLE001 - a dead disk: nothing to save, only descriptors
                pass
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

