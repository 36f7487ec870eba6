"""numba kernels: legacy message sets (magic 0 and 1) -> the readers' columnar arrays.

Pre-0.11 topics (``message.format.version`` below 0.11) store Kafka's legacy messages (layout in
:mod:`native.legacy_layout`): ``offset int64, messageSize int32, crc32, magic, attributes,
[timestamp int64 for magic 1], key (int32 length, -1 null), value``. A compressed entry is a
wrapper whose value is the compressed inner message set; a magic 1 wrapper's offset is the
absolute offset of its last inner message and the inner offsets are relative (absolute =
wrapper offset - last inner offset + inner offset, Kafka's rule), magic 0 inner offsets are
absolute. A magic 1 LogAppendTime wrapper's timestamp is every inner message's timestamp.

Two kernels, as the v2 path has (:func:`native.scan.scan_batches` then
:func:`native.decode.decode_records`), so decompression stays in Python between them:

- :func:`scan_legacy` walks the top-level entries of a run: framing, CRC32 of each, offsets
  strictly increasing, key/value lengths; it reports each entry (and where a wrapper's
  compressed value is) and where and why it stopped.
- :func:`decode_legacy` turns sections into the same :class:`native.decode.DecodeOutput` the v2
  kernel fills: a section is either a run of top-level uncompressed entries (already checked by
  the scan) or a wrapper's decompressed inner set, whose messages it checks (CRC32, same magic
  as the wrapper, not compressed again, offsets increasing) before it emits them.

Rows: no headers (an empty list with includeHeaders), key and value as stored; magic 0 has no
timestamp: -1 ms with timestampType -1, as Kafka's consumer reports NO_TIMESTAMP_TYPE (and so
Spark's Kafka source). Nothing here raises for bad data: statuses are in :data:`LEGACY_ERRORS`.
Thread-safe; the GIL is released. The twins are in :mod:`native.legacy_decode_twin`, and
tests/native/test_legacy_decode.py holds them to the same output and the same first error.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from native import legacy_layout as L
from native.big_endian import be_i32, be_i64, be_u32
from native.buffers import u8_range
from native.crc import crc32_raw
from native.decode import DecodeOutput, row_columns, row_fields

__all__ = [
    "scan_legacy", "decode_legacy", "LegacyScan", "LEGACY_OK", "LEGACY_PARTIAL",
    "LEGACY_V2", "LEGACY_ERRORS", "MIN_MESSAGE", "TS_TYPE_NONE",
]

LEGACY_OK = 0
LEGACY_PARTIAL = 1  # an entry runs past the end of the data (a Fetch answer's byte limit)
_BAD_HEADER = 2
_BAD_CRC = 3
_BACKWARDS = 4
_BAD_LENGTH = 5
_BAD_FILL = 6
_BAD_CODEC = 7
_BAD_WRAPPER = 8
_NESTED = 9
LEGACY_V2 = 10  # the scan reached a v2 batch: the end of a legacy run, not an error
_INNER_CUT = 11
_FULL = -1  # scan kernel only: its arrays are full; the wrapper grows them and resumes
#: status -> what is wrong (the caller names the file and the byte position)
LEGACY_ERRORS = {
    LEGACY_PARTIAL: "a message runs past the end of the data",
    _BAD_HEADER: "bad message header (messageSize too small, or magic not 0 or 1)",
    _BAD_CRC: "CRC32 mismatch",
    _BACKWARDS: "offsets go backwards",
    _BAD_LENGTH: "a key or value length is below -1 or runs past its message",
    _BAD_FILL: "the key and value do not fill the message",
    _BAD_CODEC: "compression codec 4-7, which magic 0 and 1 cannot carry",
    _BAD_WRAPPER: "a compressed message with a null value or no inner messages",
    _NESTED: "an inner message is compressed again or has another magic than its wrapper",
    _INNER_CUT: "the inner message set of a compressed message ends inside a message",
}

#: Fewest bytes a message takes (magic 0, null key and value): what bounds the row count.
MIN_MESSAGE = L.HEADER_SIZE_V0 + 2 * L.LENGTH_SIZE
#: timestampType of a magic 0 row (Kafka's TimestampType.NO_TIMESTAMP_TYPE id; spark.schema has it too).
TS_TYPE_NONE = -1
_TS_CREATE = 0
_TS_LOG_APPEND = 1
_CRC_INIT = np.int64(0xFFFFFFFF)
_SIZE_POS = L.LOG_OVERHEAD - L.LENGTH_SIZE  # messageSize follows the offset


class LegacyScan(NamedTuple):
    """One entry per top-level message walked, in buffer order (``count`` of each)."""

    positions: np.ndarray   # int64: entry start, absolute index into the buffer
    sizes: np.ndarray       # int64: whole entry, offset and messageSize included
    offsets: np.ndarray     # int64: the entry's offset (a wrapper's: its last inner message's)
    magics: np.ndarray      # uint8
    attributes: np.ndarray  # uint8 (codec in bits 0-2, LogAppendTime bit 3 for magic 1)
    timestamps: np.ndarray  # int64: -1 for magic 0
    value_starts: np.ndarray  # int64: where the value (a wrapper's compressed set) starts
    value_sizes: np.ndarray   # int64: -1 for a null value
    count: int
    stop_position: int  # first byte not covered by a valid entry
    status: int  # LEGACY_OK (clean end), LEGACY_V2, or one of LEGACY_ERRORS


@njit(nogil=True, cache=True, inline="always")
def _message(a, pos, end, verify):
    """The message at a[pos:end]: (status, end of message, offset, magic, attributes,
    timestamp, key start, key length, value start, value length); lengths -1 = null."""
    z = np.int64(0)
    avail = end - pos
    if avail < L.LOG_OVERHEAD:
        return LEGACY_PARTIAL, pos, z, 0, 0, z, z, z, z, z
    size = be_i32(a, pos + _SIZE_POS)
    if size < MIN_MESSAGE - L.LOG_OVERHEAD:
        return _BAD_HEADER, pos, z, 0, 0, z, z, z, z, z
    magic = 0
    if avail > L.MAGIC_OFFSET:
        magic = np.int64(a[pos + L.MAGIC_OFFSET])
        if magic > 1:
            return LEGACY_V2 if magic == 2 else _BAD_HEADER, pos, z, 0, 0, z, z, z, z, z
    if size > avail - L.LOG_OVERHEAD:
        return LEGACY_PARTIAL, pos, z, 0, 0, z, z, z, z, z
    mend = pos + L.LOG_OVERHEAD + size
    hdr = L.HEADER_SIZE_V1 if magic else L.HEADER_SIZE_V0
    if size < hdr + 2 * L.LENGTH_SIZE - L.LOG_OVERHEAD:
        return _BAD_HEADER, pos, z, 0, 0, z, z, z, z, z
    if verify:
        crc = crc32_raw(_CRC_INIT, a, pos + L.MAGIC_OFFSET, mend) ^ _CRC_INIT
        if np.int64(crc) != be_u32(a, pos + L.CRC_OFFSET):
            return _BAD_CRC, pos, z, 0, 0, z, z, z, z, z
    offset = be_i64(a, pos)
    attrs = np.int64(a[pos + L.ATTRIBUTES_OFFSET])
    ts = be_i64(a, pos + L.TIMESTAMP_OFFSET) if magic else np.int64(L.NO_TIMESTAMP)
    p = pos + hdr
    klen = be_i32(a, p)
    p += L.LENGTH_SIZE
    if klen < -1 or klen > mend - p - L.LENGTH_SIZE:
        return _BAD_LENGTH, pos, z, 0, 0, z, z, z, z, z
    kstart = p
    if klen > 0:
        p += klen
    vlen = be_i32(a, p)
    p += L.LENGTH_SIZE
    if vlen < -1 or vlen > mend - p:
        return _BAD_LENGTH, pos, z, 0, 0, z, z, z, z, z
    vstart = p
    if vlen > 0:
        p += vlen
    if p != mend:
        return _BAD_FILL, pos, z, 0, 0, z, z, z, z, z
    return LEGACY_OK, mend, offset, magic, attrs, ts, kstart, klen, vstart, vlen


@njit(nogil=True, cache=True)
def _scan(a, pos, end, prev, n, positions, sizes, offsets, magics, attributes, timestamps,
          vstarts, vsizes):
    """Walk top-level messages from ``pos``, appending at index ``n``; returns (n, stop
    position, status, prev offset). Status _FULL: the arrays are full, resume from there."""
    cap = positions.shape[0]
    while pos < end:
        if n == cap:
            return n, pos, _FULL, prev
        status, mend, offset, magic, attrs, ts, _ks, _kl, vs, vl = _message(a, pos, end, True)
        if status != LEGACY_OK:
            return n, pos, status, prev
        if offset <= prev:
            return n, pos, _BACKWARDS, prev
        codec = attrs & L.CODEC_MASK
        if codec > 3:
            return n, pos, _BAD_CODEC, prev
        if codec and vl < 0:
            return n, pos, _BAD_WRAPPER, prev
        positions[n] = pos
        sizes[n] = mend - pos
        offsets[n] = offset
        magics[n] = magic
        attributes[n] = attrs
        timestamps[n] = ts
        vstarts[n] = vs
        vsizes[n] = vl
        n += 1
        prev = offset
        pos = mend
    return n, pos, LEGACY_OK, prev


def _scan_arrays(cap: int) -> list[np.ndarray]:
    return [np.empty(cap, np.int64), np.empty(cap, np.int64), np.empty(cap, np.int64),
            np.empty(cap, np.uint8), np.empty(cap, np.uint8), np.empty(cap, np.int64),
            np.empty(cap, np.int64), np.empty(cap, np.int64)]


def scan_legacy(buf: object, start: int = 0, end: int = -1) -> LegacyScan:
    """Walk the legacy messages of ``buf[start:end]`` until the end, a v2 batch or the first
    bad or partial message (its CRC32 included). Positions are absolute indexes into ``buf``.
    Raises ValueError for a bad range, never for bad data."""
    a, s, e = u8_range(buf, start, end)
    cap = max(16, (e - s) // 1024)
    out = _scan_arrays(cap)
    n, pos, prev = 0, s, np.int64(-1)
    while True:
        n, pos, status, prev = _scan(a, pos, e, prev, n, *out)
        if status != _FULL:
            break
        grown = _scan_arrays(2 * out[0].shape[0])
        for new, old in zip(grown, out, strict=True):
            new[:n] = old[:n]
        out = grown
    return LegacyScan(*(x[:n] for x in out), count=int(n), stop_position=int(pos),
                      status=int(status))


@njit(nogil=True, cache=True, inline="always")
def _emit(n, offset, ts_ms, ts_type, a, ks, kl, vs, vl, kpos, vpos, out_off, out_ts, out_tt,
          key_offs, key_valid, key_data, val_offs, val_valid, val_data):
    """Write one row at index n; returns the new key and value data ends."""
    out_off[n] = offset
    out_ts[n] = ts_ms * 1000
    out_tt[n] = ts_type
    kpos = _put_field(n, a, ks, kl, kpos, key_data, key_offs, key_valid)
    vpos = _put_field(n, a, vs, vl, vpos, val_data, val_offs, val_valid)
    return kpos, vpos


@njit(nogil=True, cache=True, inline="always")
def _put_field(n, a, start, length, pos, data, offs, valid):
    """Row n's key or value (``length`` -1: null) into its Arrow column; the new data end."""
    if length >= 0:
        data[pos:pos + length] = a[start:start + length]
        pos += length
        valid[n] = 1
    else:
        valid[n] = 0
    offs[n + 1] = pos
    return pos


