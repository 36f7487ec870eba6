"""Read one partition's offset range [start, end) from its segment files into Arrow batches.

The walk: :class:`appliance.storage.reader.LogReader` finds the byte range of whole batches from
an offset (offset index + native scan), the range is mmap'd read-only, :func:`decode_entries`
splits it into runs of v2 batches and of legacy (magic 0/1) messages (a topic whose
``message.format.version`` is or was pre-0.11; :func:`native.entry_runs.entry_runs`), and for v2
runs :func:`native.scan_batches` checks every batch's CRC32C, compressed records sections are
inflated, and :func:`native.decode.decode_records` turns the records into Arrow buffers; legacy
runs go through :mod:`spark.legacy_entries` into the same rows. Control batches are skipped, as
Kafka consumers skip them; offset gaps (compacted topics) need no special case. A read_committed
read (the default; the caller bounds it at the last stable offset) also skips the batches of
aborted transactions, found in the ``.txnindex`` files of the segments it reads
(:mod:`spark.aborted`).

A batch that fails its CRC or does not decode raises CorruptRecordError naming the segment file
and the byte position of the batch. Offsets removed by retention (below the oldest segment, or
a segment deleted between two reads) raise OffsetOutOfRangeError with ``fail_on_data_loss``,
otherwise the reader logs a warning and continues from the oldest offset still on disk.

Thread-safety: a generator per task; nothing is shared.
"""

from __future__ import annotations

import logging
import mmap
import os
from collections.abc import Generator
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from appliance.errors import CorruptRecordError, OffsetOutOfRangeError
from appliance.records import batch_layout as L
from appliance.records.compression import DEFAULT_MAX_DECOMPRESSED, decompress
from appliance.storage.reader import LogReader
from native import SCAN_END, SCAN_PARTIAL, scan_batches
from native.decode import DECODE_ERRORS, DECODE_OK, DecodeOutput, decode_records
from native.entry_runs import entry_runs
from native.legacy_decode import LEGACY_ERRORS, LEGACY_OK, LEGACY_PARTIAL, scan_legacy
from native.out_pool import OutputPool
from spark.aborted import AbortedRanges
from spark.legacy_entries import decode_legacy_scanned
from spark.progress import ReadStats
from spark.schema import arrow_schema

__all__ = ["read_range", "DataLossWarning", "decode_scanned", "decode_entries", "Entries",
           "to_record_batch", "STOP_WHY"]

log = logging.getLogger(__name__)

_PAGE = mmap.ALLOCATIONGRANULARITY
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)  # Linux only
_BINARY = pa.binary()
_ATTR = np.dtype(">i2")
_I64 = np.dtype(">i8")
STOP_WHY = {1: "a batch runs past the end of the data", 2: "bad batch header",
             3: "CRC32C mismatch", 4: "offsets go backwards"}


class DataLossWarning(UserWarning):
    """Offsets were skipped because retention removed them (failOnDataLoss=false)."""


def _binary(n: int, offsets: np.ndarray, valid: np.ndarray, data: np.ndarray,
            typ: pa.DataType = _BINARY) -> pa.Array:
    nulls = n - int(np.count_nonzero(valid)) if n else 0
    bitmap = None if nulls == 0 else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(typ, n, [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)],
                                 null_count=nulls)


def _constant_string(value: str, n: int) -> pa.Array:
    raw = value.encode()
    offsets = np.arange(0, len(raw) * (n + 1), len(raw) or 1, dtype=np.int32)[:n + 1]
    if not raw:
        offsets = np.zeros(n + 1, np.int32)
    data = np.frombuffer(raw * n, np.uint8) if raw else np.empty(0, np.uint8)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def to_record_batch(out: DecodeOutput, topic: str, partition: int, schema: pa.Schema,
                     include_headers: bool) -> pa.RecordBatch:
    n = out.rows
    cols = [
        _binary(n, out.key_offsets, out.key_valid, out.key_data),
        _binary(n, out.value_offsets, out.value_valid, out.value_data),
        _constant_string(topic, n),
        pa.array(np.full(n, partition, np.int32), pa.int32()),
        pa.array(out.offsets, pa.int64()),
        pa.Array.from_buffers(schema.field("timestamp").type, n,
                              [None, pa.py_buffer(out.timestamps_us)]),
        pa.array(out.timestamp_types, pa.int32()),
    ]
    if include_headers:
        nh = len(out.hkey_offsets) - 1
        htype = schema.field("headers").type
        struct_type = htype.value_type
        keys = _binary(nh, out.hkey_offsets, np.ones(nh, np.uint8), out.hkey_data, pa.string())
        vals = _binary(nh, out.hvalue_offsets, out.hvalue_valid, out.hvalue_data)
        structs = pa.StructArray.from_arrays([keys, vals], fields=list(struct_type))
        cols.append(pa.ListArray.from_arrays(pa.array(out.header_offsets, pa.int32()), structs,
                                             type=htype))
    return pa.RecordBatch.from_arrays(cols, schema=schema)


