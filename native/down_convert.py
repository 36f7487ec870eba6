"""Down-convert v2 RecordBatches to legacy message sets (magic 0 or 1): old fetchers' hot loop.

:func:`convert_batches` walks a run of batches (a Fetch answer's bytes) and writes one legacy
message per record of each uncompressed batch straight into an output array, CRC32 included;
headers are dropped and control batches skipped, as Kafka does. It stops and hands back to the
caller at what it does not do itself: a compressed batch (the caller decompresses it, converts
its records with :func:`convert_records` and compresses them into one wrapper message), a full
output array (the caller grows it and resumes), and anything malformed (the caller runs the
pure-Python converter, which raises the precise error). Nothing here raises for bad data.

Its twin is :func:`appliance.records.convert.v2_to_legacy`; the driver that pairs the two is
:mod:`appliance.records.down_convert`, and tests/native/test_down_convert.py holds them to the
same bytes and the same accept/refuse decisions.

Measured reason it exists (perf/bench_down_convert.py --inproc): the Python converter built a
Record and then a message per record, ~13 k records/s through a real broker; an old consumer
was served at about a hundredth of a current one's speed.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from native import batch_layout as B
from native import legacy_layout as L
from native.big_endian import be_i16, be_i32, be_i64, be_u32, put_be_i64, put_be_u32
from native.buffers import as_u8
from native.cpu import TABLE_FORCED
from native.crc import crc32_raw, crc32c_raw
from native.varint import read_length, read_uvarint, unzigzag

__all__ = [
    "convert_batches", "convert_records", "records_bound", "DC_OK", "DC_COMPRESSED",
    "DC_OUT_FULL", "DC_ZSTD", "DC_BAD", "DC_STATUS",
]

DC_OK = 0           # all converted (or the rest is a truncated last batch, when allowed)
DC_COMPRESSED = 1   # stopped at a compressed batch (CRC checked) for the caller to convert
DC_OUT_FULL = 2     # the output array cannot hold the next batch: grow it and resume
DC_ZSTD = 3         # a ZSTD batch: magic 0/1 cannot carry it
DC_BAD = 4          # malformed: the caller runs the Python converter for the precise error
DC_STATUS = {0: "ok", 1: "compressed batch", 2: "output full", 3: "ZSTD batch", 4: "malformed"}

_CRC_INIT = np.int64(0xFFFFFFFF)
_ZSTD = 4
_U32_MAX = np.int64(0xFFFFFFFF)
# Fewest bytes a v2 record can take: length, attributes, timestampDelta, offsetDelta, key
# length, value length, header count - one byte each.
_MIN_RECORD = 7


def records_bound(section_bytes: int) -> int:
    """Most output bytes the records of ``section_bytes`` bytes of v2 records can become: each
    record of S bytes (S >= 7 + key + value) becomes at most MAX_OVERHEAD + key + value bytes."""
    return section_bytes + (L.MAX_OVERHEAD - _MIN_RECORD) * (section_bytes // _MIN_RECORD + 1)


@njit(nogil=True, cache=not TABLE_FORCED)
def _put_message(out, q, offset, magic, attrs, ts, src, kstart, klen, vstart, vlen):
    """One legacy message at out[q]; returns the position after it. klen/vlen -1 = null."""
    hdr = L.HEADER_SIZE_V1 if magic else L.HEADER_SIZE_V0
    p = q + hdr
    put_be_u32(out, p, klen & 0xFFFFFFFF)
    p += L.LENGTH_SIZE
    if klen > 0:
        out[p:p + klen] = src[kstart:kstart + klen]  # a memcpy, not a byte loop
        p += klen
    put_be_u32(out, p, vlen & 0xFFFFFFFF)
    p += L.LENGTH_SIZE
    if vlen > 0:
        out[p:p + vlen] = src[vstart:vstart + vlen]
        p += vlen
    put_be_i64(out, q, offset)
    put_be_u32(out, q + L.LOG_OVERHEAD - L.LENGTH_SIZE, p - q - L.LOG_OVERHEAD)
    out[q + L.MAGIC_OFFSET] = magic
    out[q + L.ATTRIBUTES_OFFSET] = attrs
    if magic:
        put_be_i64(out, q + L.TIMESTAMP_OFFSET, ts)
    crc = crc32_raw(_CRC_INIT, out, q + L.MAGIC_OFFSET, p) ^ _U32_MAX
    put_be_u32(out, q + L.CRC_OFFSET, np.int64(crc))
    return p


@njit(nogil=True, cache=not TABLE_FORCED)
def _records(src, p, end, count, base_offset, base_ts, max_ts, log_append, last_delta, magic,
             relative, out, q, refuse_headers):
    """Convert ``count`` v2 records filling src[p:end] to messages at out[q:].

    The checks are the Python decoder's (appliance.records.batch._decode_records_section), so
    what it refuses this refuses. ``relative``: offsets relative to the first record (a magic 1
    wrapper's inner set). ``refuse_headers``: a record with headers is not ok (storing produce
    in a legacy format, which Kafka refuses; the caller names the error). Returns (ok, end
    position in out, records, last offset, max timestamp).
    """
    attrs = L.TIMESTAMP_TYPE_BIT if (magic == 1 and log_append) else 0
    prev = np.int64(-1)
    first = np.int64(0)
    last_off = np.int64(-1)
    top_ts = np.int64(-1)
    for i in range(count):
        if p >= end:
            return False, q, i, last_off, top_ts
        u, p = read_uvarint(src, p, end, 5)
        if p < 0 or u > _U32_MAX:
            return False, q, i, last_off, top_ts
        length = unzigzag(u)
        if length < 6 or length > end - p:
            return False, q, i, last_off, top_ts
        rec_end = p + length
        u, p = read_uvarint(src, p + 1, rec_end, 10)  # after the attributes: timestampDelta
        if p < 0:
            return False, q, i, last_off, top_ts
        ts_delta = unzigzag(u)
        u, p = read_uvarint(src, p, rec_end, 5)
        if p < 0 or u > _U32_MAX:
            return False, q, i, last_off, top_ts
        od = unzigzag(u)
        if od <= prev:
            return False, q, i, last_off, top_ts
        prev = od
        klen, p = read_length(src, p, rec_end)
        if p < 0:
            return False, q, i, last_off, top_ts
        kstart = p
        if klen > 0:
            p += klen
        vlen, p = read_length(src, p, rec_end)
        if p < 0:
            return False, q, i, last_off, top_ts
        vstart = p
        if vlen > 0:
            p += vlen
        u, p = read_uvarint(src, p, rec_end, 5)
        if p < 0 or u > _U32_MAX:
            return False, q, i, last_off, top_ts
        hc = unzigzag(u)
        if hc < 0 or (refuse_headers and hc > 0):
            return False, q, i, last_off, top_ts
        for _ in range(hc):  # headers: checked, then dropped (v0/v1 cannot carry them)
            hkl, p = read_length(src, p, rec_end)
            if p < 0 or hkl < 0:  # a header key is never null
                return False, q, i, last_off, top_ts
            p += hkl
            hvl, p = read_length(src, p, rec_end)
            if p < 0:
                return False, q, i, last_off, top_ts
            if hvl > 0:
                p += hvl
        if p != rec_end:
            return False, q, i, last_off, top_ts
        offset = base_offset + od
        if i == 0:
            first = offset
        ts = max_ts if log_append else base_ts + ts_delta
        if ts > top_ts or i == 0:
            top_ts = ts
        last_off = offset
        q = _put_message(out, q, offset - first if relative else offset, magic, attrs, ts,
                         src, kstart, klen, vstart, vlen)
    if p != end:
        return False, q, count, last_off, top_ts
    if count > 0 and prev != last_delta:
        return False, q, count, last_off, top_ts
    return True, q, count, last_off, top_ts


@njit(nogil=True, cache=not TABLE_FORCED)
def _batches(src, pos, n, magic, allow_partial, out, q, refuse_headers):
    """Convert the batches of src[pos:n] from ``pos``; returns (status, pos, q): where it stopped
    in the input (the start of the batch it stopped at) and the end of the output so far."""
    cap = out.shape[0]
    while pos < n:
        if allow_partial:
            # iter_batches(allow_partial=True): a batch that plainly runs past the end is the
            # fetch's byte limit cutting it, not corruption.
            if n - pos < B.HEADER_SIZE:
                return DC_OK, pos, q
            length = be_i32(src, pos + B.LENGTH_OFFSET)
            if (pos + B.LOG_OVERHEAD + length > n and src[pos + B.MAGIC_OFFSET] == B.CURRENT_MAGIC
                    and length >= B.MIN_BATCH_LENGTH):
                return DC_OK, pos, q
        if n - pos < B.HEADER_SIZE or src[pos + B.MAGIC_OFFSET] != B.CURRENT_MAGIC:
            return DC_BAD, pos, q
        length = be_i32(src, pos + B.LENGTH_OFFSET)
        if length < B.MIN_BATCH_LENGTH or length > n - pos - B.LOG_OVERHEAD:
            return DC_BAD, pos, q
        end = pos + B.LOG_OVERHEAD + length
        attributes = be_i16(src, pos + B.ATTRIBUTES_OFFSET)  # only its low flag bits are read
        if attributes & B.CONTROL_FLAG_MASK:
            pos = end  # a transaction marker has no v0/v1 form
            continue
        codec = attributes & B.COMPRESSION_CODEC_MASK
        if codec == _ZSTD:
            return DC_ZSTD, pos, q
        crc = crc32c_raw(_CRC_INIT, src, pos + B.CRC_START, end) ^ _U32_MAX
        if np.int64(crc) != be_u32(src, pos + B.CRC_OFFSET):
            return DC_BAD, pos, q
        count = be_i32(src, pos + B.RECORDS_COUNT_OFFSET)
        if count < 0 or codec > _ZSTD:
            return DC_BAD, pos, q
        if codec != 0:
            return DC_COMPRESSED, pos, q
        section = end - pos - B.HEADER_SIZE
        if q + section + (L.MAX_OVERHEAD - _MIN_RECORD) * (section // _MIN_RECORD + 1) > cap:
            return DC_OUT_FULL, pos, q
        ok, q2, _, _, _ = _records(
            src, pos + B.HEADER_SIZE, end, count, be_i64(src, pos + B.BASE_OFFSET_OFFSET),
            be_i64(src, pos + B.BASE_TIMESTAMP_OFFSET),
            be_i64(src, pos + B.MAX_TIMESTAMP_OFFSET),
            (attributes & B.TIMESTAMP_TYPE_MASK) != 0,
            be_i32(src, pos + B.LAST_OFFSET_DELTA_OFFSET), magic, False, out, q, refuse_headers)
        if not ok:
            return DC_BAD, pos, q
        q = q2
        pos = end
    return DC_OK, pos, q


def convert_batches(src: np.ndarray, pos: int, magic: int, allow_partial: bool,
                    out: np.ndarray, q: int, refuse_headers: bool = False) -> tuple[int, int, int]:
    """Convert the v2 batches of ``src`` (1-D uint8) from byte ``pos`` into ``out`` (1-D uint8)
    from byte ``q``, as magic ``magic`` (0 or 1) messages. Returns (status ``DC_*``, the input
    position it stopped at, the output's end). ``refuse_headers``: a batch holding a record
    with headers is DC_BAD instead of losing them. Never raises for bad data."""
    if magic not in (0, 1):
        raise ValueError(f"legacy magic must be 0 or 1, not {magic}")
    status, p, q2 = _batches(src, pos, src.shape[0], magic, allow_partial, out, q,
                             bool(refuse_headers))
    return int(status), int(p), int(q2)


def convert_records(buf: object, count: int, base_offset: int, base_timestamp: int,
                    max_timestamp: int, log_append_time: bool, last_offset_delta: int,
                    magic: int, relative: bool, out: np.ndarray,
                    q: int = 0, refuse_headers: bool = False) -> tuple[bool, int, int, int, int]:
    """Convert the ``count`` records that fill ``buf`` (a decompressed records section) to
    magic ``magic`` messages at ``out[q:]`` (sized with :func:`records_bound`); ``relative``
    numbers them from 0 (a magic 1 wrapper's inner set). Returns (ok, the output's end, records
    converted, the last record's absolute offset, the largest timestamp); ``refuse_headers`` as
    :func:`convert_batches`."""
    a = as_u8(buf)
    ok, q2, k, last, top = _records(a, 0, a.shape[0], count, base_offset, base_timestamp,
                                    max_timestamp, log_append_time, last_offset_delta, magic,
                                    relative, out, q, bool(refuse_headers))
    return bool(ok), int(q2), int(k), int(last), int(top)