@njit(nogil=True, cache=True)
def _decode(a, sec_start, sec_end, sec_inner, sec_offset, sec_magic, sec_ts, sec_lat, lo, hi,
            out_off, out_ts, out_tt, key_offs, key_valid, key_data, val_offs, val_valid,
            val_data):
    """Rows of every section, keeping lo <= offset < hi; returns (rows, status, bad section)."""
    n = 0
    kpos = 0
    vpos = 0
    key_offs[0] = 0
    val_offs[0] = 0
    for s in range(sec_start.shape[0]):
        end = sec_end[s]
        inner = sec_inner[s] != 0
        shift = np.int64(0)
        if inner:
            # Pass 1: check the inner set and find its last offset (magic 1 offsets are
            # relative to it).
            p = sec_start[s]
            prev = np.int64(-1)
            count = 0
            while p < end:
                status, mend, offset, magic, attrs, _ts, _ks, _kl, _vs, _vl = _message(
                    a, p, end, True)
                if status == LEGACY_PARTIAL:
                    return n, _INNER_CUT, s
                if status == LEGACY_V2:
                    return n, _NESTED, s
                if status != LEGACY_OK:
                    return n, status, s
                if magic != sec_magic[s] or attrs & L.CODEC_MASK:
                    return n, _NESTED, s
                if offset <= prev:
                    return n, _BACKWARDS, s
                prev = offset
                count += 1
                p = mend
            if count == 0:
                return n, _BAD_WRAPPER, s
            if sec_magic[s] == 1:
                shift = sec_offset[s] - prev
        p = sec_start[s]
        while p < end:
            status, mend, offset, magic, attrs, ts, ks, kl, vs, vl = _message(a, p, end, False)
            if status != LEGACY_OK:  # a top-level section the scan did not check
                return n, status, s
            p = mend
            offset += shift
            if not lo <= offset < hi:
                continue
            if magic == 0:
                ts_type = TS_TYPE_NONE
                ts = np.int64(L.NO_TIMESTAMP)
            elif inner and sec_lat[s]:
                ts_type = _TS_LOG_APPEND
                ts = sec_ts[s]
            elif not inner and attrs & L.TIMESTAMP_TYPE_BIT:
                ts_type = _TS_LOG_APPEND
            else:
                ts_type = _TS_CREATE
            kpos, vpos = _emit(n, offset, ts, ts_type, a, ks, kl, vs, vl, kpos, vpos, out_off,
                               out_ts, out_tt, key_offs, key_valid, key_data, val_offs,
                               val_valid, val_data)
            n += 1
    return n, LEGACY_OK, -1