def decode_scanned(buf: np.ndarray, base_pos: int, scan, path: str, file_pos0: int,
                  lo: int, hi: int, include_headers: bool,
                  pool: OutputPool | None = None,
                  aborted: AbortedRanges | None = None) -> DecodeOutput | None:
    """Decode the batches ``scan`` found in ``buf``; None when all of them are control batches
    (or of aborted transactions). ``pool``: where the output arrays come from (see
    :class:`native.out_pool.OutputPool`); ``aborted``: the transactions whose batches are
    skipped (read_committed)."""
    pos = scan.positions
    attrs = buf[(pos + L.ATTRIBUTES_OFFSET)[:, None] + np.arange(2)].view(_ATTR).ravel()
    attrs = attrs.astype(np.int64)
    data_batches = (attrs & L.CONTROL_BIT) == 0
    if aborted is not None:
        gone = aborted.mask(buf, pos, scan.base_offsets, scan.last_offsets, attrs)
        if gone is not None:
            data_batches &= ~gone
    if not data_batches.all():
        keep = np.flatnonzero(data_batches)
        if keep.size == 0:
            return None
    else:
        keep = None
    base_ts = buf[(pos + L.BASE_TIMESTAMP_OFFSET)[:, None] + np.arange(8)].view(_I64).ravel()
    codecs = attrs & L.COMPRESSION_MASK
    sec_start = pos + L.HEADER_SIZE
    sec_end = pos + scan.sizes.astype(np.int64)
    work = buf
    if codecs.any():
        # Inflate compressed sections and copy the plain ones next to them: one kernel call.
        parts, starts, ends, at = [], [], [], 0
        for i in range(scan.count):
            raw = memoryview(buf)[int(sec_start[i]):int(sec_end[i])]
            if codecs[i]:
                try:
                    raw = decompress(int(codecs[i]), raw, DEFAULT_MAX_DECOMPRESSED)
                except Exception as e:  # noqa: BLE001 - every codec failure means corrupt data
                    raise CorruptRecordError(
                        f"{path}: batch at byte {file_pos0 + int(pos[i]) - base_pos} does not "
                        f"decompress: {e}") from None
            parts.append(raw)
            starts.append(at)
            at += len(raw)
            ends.append(at)
        work = np.frombuffer(b"".join(parts), np.uint8)
        sec_start = np.array(starts, np.int64)
        sec_end = np.array(ends, np.int64)
    log_append = ((attrs & L.TIMESTAMP_TYPE_BIT) != 0).astype(np.uint8)
    arrays = [sec_start, sec_end, scan.base_offsets, base_ts.astype(np.int64),
              scan.max_timestamps, log_append, scan.record_counts]
    if keep is not None:
        arrays = [a[keep] for a in arrays]
    out, status, bad = decode_records(work, *arrays, lo, hi, include_headers, pool)
    if status != DECODE_OK:
        i = int(keep[bad]) if keep is not None else bad
        raise CorruptRecordError(
            f"{path}: batch at byte {file_pos0 + int(pos[i]) - base_pos} "
            f"(offsets {int(scan.base_offsets[i])}..{int(scan.last_offsets[i])}): "
            f"{DECODE_ERRORS.get(status, f'decode status {status}')}")
    return out


class Entries(NamedTuple):
    """What :func:`decode_entries` found in a buffer."""

    outputs: list[DecodeOutput]  # rows of each run that had any, in buffer order
    count: int  # whole entries (batches or top-level messages) walked
    next_offset: int  # the last whole entry's last offset + 1; -1 when there is none
    stop_position: int  # first byte not covered by a whole valid entry
    stop_why: str | None  # None: the walk read to the end; else why it stopped
    partial: bool  # it stopped at an entry that runs past the end (a Fetch's byte limit)


def decode_entries(buf: np.ndarray, start: int, end: int, path: str, file_pos0: int, lo: int,
                   hi: int, include_headers: bool, pool: OutputPool | None = None,
                   aborted: AbortedRanges | None = None) -> Entries:
    """Check and decode the entries of ``buf[start:end]`` (v2 batches and legacy messages in any
    mix) keeping ``lo <= offset < hi``. A bad or partial entry stops the walk (reported, not
    raised: the caller knows whether a partial one is expected); what does not decode once
    checked raises CorruptRecordError naming ``path`` and the byte ``file_pos0 + pos - start``.
    ``pool``: the v2 decode's output arrays come from it; ``aborted``: skip the batches of
    these aborted transactions (read_committed).
    """
    outputs: list[DecodeOutput] = []
    count = 0
    nxt = -1
    for s, e, legacy in entry_runs(buf, start, end):
        if legacy:
            lscan = scan_legacy(buf, s, e)
            n, stop, status = lscan.count, lscan.stop_position, lscan.status
            why = None if status == LEGACY_OK else LEGACY_ERRORS.get(
                status, "a v2 batch inside a run of legacy messages")
            partial = status == LEGACY_PARTIAL
            if why is not None and not partial:
                return Entries(outputs, count, nxt, stop, why, False)
            last = int(lscan.offsets[n - 1]) if n else -1
            out = decode_legacy_scanned(buf, start, lscan, path, file_pos0, lo, hi,
                                        include_headers)
        else:
            scan = scan_batches(buf, s, e, verify_crc=True)
            n, stop, reason = scan.count, scan.stop_position, int(scan.stop_reason)
            why = None if reason == SCAN_END else STOP_WHY.get(reason, str(reason))
            partial = reason == SCAN_PARTIAL
            if why is not None and not partial:
                # (a batch failing its CRC is the scan's last entry: nothing is decoded)
                return Entries(outputs, count, nxt, stop, why, False)
            last = int(scan.last_offsets[n - 1]) if n else -1
            out = decode_scanned(buf, start, scan, path, file_pos0, lo, hi, include_headers,
                                 pool, aborted) if n else None
        if out is not None and out.rows:
            outputs.append(out)
        count += n
        if n:
            nxt = last + 1
        if why is not None:
            return Entries(outputs, count, nxt, stop, why, partial)
    return Entries(outputs, count, nxt, end, None, False)


