"""numba kernel: the records of many v2 batches -> columnar arrays (Arrow buffers).

One call decodes the records sections of a run of batches that sit in one uint8 buffer (the
mmap'd segment for uncompressed batches, or a buffer of decompressed sections) straight into the
buffers an Arrow BinaryArray / ListArray is made of: int32 offsets, a validity byte per row and a
contiguous data area. No Python object is made per record.

Record layout (Kafka DefaultRecord): length varint, attributes int8, timestampDelta varlong,
offsetDelta varint, keyLength varint (-1 null), key, valueLength varint (-1 null), value,
headersCount varint, then per header keyLength varint, key (utf-8), valueLength varint, value.

The kernel never raises: a malformed record is reported through the returned status and the
index of the batch it is in (see :data:`DECODE_ERRORS`). Thread-safe (no shared state); the GIL is
released. Its pure-Python twin is :func:`native.decode_twin.decode_records_twin`; the tests in
tests/native/test_decode.py hold the two to the same output and the same first error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from numba import njit

from native.intrinsics import copy_bytes
from native.out_pool import OutputPool

__all__ = [
    "decode_records", "DecodeOutput", "RowColumns", "row_columns", "row_fields", "DECODE_OK", "DECODE_HEADERS_FULL", "DECODE_ERRORS",
]

DECODE_OK = 0
DECODE_HEADERS_FULL = 1  # header output arrays too small: the caller grows them and calls again
#: status -> what was wrong (the caller adds the file and position of the batch)
DECODE_ERRORS = {
    2: "a varint runs past the end of its record",
    3: "a record length is impossible",
    4: "a key or value length is below -1 or runs past its record",
    5: "the fields of a record do not add up to its length",
    6: "the records do not fill the batch exactly (recordsCount disagrees with the data)",
    7: "a header key is null, negative or runs past its record",
    8: "offsetDeltas do not increase",
    9: "a records section lies outside the buffer, or the output areas are too small "
       "(a caller's error, not the data's)",
}


@njit(nogil=True, cache=True, inline="always")
def _varint(a, p, end):
    """(zigzag-decoded value, next position); next position -1 when it runs past ``end``."""
    result = np.int64(0)
    shift = 0
    while True:
        if p >= end or shift > 63:
            return np.int64(0), -1
        b = np.int64(a[p])
        p += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
    return (result >> 1) ^ -(result & 1), p


@njit(nogil=True, cache=True)
def _decode(a, sec_start, sec_end, base_off, base_ts, max_ts, log_append, counts, lo, hi,
            want_headers, out_off, out_ts, out_tstype, key_offs, key_valid, key_data,
            val_offs, val_valid, val_data, hdr_offs, hk_offs, hk_data, hv_offs, hv_valid,
            hv_data):
    """Decode every record of batches i in [0, len(sec_start)) keeping lo <= offset < hi.

    Returns (rows, headers, status, bad_batch). Timestamps come out in microseconds.
    """
    n = 0
    nh = 0
    kpos = 0
    vpos = 0
    hkpos = 0
    hvpos = 0
    hcap = hk_offs.shape[0] - 1
    key_offs[0] = 0
    val_offs[0] = 0
    if want_headers:
        hdr_offs[0] = 0
        hk_offs[0] = 0
        hv_offs[0] = 0
    for b in range(sec_start.shape[0]):
        p = sec_start[b]
        end = sec_end[b]
        # copy_bytes checks no bounds: every key and value lies in [p, end), so that range
        # must lie in ``a``, and the key and value areas must hold it (the caller sizes them at
        # the sections' total): checked once per batch rather than per copy.
        if p < 0 or end < p or end > a.shape[0] or end - p > key_data.shape[0] - kpos or \
                end - p > val_data.shape[0] - vpos:
            return n, nh, 9, b
        prev = np.int64(-1)
        for _ in range(counts[b]):
            length, p = _varint(a, p, end)
            if p < 0:
                return n, nh, 2, b
            # Compared as lengths, not as end positions: p + a hostile length could overflow.
            if length < 6 or length > end - p:
                return n, nh, 3, b
            rec_end = p + length
            p += 1  # attributes: unused in v2
            ts_delta, p = _varint(a, p, rec_end)
            if p < 0:
                return n, nh, 2, b
            od, p = _varint(a, p, rec_end)
            if p < 0:
                return n, nh, 2, b
            if od <= prev:
                return n, nh, 8, b
            prev = od
            offset = base_off[b] + od
            keep = lo <= offset < hi
            kl, p = _varint(a, p, rec_end)
            if p < 0:
                return n, nh, 2, b
            if kl < -1 or kl > rec_end - p:
                return n, nh, 4, b
            kstart = p
            if kl > 0:
                p += kl
            vl, p = _varint(a, p, rec_end)
            if p < 0:
                return n, nh, 2, b
            if vl < -1 or vl > rec_end - p:
                return n, nh, 4, b
            vstart = p
            if vl > 0:
                p += vl
            hc, p = _varint(a, p, rec_end)
            if p < 0:
                return n, nh, 2, b
            if hc < 0:
                return n, nh, 7, b
            if keep and want_headers and nh + hc > hcap:
                return n, nh, DECODE_HEADERS_FULL, b
            for _h in range(hc):
                hkl, p = _varint(a, p, rec_end)
                if p < 0:
                    return n, nh, 2, b
                if hkl < 0 or hkl > rec_end - p:
                    return n, nh, 7, b
                hks = p
                p += hkl
                hvl, p = _varint(a, p, rec_end)
                if p < 0:
                    return n, nh, 2, b
                if hvl < -1 or hvl > rec_end - p:
                    return n, nh, 4, b
                hvs = p
                if hvl > 0:
                    p += hvl
                if keep and want_headers:
                    # Slices, not copy_bytes, on purpose: with copy_bytes here too the whole
                    # kernel ran 4x slower on records without headers (65 against 15 ns per
                    # 100-byte record, perf/README.md); headers are few and short.
                    hk_data[hkpos:hkpos + hkl] = a[hks:hks + hkl]
                    hkpos += hkl
                    hk_offs[nh + 1] = hkpos
                    if hvl >= 0:
                        hv_data[hvpos:hvpos + hvl] = a[hvs:hvs + hvl]
                        hvpos += hvl
                        hv_valid[nh] = 1
                    else:
                        hv_valid[nh] = 0
                    hv_offs[nh + 1] = hvpos
                    nh += 1
            if p != rec_end:
                return n, nh, 5, b
            if not keep:
                continue
            out_off[n] = offset
            if log_append[b]:
                out_ts[n] = max_ts[b] * 1000
                out_tstype[n] = 1
            else:
                out_ts[n] = (base_ts[b] + ts_delta) * 1000
                out_tstype[n] = 0
            if kl >= 0:
                copy_bytes(key_data, kpos, a, kstart, kl)
                kpos += kl
                key_valid[n] = 1
            else:
                key_valid[n] = 0
            key_offs[n + 1] = kpos
            if vl >= 0:
                copy_bytes(val_data, vpos, a, vstart, vl)
                vpos += vl
                val_valid[n] = 1
            else:
                val_valid[n] = 0
            val_offs[n + 1] = vpos
            if want_headers:
                hdr_offs[n + 1] = nh
            n += 1
        if p != end:
            return n, nh, 6, b
    return n, nh, DECODE_OK, -1


class DecodeOutput:
    """Column buffers of one decoded run of batches (numpy arrays, trimmed to ``rows``)."""

    __slots__ = ("rows", "offsets", "timestamps_us", "timestamp_types", "key_offsets",
                 "key_valid", "key_data", "value_offsets", "value_valid", "value_data",
                 "header_offsets", "hkey_offsets", "hkey_data", "hvalue_offsets",
                 "hvalue_valid", "hvalue_data")

    def __init__(self, **kw: object) -> None:
        for k, v in kw.items():
            setattr(self, k, v)


def _fresh(_name: str, size: int, dtype: type) -> np.ndarray:
    return np.empty(size, dtype)


class RowColumns(NamedTuple):
    """The per-row output arrays a decode kernel fills, in the order the kernels take them."""

    offsets: np.ndarray  # int64
    timestamps: np.ndarray  # int64, microseconds
    timestamp_types: np.ndarray  # int32
    key_offsets: np.ndarray  # int32, rows + 1
    key_valid: np.ndarray  # uint8
    key_data: np.ndarray  # uint8
    value_offsets: np.ndarray  # int32, rows + 1
    value_valid: np.ndarray  # uint8
    value_data: np.ndarray  # uint8


def row_columns(rows_cap: int, data_cap: int,
                take: Callable[[str, int, type], np.ndarray] | None = None) -> RowColumns:
    """Row arrays for up to ``rows_cap`` rows whose keys and values come from ``data_cap``
    bytes of sections; ``take(name, size, dtype)`` makes each (an OutputPool's), else fresh."""
    if take is None:
        take = _fresh
    # Keys and values are disjoint parts of the sections, so the two areas share one bound.
    offsets = take("offsets", rows_cap, np.int64)
    timestamps = take("timestamps", rows_cap, np.int64)
    timestamp_types = take("timestamp_types", rows_cap, np.int32)
    key_offsets = take("key_offsets", rows_cap + 1, np.int32)
    key_valid = take("key_valid", rows_cap, np.uint8)
    value_offsets = take("value_offsets", rows_cap + 1, np.int32)
    value_valid = take("value_valid", rows_cap, np.uint8)
    key_data = take("key_data", data_cap, np.uint8)
    value_data = take("value_data", data_cap, np.uint8)
    return RowColumns(offsets, timestamps, timestamp_types, key_offsets, key_valid, key_data,
                      value_offsets, value_valid, value_data)


def row_fields(cols: RowColumns, n: int) -> dict[str, object]:
    """The :class:`DecodeOutput` fields of the first ``n`` rows a kernel wrote to ``cols``."""
    return {
        "rows": n, "offsets": cols.offsets[:n], "timestamps_us": cols.timestamps[:n],
        "timestamp_types": cols.timestamp_types[:n], "key_offsets": cols.key_offsets[:n + 1],
        "key_valid": cols.key_valid[:n], "key_data": cols.key_data[:int(cols.key_offsets[n])],
        "value_offsets": cols.value_offsets[:n + 1], "value_valid": cols.value_valid[:n],
        "value_data": cols.value_data[:int(cols.value_offsets[n])]}


def decode_records(buf: np.ndarray, sec_start: np.ndarray, sec_end: np.ndarray,
                   base_offsets: np.ndarray, base_timestamps: np.ndarray,
                   max_timestamps: np.ndarray, log_append: np.ndarray, counts: np.ndarray,
                   lo: int, hi: int, want_headers: bool, pool: OutputPool | None = None
                   ) -> tuple[DecodeOutput | None, int, int]:
    """Decode the records sections ``buf[sec_start[i]:sec_end[i]]`` of batches i.

    Keeps records with ``lo <= offset < hi``. Returns (output, status, bad batch index):
    output is None when status is one of :data:`DECODE_ERRORS`. Raises nothing for bad data.
    ``pool``: the output arrays come from it (reused once the previous outputs are dropped)
    instead of fresh memory.
    """
    take = _fresh if pool is None else pool.take
    rows_cap = int(counts.sum())
    data_cap = int((sec_end - sec_start).sum())
    cols = row_columns(rows_cap, data_cap, take)
    hcap = rows_cap if want_headers else 0
    while True:
        hsize = hcap if want_headers else 0
        hdr_offs = take("header_offsets", rows_cap + 1 if want_headers else 1, np.int32)
        hk_offs = take("hkey_offsets", hsize + 1, np.int32)
        hv_offs = take("hvalue_offsets", hsize + 1, np.int32)
        hv_valid = take("hvalue_valid", hsize, np.uint8)
        hk_data = take("hkey_data", data_cap if want_headers else 0, np.uint8)
        hv_data = take("hvalue_data", data_cap if want_headers else 0, np.uint8)
        n, nh, status, bad = _decode(
            buf, sec_start, sec_end, base_offsets, base_timestamps, max_timestamps, log_append,
            counts, lo, hi, want_headers, *cols, hdr_offs, hk_offs, hk_data, hv_offs,
            hv_valid, hv_data)
        if status == DECODE_HEADERS_FULL:
            hcap = max(16, 4 * hcap)
            continue
        if status != DECODE_OK:
            return None, int(status), int(bad)
        return DecodeOutput(
            **row_fields(cols, int(n)),
            header_offsets=hdr_offs[:n + 1] if want_headers else None,
            hkey_offsets=hk_offs[:nh + 1] if want_headers else None,
            hkey_data=hk_data[:int(hk_offs[nh])] if want_headers else None,
            hvalue_offsets=hv_offs[:nh + 1] if want_headers else None,
            hvalue_valid=hv_valid[:nh] if want_headers else None,
            hvalue_data=hv_data[:int(hv_offs[nh])] if want_headers else None,
        ), DECODE_OK, -1