def decode_legacy(buf: np.ndarray, sec_start: np.ndarray, sec_end: np.ndarray,
                  sec_inner: np.ndarray, sec_offset: np.ndarray, sec_magic: np.ndarray,
                  sec_ts: np.ndarray, sec_lat: np.ndarray, lo: int, hi: int,
                  want_headers: bool) -> tuple[DecodeOutput | None, int, int]:
    """Decode sections ``buf[sec_start[i]:sec_end[i]]`` into rows with ``lo <= offset < hi``.

    ``sec_inner[i]`` 0: top-level uncompressed messages (checked by :func:`scan_legacy`); 1: a
    wrapper's decompressed inner set, with the wrapper's offset, magic, timestamp and
    LogAppendTime flag in ``sec_offset``/``sec_magic``/``sec_ts``/``sec_lat``. Returns (output,
    status, bad section index); output is None when status is in :data:`LEGACY_ERRORS`.
    ``want_headers``: add the (empty) header columns. Raises nothing for bad data.
    """
    sizes = sec_end - sec_start
    rows_cap = int((sizes // MIN_MESSAGE).sum())
    data_cap = int(sizes.sum())
    cols = row_columns(rows_cap, data_cap)
    n, status, bad = _decode(buf, sec_start, sec_end, sec_inner, sec_offset, sec_magic, sec_ts,
                             sec_lat, lo, hi, *cols)
    if status != LEGACY_OK:
        return None, int(status), int(bad)
    empty_i32 = np.zeros(1, np.int32)
    return DecodeOutput(
        **row_fields(cols, int(n)),
        header_offsets=np.zeros(n + 1, np.int32) if want_headers else None,
        hkey_offsets=empty_i32 if want_headers else None,
        hkey_data=np.empty(0, np.uint8) if want_headers else None,
        hvalue_offsets=empty_i32 if want_headers else None,
        hvalue_valid=np.empty(0, np.uint8) if want_headers else None,
        hvalue_data=np.empty(0, np.uint8) if want_headers else None,
    ), LEGACY_OK, -1