def _data_loss(what: str, fail: bool) -> None:
    if fail:
        raise OffsetOutOfRangeError(
            f"{what}. Records were removed by retention before they were read; set "
            "failOnDataLoss=false to skip them")
    log.warning("%s; skipping the lost records (failOnDataLoss=false)", what)


def read_range(path: str, topic: str, partition: int, start: int, end: int, *,
               include_headers: bool = False, fail_on_data_loss: bool = True,
               chunk_bytes: int = 8 << 20, schema: pa.Schema | None = None,
               stats: ReadStats | None = None,
               read_committed: bool = False) -> Generator[pa.RecordBatch, None, int]:
    """Yield Arrow batches of the records with ``start <= offset < end`` of one partition;
    return the offset the walk reached (``end`` unless the local log ends before it: a
    replica behind the leader, or compaction emptied the tail).

    ``end`` must not exceed the high watermark (the caller's bound), nor, with
    ``read_committed``, the last stable offset: then the batches of the aborted transactions
    overlapping [start, end) are skipped, as the ``.txnindex`` files list them when the read
    starts (every transaction below the LSO is decided, so its entry is written). Raises CorruptRecordError
    (naming the file and batch position), OffsetOutOfRangeError (data loss with
    ``fail_on_data_loss``), KafkaStorageError (I/O).
    """
    if schema is None:
        schema = arrow_schema(include_headers)
    if start >= end:
        return start
    reader = LogReader(path)
    pool = OutputPool()  # this read's decode outputs, reused once the batch made of them is gone
    try:
        aborted = None
        if read_committed:
            aborted = AbortedRanges((t.producer_id, t.first_offset, t.last_offset)
                                    for t in reader.aborted_transactions(start, end))
        offset = start
        while offset < end:
            try:
                sl = reader.read(offset, chunk_bytes, max_offset=end)
            except OffsetOutOfRangeError:
                oldest = reader.log_start_offset_on_disk
                _data_loss(f"{topic}-{partition}: offset {offset} is no longer on disk "
                           f"(oldest segment starts at {oldest})", fail_on_data_loss)
                if oldest is None or oldest <= offset:
                    return offset
                offset = oldest
                continue
            if sl is None:
                if not reader.refresh() and offset < end:
                    _data_loss(f"{topic}-{partition}: the partition's segments vanished at "
                               f"offset {offset}", fail_on_data_loss)
                return offset  # compaction may leave no batch between offset and end
            aligned = sl.position - sl.position % _PAGE
            skew = sl.position - aligned
            # Not closed explicitly: numpy views (and an exception's frames) may still export
            # the map; it is unmapped when the last reference goes.
            # MAP_POPULATE: the pages (in page cache after a write or a first read) are mapped
            # in the one call instead of a fault per 64 KiB on first touch by the CRC scan.
            mm = mmap.mmap(sl.fd, sl.length + skew, flags=mmap.MAP_SHARED | _POPULATE,
                           prot=mmap.PROT_READ, offset=aligned)
            buf = np.frombuffer(mm, np.uint8)
            if stats is not None:
                stats.bytes_mapped += sl.length
            got = decode_entries(buf, skew, skew + sl.length, _file_name(sl), sl.position,
                                 start, end, include_headers, pool, aborted)
            if got.stop_why is not None:
                bad = got.stop_position - skew + sl.position
                raise CorruptRecordError(
                    f"{_file_name(sl)}: corrupt batch at byte {bad}: {got.stop_why}")
            if got.count == 0:
                return offset
            del buf, mm
            for out in got.outputs:
                rb = to_record_batch(out, topic, partition, schema, include_headers)
                if stats is not None:
                    stats.add_rows(rb.num_rows)
                yield rb
            offset = max(got.next_offset, offset + 1)
        return offset
    finally:
        reader.close()
        log.debug("%s-%d: decode output arrays reused %d times, allocated %d", topic, partition,
                  pool.reused, pool.allocated)


def _file_name(sl) -> str:
    # The path may have been renamed .deleted by now; it still names the segment.
    return sl.path if os.path.exists(sl.path) else sl.path + " (deleted since)"
