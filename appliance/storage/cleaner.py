"""The log cleaner: compaction of ``cleanup.policy=compact`` topics (Kafka's LogCleaner + Cleaner).

Three parts, as in Kafka: :class:`~appliance.storage.cleaner_manager.LogCleanerManager` picks the
dirtiest log and keeps the checkpoint; :class:`CleaningPass` is one cleaning of one log (build the
offset map over the dirty section, copy the surviving records of every cleanable segment into a
``.cleaned`` segment, swap it in with :meth:`PartitionLog.replace_segments`); :class:`LogCleaner`
drives passes within a throttle and a per-call budget.

What a pass guarantees (Kafka's semantics):

- the latest record of every key below the pass's end offset is kept, and every older one of
  the same key is removed; order and offsets never change (cleaned batches keep their original
  base offset, so offsets have gaps);
- a tombstone (null value) is kept while its segment's largest timestamp is younger than
  ``delete.retention.ms``, so consumers can see it, and removed afterwards;
- the active segment (and anything younger than ``min.compaction.lag.ms``) is never touched;
- the offset map is held to ``log.cleaner.dedupe.buffer.size`` at Kafka's 24 bytes per entry
  (16-byte MD5 of the key + 8-byte offset) and log.cleaner.io.buffer.load.factor (0.9); when the dirty section has more
  keys, only the prefix that fits is mapped and the pass ends there (the rest goes next round);
- an idempotent producer's last batch is kept whole, so its sequence state survives a reload;
- records without a key are dropped (Kafka's rule; appends to compacted topics refuse them);
- transactions (:mod:`appliance.storage.cleaner_txn`): the cleaner never maps past the first
  offset of a transaction not yet decided (the LSO bound, in the manager); batches of aborted
  transactions (by the ``.txnindex`` entries overlapping the cleaned range) are removed and
  their keys never enter the offset map; a marker goes once a pass met no batch of its
  transaction and its segment is past ``delete.retention.ms`` (the tombstone rule); every ABORT
  marker kept gets its entry in the cleaned segment's ``.txnindex``.

Why bounded steps, not a thread: the disk worker is single-threaded and owns the partition's
segment tuple (log.py's single-writer rule). A cleaner thread would need a lock the append path
also takes, and, worse, record decoding is Python work that holds the GIL, so a thread would stall
appends anyway (every 5 ms switch interval). Instead :meth:`LogCleaner.run`, called from
``LogDir.run_periodic``, does at most ``STEP_BYTES`` / ``STEP_SECONDS`` of work and returns; the
pass keeps its cursor between calls. Because appends, rolls, retention and truncation can run
between two steps, every step first checks that the segments it reads are still the log's and
unchanged (and that nothing was truncated); otherwise the pass is aborted (its ``.cleaned`` files
deleted, checkpoint unchanged). The swap itself happens inside one step, so no reader in this
process sees a half-swapped tuple.

Throttle: ``log.cleaner.io.max.bytes.per.second`` is a token bucket over bytes read and written
(Kafka's Throttler counts the same). It never sleeps: a call without tokens returns at once.

Step observer: :attr:`LogCleaner.on_step` is called with the name of each crash-relevant step
(``cleaning``: after the first chunk of a ``.cleaned`` segment; ``cleaned``: ``.cleaned``
complete and fsynced; ``swap``, ``deleted``, ``swapped``: see replace_segments; ``checkpoint``:
before the checkpoint is written); it does nothing unless set (the crash tests kill the process
there).

Thread-safety: none; the log dir's disk worker is the only caller.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from appliance.errors import CorruptRecordError, InvalidRecordError, KafkaStorageError
from appliance.records import batch_layout as L
from appliance.records.batch import BatchHeader, build_batch, decode_batch, read_header
from appliance.records.control import marker_of_record
from appliance.records.legacy import build_message_set, iter_entries
from appliance.records.record_types import Compression, Record, TimestampType
from appliance.records.stored import decode_stored
from appliance.storage import txn_index
from appliance.storage.cleaner_manager import CleanableLog, LogCleanerManager, is_compacted
from appliance.storage.cleaner_txn import CleanedTxns
from appliance.storage.log import PartitionLog
from appliance.storage.segment import CLEANED_SUFFIX, INT32_MAX, LogSegment, segment_file_name
from native.scan import scan_batches

__all__ = [
    "LogCleaner", "CleaningPass", "OffsetMap", "Throttler", "CleanerStats", "key_digest",
    "BYTES_PER_ENTRY", "LOAD_FACTOR", "STEP_BYTES", "STEP_SECONDS",
]

log = logging.getLogger(__name__)

BYTES_PER_ENTRY = 24  # Kafka's SkimpyOffsetMap: 16-byte MD5 + 8-byte offset
LOAD_FACTOR = 0.9     # Kafka's log.cleaner.io.buffer.load.factor default
# One call's work. The disk worker calls every 250 ms between request rounds; 50 ms of cleaning
# keeps the produce path's added latency below that of one fsync on a slow disk.
STEP_BYTES = 32 << 20
STEP_SECONDS = 0.05
READ_CHUNK = 1 << 20  # bytes read per pread by default; large enough that syscalls do not matter
MIN_READ_CHUNK = 4096  # a smaller log.cleaner.io.buffer.size share still reads a page
_LOG_OVERHEAD = L.LOG_OVERHEAD
_MAGIC_POS = L.MAGIC_OFFSET  # the magic byte: v2 batches and legacy entries both have it here


def key_digest(key: bytes) -> bytes:
    """The 16-byte MD5 of a key (Kafka's offset map hashes keys with MD5)."""
    return hashlib.md5(key, usedforsecurity=False).digest()


class OffsetMap:
    """Key digest -> latest offset, holding at most ``capacity`` keys.

    Capacity follows Kafka's accounting: ``buffer_bytes / 24 * load_factor``
    (log.cleaner.io.buffer.load.factor, 0.9 by default). The entries live in a
    dict, whose real footprint is larger (about 100 bytes per entry in CPython); the limit is
    the configured one so that partial cleaning behaves as Kafka's does.
    """

    def __init__(self, buffer_bytes: int, load_factor: float = LOAD_FACTOR) -> None:
        self.capacity = int(buffer_bytes // BYTES_PER_ENTRY * load_factor)
        self._map: dict[bytes, int] = {}

    def __len__(self) -> int:
        return len(self._map)

    def put(self, digest: bytes, offset: int) -> bool:
        """Record ``offset`` for ``digest``; False (nothing stored) when the key is new and
        the map is full."""
        m = self._map
        if digest not in m and len(m) >= self.capacity:
            return False
        m[digest] = offset
        return True

    def get(self, digest: bytes) -> int:
        """The latest offset of ``digest``, -1 if unknown."""
        return self._map.get(digest, -1)


class Throttler:
    """A token bucket of ``rate`` bytes/s (inf = no limit) that never sleeps.

    Tokens accrue up to ``burst_s`` seconds' worth; consuming more than available leaves a debt
    that later calls repay, so the long-run rate holds even when a step overshoots by a batch.
    """

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic,
                 burst_s: float = 0.25) -> None:
        self.rate = float(rate)
        self.unlimited = not (0 < self.rate < 1e300)
        self._clock = clock
        self._burst = self.rate * burst_s
        self._tokens = 0.0
        self._last = clock()

    def available(self, cap: int) -> int:
        """Bytes that may be processed now, at most ``cap``."""
        if self.unlimited:
            return cap
        now = self._clock()
        self._tokens = min(self._tokens + (now - self._last) * self.rate, self._burst)
        self._last = now
        return int(min(cap, self._tokens)) if self._tokens > 0 else 0

    def consume(self, n: int) -> None:
        if not self.unlimited:
            self._tokens -= n


class CleanerStats:
    """Counters over the cleaner's life (for logs, tests and the benchmark)."""

    def __init__(self) -> None:
        self.passes = 0
        self.aborted = 0
        self.bytes_read = 0
        self.bytes_written = 0
        self.records_read = 0
        self.records_removed = 0
        self.tombstones_removed = 0
        self.segments_swapped = 0
        self.aborted_removed = 0  # records of aborted transactions
        self.markers_removed = 0

    @property
    def io_bytes(self) -> int:
        return self.bytes_read + self.bytes_written


def _no_step_observer(step: str) -> None:
    pass


class _Cursor:
    """Position over a list of segments, reading whole batches chunk by chunk with pread."""

    def __init__(self, segments: list[LogSegment], start_position: int = 0,
                 chunk: int = READ_CHUNK) -> None:
        self.segments = segments
        self.i = 0
        self.pos = start_position
        self.chunk = chunk

    @property
    def done(self) -> bool:
        return self.i >= len(self.segments)

    def next_chunk(self) -> tuple[LogSegment, bytes, Any] | None:
        """(segment, bytes, scan of the whole batches in them) and advance; None at the end."""
        while self.i < len(self.segments):
            seg = self.segments[self.i]
            if self.pos >= seg.size:
                self.i += 1
                self.pos = 0
                continue
            want = min(self.chunk, seg.size - self.pos)
            data = os.pread(seg.fd, want, self.pos)
            r = scan_batches(data, 0, len(data), verify_crc=False, legacy=True)
            if r.count == 0:
                # One batch bigger than the chunk: read exactly that batch.
                if len(data) < _LOG_OVERHEAD:
                    raise CorruptRecordError(f"{seg.log_path}: truncated batch at {self.pos}")
                # batchLength (v2) and messageSize (legacy) share bytes 8-11
                size = int.from_bytes(data[8:_LOG_OVERHEAD], "big", signed=True) + _LOG_OVERHEAD
                if size <= len(data) or self.pos + size > seg.size:
                    raise CorruptRecordError(f"{seg.log_path}: bad batch at {self.pos}")
                data = os.pread(seg.fd, size, self.pos)
                r = scan_batches(data, 0, len(data), verify_crc=False, legacy=True)
                if r.count == 0:
                    raise CorruptRecordError(f"{seg.log_path}: bad batch at {self.pos}")
            self.pos += int(r.stop_position) if r.count else len(data)
            return seg, data, r
        return None


MAP, CLEAN, FINISHED = "MAP", "CLEAN", "FINISHED"


class CleaningPass:
    """One cleaning of one log, in steps (see the module docstring).

    Phases: MAP (offset map over [first_dirty, first_uncleanable), stopping early when the map
    is full), CLEAN (group the segments below ``end_offset`` up to segment.bytes, copy each
    group's survivors into a ``.cleaned`` segment, swap it in), FINISHED.
    """

    def __init__(self, c: CleanableLog, map_bytes: int, now_ms: int, stats: CleanerStats,
                 hook: Callable[[str], None], *, load_factor: float = LOAD_FACTOR,
                 read_bytes: int = READ_CHUNK) -> None:
        self.key = c.key
        self.log: PartitionLog = c.log
        self.first_dirty = c.first_dirty
        self.uncleanable = c.first_uncleanable
        self.now_ms = now_ms
        self.stats = stats
        self.hook = hook
        self.read_bytes = read_bytes
        self.map = OffsetMap(map_bytes, load_factor)
        if self.map.capacity < 1:
            raise KafkaStorageError(
                f"log.cleaner.dedupe.buffer.size {map_bytes} holds no offset map entry")
        self.phase = MAP
        self.end_offset = self.uncleanable
        self._leo = self.log.log_end_offset
        segs = [s.segment for s in self.log.segments()[:-1]]
        self._sources: list[LogSegment] = [
            s for s in segs if s.base_offset < self.uncleanable and s.next_offset > self.log.log_start_offset]
        self._sizes = {id(s): s.size for s in self._sources}
        dirty = [s for s in self._sources if s.next_offset > self.first_dirty]
        start = 0
        if dirty and dirty[0].base_offset < self.first_dirty:
            loc = dirty[0].translate_offset(self.first_dirty)
            start = loc.position if loc is not None else dirty[0].size
        self._cursor = _Cursor(dirty, start, self.read_bytes)
        # the map phase keeps aborted records out of the offset map
        self._txns = CleanedTxns(self._aborted_from(dirty[0] if dirty else None,
                                                    self.first_dirty, self.uncleanable))
        self._entries: list[txn_index.AbortedTxn] = []  # of markers kept, for self._out
        self._groups: list[list[LogSegment]] = []
        self._out: LogSegment | None = None
        self._carried: list[LogSegment] = []  # groups whose survivors go into self._out
        self._last_batches: set[tuple[int, int]] = set()

    @property
    def finished(self) -> bool:
        return self.phase == FINISHED

    def _aborted_from(self, first: LogSegment | None, lo: int,
                      hi: int) -> list[txn_index.AbortedTxn]:
        """The aborted transactions overlapping [lo, hi), from the ``.txnindex`` files of the
        log's segments from ``first`` on (a marker may sit past ``hi``). Raises OSError."""
        if first is None or hi <= lo:
            return []
        segs = [s.segment for s in self.log.segments()]
        i = next((i for i, s in enumerate(segs) if s is first), len(segs))
        return txn_index.collect_aborted((s.txn_index_path for s in segs[i:]), lo, hi)

    # -- safety between steps ---------------------------------------------------------------

    def still_valid(self) -> str | None:
        """Why the pass can no longer go on (the log changed under it), else None."""
        lg = self.log
        if lg._closed:
            return "the log was closed"
        if not is_compacted(lg):
            return "cleanup.policy no longer contains compact"
        if lg.log_end_offset < self._leo:
            return "the log was truncated"
        live = {id(s.segment) for s in lg.segments()[:-1]}
        for s in self._sources:
            if id(s) not in live or s.deleted or s.size != self._sizes[id(s)]:
                return f"segment {s.base_offset} was deleted or changed"
        return None

    def abort(self) -> None:
        """Give up: delete the unfinished ``.cleaned`` segment. Idempotent."""
        if self._out is not None:
            self._out.delete_files()
            self._out = None
        self.phase = FINISHED

    # -- steps ------------------------------------------------------------------------------

    def step(self, budget: int, deadline: float) -> int:
        """Work until ``budget`` bytes were read+written or ``deadline`` (time.monotonic)
        passed. Returns the bytes processed. Raises KafkaStorageError (the log changed under
        the pass, or I/O failure), CorruptRecordError/InvalidRecordError (a bad batch)."""
        why = self.still_valid()
        if why is not None:
            raise KafkaStorageError(f"{self.log.path}: cleaning aborted: {why}")
        done = 0
        while done < budget and self.phase != FINISHED:
            if self.phase == MAP:
                done += self._map_chunk()
            else:
                done += self._clean_chunk()
            if time.monotonic() >= deadline:
                break
        return done

    def _map_chunk(self) -> int:
        got = self._cursor.next_chunk()
        if got is None:
            self._start_clean()
            return 0
        seg, data, r = got
        lo, hi = self.first_dirty, self.uncleanable
        put = self.map.put
        nrec = 0
        for k in range(r.count):
            if int(r.last_offsets[k]) < lo:
                continue
            if int(r.base_offsets[k]) >= hi:
                break
            pos = int(r.positions[k])
            if data[pos + _MAGIC_POS] < 2:  # a legacy entry: no control batches there
                recs = decode_stored(data, pos)
            else:
                h, recs = decode_batch(data, pos)
                if h.attributes & L.CONTROL_BIT:
                    self._txns.on_marker(h.producer_id, h.base_offset + h.last_offset_delta,
                                         _marker_commit(h, recs))
                    continue
                if self._txns.on_batch(h.producer_id, h.base_offset + h.last_offset_delta,
                                       bool(h.attributes & L.TRANSACTIONAL_BIT)):
                    continue  # aborted: its keys must not shadow committed records
            nrec += len(recs)
            for rec in recs:
                if rec.key is None or not lo <= rec.offset < hi:
                    continue
                if not put(key_digest(rec.key), rec.offset):
                    # Full: everything below this record is mapped; clean up to it (Kafka).
                    self.end_offset = rec.offset
                    log.info("%s: offset map full (%d keys): cleaning up to offset %d",
                             self.log.path, len(self.map), rec.offset)
                    self.stats.bytes_read += len(data)
                    self._start_clean()
                    return len(data)
        self.stats.bytes_read += len(data)
        self.stats.records_read += nrec
        return len(data)

    def _start_clean(self) -> None:
        cfg = self.log.config
        seg_bytes = int(cfg.segment_bytes)
        max_entries = max(1, int(cfg.segment_index_bytes) // 8)
        interval = max(1, int(cfg.index_interval_bytes))
        groups: list[list[LogSegment]] = []
        cur: list[LogSegment] = []
        size = 0
        for s in self._sources:
            if s.base_offset >= self.end_offset:
                break
            fits = (cur and size + s.size <= seg_bytes
                    and (size + s.size) // interval + len(cur) + 1 < max_entries
                    and s.next_offset - 1 - cur[0].base_offset <= INT32_MAX)
            if cur and not fits:
                groups.append(cur)
                cur, size = [], 0
            cur.append(s)
            size += s.size
        if cur:
            groups.append(cur)
        self._groups = groups
        self._last_batches = {(pid, e.batches[-1].last_offset)
                              for pid, e in self.log.producers.producers.items() if e.batches}
        self._cursor = _Cursor(groups[0] if groups else [], 0, self.read_bytes)
        # One walk over every group (see cleaner_txn): up to the sources' end, so that the
        # aborted batches kept at or past end_offset are known, and their markers kept.
        self._txns = CleanedTxns(self._aborted_from(
            groups[0][0], groups[0][0].base_offset, groups[-1][-1].next_offset) if groups else [])
        self.phase = CLEAN if groups else FINISHED

    def _new_output(self, base: int) -> LogSegment:
        d = self.log.path
        for suffix in (".log", ".index", ".timeindex", ".txnindex"):
            stale = os.path.join(d, segment_file_name(base, suffix) + CLEANED_SUFFIX)
            if os.path.exists(stale):
                os.unlink(stale)
        return LogSegment.open(d, base, self.log.config, create=True, suffix=CLEANED_SUFFIX)

    def _clean_chunk(self) -> int:
        group = self._groups[0]
        if self._out is None:
            self._out = self._new_output(group[0].base_offset)
        got = self._cursor.next_chunk()
        if got is None:
            self._finish_group()
            return 0
        seg, data, r = got
        retention = int(self.log.config.delete_retention_ms)
        drop_tombstones = seg.largest_timestamp < self.now_ms - retention
        out = bytearray()
        rel, sizes, lasts, maxts = [], [], [], []
        for k in range(r.count):
            pos = int(r.positions[k])
            piece = self._clean_batch(data, pos, int(r.sizes[k]), drop_tombstones)
            if piece is None:
                continue
            blob, last, mts = piece
            rel.append(len(out))
            sizes.append(len(blob))
            lasts.append(last)
            maxts.append(mts)
            out += blob
        if out:
            self._out.append(memoryview(out), rel, sizes, lasts, maxts, self.now_ms)
            self.hook("cleaning")
        for e in self._entries:
            txn_index.append_entry(self._out.txn_index_path, e)
        self._entries.clear()
        self.stats.bytes_read += len(data)
        self.stats.bytes_written += len(out)
        return len(data) + len(out)

    def _clean_batch(self, data: bytes, pos: int, size: int,
                     drop_tombstones: bool) -> tuple[bytes, int, int] | None:
        """(bytes, last offset, max timestamp) of what survives of the batch at ``pos``."""
        if data[pos + _MAGIC_POS] < 2:
            return self._clean_legacy(data, pos, size, drop_tombstones)
        h, recs = decode_batch(data, pos)
        self.stats.records_read += len(recs)
        last = h.base_offset + h.last_offset_delta
        whole = (bytes(data[pos:pos + size]), last, h.max_timestamp)
        if h.attributes & L.CONTROL_BIT:
            may_go, entry = self._txns.on_marker(h.producer_id, last, _marker_commit(h, recs))
            if may_go and drop_tombstones and last < self.end_offset:
                self.stats.markers_removed += 1
                return None
            if entry is not None:
                self._entries.append(entry)
            return whole
        aborted = self._txns.on_batch(h.producer_id, last, bool(h.attributes & L.TRANSACTIONAL_BIT))
        if h.producer_id >= 0 and (h.producer_id, last) in self._last_batches:
            # the producer's last batch carries its sequence state (an aborted one stays whole:
            # its marker and index entry stay with it, so read_committed readers skip it)
            return whole
        if aborted and last < self.end_offset:
            self.stats.aborted_removed += len(recs)
            self.stats.records_removed += len(recs)
            return None
        keep = self._survivors(recs, drop_tombstones)
        if len(keep) == len(recs):
            return whole
        if not keep:
            return None
        lat = bool(h.attributes & L.TIMESTAMP_TYPE_BIT)
        blob = build_batch(
            keep, base_offset=h.base_offset,
            compression=Compression(h.attributes & L.COMPRESSION_MASK),
            timestamp_type=TimestampType.LOG_APPEND_TIME if lat else TimestampType.CREATE_TIME,
            base_timestamp=h.max_timestamp if lat else h.base_timestamp,
            producer_id=h.producer_id, producer_epoch=h.producer_epoch,
            base_sequence=h.base_sequence, partition_leader_epoch=h.partition_leader_epoch,
            is_transactional=bool(h.attributes & L.TRANSACTIONAL_BIT))
        return blob, keep[-1].offset, read_header(blob).max_timestamp

    def _survivors(self, recs: list[Record], drop_tombstones: bool) -> list[Record]:
        """The records of ``recs`` the offset map keeps (the latest of their key; tombstones
        until delete.retention.ms), counting what goes."""
        get = self.map.get
        end = self.end_offset
        keep: list[Record] = []
        for rec in recs:
            if rec.key is None:
                continue
            if get(key_digest(rec.key)) > rec.offset:
                continue
            if rec.value is None and drop_tombstones and rec.offset < end:
                self.stats.tombstones_removed += 1
                continue
            keep.append(rec)
        self.stats.records_removed += len(recs) - len(keep)
        return keep

    def _clean_legacy(self, data: bytes, pos: int, size: int,
                      drop_tombstones: bool) -> tuple[bytes, int, int] | None:
        """:meth:`_clean_batch` for a legacy magic 0/1 entry (a topic stored in a pre-0.11
        format): the survivors of a wrapper are rewritten as one wrapper of the same magic,
        codec and timestamp type, keeping their offsets (Kafka's cleaner does the same)."""
        entry = next(iter_entries(data[pos:pos + size]))
        recs = [Record(m.offset, m.timestamp, m.key, m.value) for m in entry.messages]
        self.stats.records_read += len(recs)
        keep = self._survivors(recs, drop_tombstones)
        max_ts = max(m.timestamp for m in entry.messages)
        if len(keep) == len(recs):
            return bytes(data[pos:pos + size]), recs[-1].offset, max_ts
        if not keep:
            return None
        blob = build_message_set(keep, magic=entry.magic, compression=entry.compression,
                                 timestamp_type=entry.timestamp_type)
        return blob, keep[-1].offset, max(r.timestamp for r in keep)

    def _finish_group(self) -> None:
        group = self._groups.pop(0)
        out = self._out
        assert out is not None
        self._carried += group
        nxt = self._groups[0] if self._groups else None
        if (out.size == 0 and nxt is not None
                and nxt[-1].next_offset - 1 - out.base_offset <= INT32_MAX):
            # Every record of the group was redundant. Rather than dropping its segments (the
            # log would then start later after a reload), the next group's survivors go into
            # the same output, which keeps this group's base offset.
            self._cursor = _Cursor(nxt, 0, self.read_bytes)
            return
        old, self._carried, self._out = self._carried, [], None
        if out.size:
            out.flush()
            out.on_become_inactive()
            self.hook("cleaned")
            self.log.replace_segments(old, out, self.hook)
        else:
            out.delete_files()
            self.log.replace_segments(old, None, self.hook)
        self.stats.segments_swapped += len(old)
        done = {id(s) for s in old}
        self._sources = [s for s in self._sources if id(s) not in done]
        if self._groups:
            self._cursor = _Cursor(self._groups[0], 0, self.read_bytes)
        else:
            self.phase = FINISHED


def _marker_commit(h: BatchHeader, recs: list[Record]) -> bool | None:
    """COMMIT (True) or ABORT (False) of a control batch; None: another control type."""
    if not recs:
        return None
    m = marker_of_record(h, recs[0].key, recs[0].value)
    return None if m is None else m.commit


class LogCleaner:
    """Runs cleaning passes over one log dir's compacted partitions, a bounded step per call.

    Config (broker keys): log.cleaner.enable, log.cleaner.threads (0: no cleaning; N: up to N
    partitions of the log dir in a pass at once, their steps taking turns -- Kafka's N cleaner
    threads, each with 1/N of the dedupe and I/O buffers; here a huge partition's long pass no longer holds
    up the others' cleaning, though one disk worker does all the work), log.cleaner.io.max.bytes
    .per.second, log.cleaner.dedupe.buffer.size, log.cleaner.io.buffer.load.factor (how full the
    offset map may get), log.cleaner.io.buffer.size (bytes read per pread, split between the
    passes), log.cleaner.backoff.ms (wait after finding nothing to clean or after an error).
    """

    def __init__(self, dir_path: str, broker_config: Any, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        bc = broker_config
        self.max_passes = int(bc["log.cleaner.threads"])
        self.enabled = bool(bc["log.cleaner.enable"]) and self.max_passes > 0
        # Kafka splits the dedupe buffer and the I/O buffer between its cleaner threads
        self.map_bytes = int(bc["log.cleaner.dedupe.buffer.size"]) // max(self.max_passes, 1)
        self.read_bytes = max(MIN_READ_CHUNK, int(bc["log.cleaner.io.buffer.size"]) // max(self.max_passes, 1))
        self.load_factor = float(bc["log.cleaner.io.buffer.load.factor"])
        self.backoff_ms = int(bc["log.cleaner.backoff.ms"])
        self.throttler = Throttler(float(bc["log.cleaner.io.max.bytes.per.second"]), clock)
        self.manager = LogCleanerManager(dir_path)
        self.stats = CleanerStats()
        self.passes: list[CleaningPass] = []  # under way, the next to step first
        self._next_check_ms = 0
        self.idle = False  # the last look found nothing to clean
        self.on_step: Callable[[str], None] = _no_step_observer

    @property
    def busy(self) -> bool:
        """A pass is under way (the caller may call :meth:`run` sooner than its usual period)."""
        return bool(self.passes)

    @property
    def current(self) -> CleaningPass | None:
        """The pass the next step works on (None when none is under way)."""
        return self.passes[0] if self.passes else None

    def run(self, partitions: dict[tuple[str, int], PartitionLog], now_ms: int, *,
            max_bytes: int = STEP_BYTES, max_seconds: float = STEP_SECONDS) -> int:
        """One bounded step: start a pass on the dirtiest log not being cleaned while fewer
        than log.cleaner.threads are under way (looking at most once per log.cleaner.backoff.ms
        after finding nothing to do), then work on the next pass in turn within the throttle,
        ``max_bytes`` and ``max_seconds``. Returns the bytes processed. Errors of a pass are
        logged and abort it (never raised): a cleaner problem must not stop appends.
        """
        if not self.enabled:
            return 0
        if len(self.passes) < self.max_passes and now_ms >= self._next_check_ms:
            self._start_pass(partitions, now_ms)
        if not self.passes:
            return 0
        budget = self.throttler.available(max_bytes)
        if budget <= 0:
            return 0
        p = self.passes.pop(0)
        self.passes.append(p)  # the others' turn next
        try:
            done = p.step(budget, time.monotonic() + max_seconds)
        except (KafkaStorageError, CorruptRecordError, InvalidRecordError, OSError, ValueError) as e:
            log.error("%s: cleaning aborted: %s", p.log.path, e)
            self._abort(p, now_ms)
            return 0
        self.throttler.consume(done)
        if p.finished:
            self.passes.remove(p)
            self.stats.passes += 1
            self.on_step("checkpoint")
            try:
                self.manager.done_cleaning(p.key, p.end_offset, partitions)
            except KafkaStorageError as e:
                log.error("cleaner checkpoint: %s", e)
            log.info("%s: cleaned up to offset %d", p.log.path, p.end_offset)
        return done

    def _start_pass(self, partitions: dict[tuple[str, int], PartitionLog], now_ms: int) -> None:
        c = None
        try:
            c = self.manager.grab_filthiest(partitions, now_ms)
            if c is None:
                self._next_check_ms = now_ms + self.backoff_ms
                self.idle = not self.passes
                return
            self.idle = False
            log.info("%s: cleaning, dirty ratio %.2f (%d of %d bytes), from offset %d",
                     c.log.path, c.dirty_ratio, c.dirty_bytes, c.dirty_bytes + c.clean_bytes,
                     c.first_dirty)
            self.passes.insert(0, CleaningPass(c, self.map_bytes, now_ms, self.stats, self.on_step,
                                               load_factor=self.load_factor, read_bytes=self.read_bytes))
        except KafkaStorageError as e:
            log.error("cleaner: cannot start a pass: %s", e)
            if c is not None:
                self.manager.abort(c.key)
            self._next_check_ms = now_ms + self.backoff_ms

    def _abort(self, p: CleaningPass, now_ms: int) -> None:
        if p not in self.passes:
            return
        self.passes.remove(p)
        try:
            p.abort()
        except OSError as e:
            log.error("%s: cannot delete the cleaner's output: %s", p.log.path, e)
        self.manager.abort(p.key)
        self.stats.aborted += 1
        self._next_check_ms = now_ms + self.backoff_ms

    def forget(self, key: tuple[str, int]) -> None:
        """Partition ``key`` is going away: abort its pass, drop its checkpoint entry."""
        for p in [p for p in self.passes if p.key == key]:
            self._abort(p, 0)
        self.manager.checkpoints.pop(key, None)

    def clean_all(self, partitions: dict[tuple[str, int], PartitionLog], now_ms: int,
                  max_calls: int = 1_000_000) -> int:
        """Run passes until no log needs cleaning, ignoring the step budget and backoff (for
        tools, tests and the benchmark; the throttle still applies). Returns bytes processed."""
        total = 0
        self._next_check_ms = 0
        for _ in range(max_calls):
            self._next_check_ms = 0
            n = self.run(partitions, now_ms, max_bytes=1 << 40, max_seconds=3600.0)
            total += n
            if not self.passes and self.idle:
                break
            if n == 0 and self.passes:
                time.sleep(0.001)  # throttled
        return total

    def close(self) -> None:
        """Abort the passes under way (their ``.cleaned`` files are deleted)."""
        for p in list(self.passes):
            self._abort(p, 0)
