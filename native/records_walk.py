"""Walk the records of an uncompressed (or decompressed) v2 batch: the produce path's hot loop.

Checks that ``count`` records exactly fill ``buf[start:end]``: every record's length varint
matches its fields, offsetDeltas strictly increase, key/value/header lengths are sane, no
trailing bytes. Returns a status and never raises, so the caller decides what to say; its twin
is :func:`appliance.records.batch._walk_records`, which raises with a precise message and is
what the caller runs (only) when this kernel reports a problem.

Measured reason it exists: the Python walk costs ~1 µs per record, which capped a disk worker at
about 1 M records/s before anything else; this kernel walks ~100 M records/s.

A record's attributes, timestampDelta, offsetDelta and key length are read from one 8-byte load
when their three varints end inside it (the common case: small deltas, short or null keys):
the ends are the first three clear high bits after the attributes byte. Measured for a batch of
8,000 records of 100 bytes (thread CPU, medians; perf/bench_record_walk.py): byte by byte, as
the other fields still are,
the walk took 13.3 ns per record, and a validated append 37; with the word, 7.3 and 31 (a plain
write of the same bytes: 20). Reading the record's length from the same word as well gained 5 %
more, not kept. Anything else takes the byte-by-byte path, so the statuses are the same.
"""

from __future__ import annotations

import numba as nb
import numpy as np
from numba.cpython.unsafe.numbers import trailing_zeros

from native.buffers import as_u8
from native.intrinsics import load_u64_le
from native.varint import read_uvarint as _uvarint
from native.varint import unzigzag as _zz

__all__ = ["walk_records", "WALK_OK", "WALK_STATUS"]

WALK_OK = 0
WALK_STATUS = {
    0: "ok",
    1: "fewer records than recordsCount",
    2: "a record has an impossible length",
    3: "offsetDelta does not increase",
    4: "a negative key length",
    5: "a negative value length",
    6: "a negative header count",
    7: "a header with a null or negative key",
    8: "a header value length below -1",
    9: "a record's fields do not add up to its length",
    10: "a varint or field runs past the end",
    11: "trailing bytes after the records",
}


_TERM = np.uint64(0x8080808080808000)  # the high bits of bytes 1-7: a clear one ends a varint
_LOW7 = np.uint64(0x7F)
_ONE = np.uint64(1)
_EIGHT = np.uint64(8)


@nb.njit(nogil=True, cache=True, inline="always")
def _group(w, first, last):
    """The base-128 value of the varint in bytes ``first``..``last`` of the little-endian word
    ``w`` (at most 5 bytes: no overflow)."""
    v = np.uint64(0)
    x = w >> np.uint64(8 * first)
    for k in range(last - first + 1):
        v |= (x & _LOW7) << np.uint64(7 * k)
        x >>= _EIGHT
    return np.int64(v)


@nb.njit(nogil=True, cache=True)
def _walk(buf, p, end, count):
    size = len(buf)  # the word load may read past ``end``, never past the buffer
    prev = -1
    for i in range(count):
        if p >= end:
            return 1, i, prev
        u, p = _uvarint(buf, p, end, 5)
        if p < 0:
            return 10, i, prev
        length = _zz(u)
        rec_end = p + length
        if length < 6 or rec_end > end:
            return 2, i, prev
        word = False
        if p + 8 <= size:
            w = load_u64_le(buf, p)
            t1 = ~w & _TERM
            t2 = t1 & (t1 - _ONE)
            t3 = t2 & (t2 - _ONE)
            if t3 != 0:
                e1 = np.int64(trailing_zeros(t1)) >> 3
                e2 = np.int64(trailing_zeros(t2)) >> 3
                e3 = np.int64(trailing_zeros(t3)) >> 3
                # all three in the record (each is at most 5 bytes: 3 ends in bytes 1-7)
                if p + e3 < rec_end:
                    od = _zz(_group(w, e1 + 1, e2))
                    if od <= prev:
                        return 3, i, prev
                    prev = od
                    u = _group(w, e2 + 1, e3)
                    p += e3 + 1
                    word = True
        if not word:
            p += 1  # attributes
            u, p = _uvarint(buf, p, rec_end, 10)  # timestampDelta
            if p < 0:
                return 10, i, prev
            u, p = _uvarint(buf, p, rec_end, 5)  # offsetDelta
            if p < 0:
                return 10, i, prev
            od = _zz(u)
            if od <= prev:
                return 3, i, prev
            prev = od
            u, p = _uvarint(buf, p, rec_end, 5)  # key length
            if p < 0:
                return 10, i, prev
        if u > 1:
            if u & 1:
                return 4, i, prev
            p += u >> 1
        if p > rec_end:
            return 10, i, prev
        u, p = _uvarint(buf, p, rec_end, 5)  # value length
        if p < 0:
            return 10, i, prev
        if u > 1:
            if u & 1:
                return 5, i, prev
            p += u >> 1
        if p > rec_end:
            return 10, i, prev
        u, p = _uvarint(buf, p, rec_end, 5)  # header count
        if p < 0:
            return 10, i, prev
        if u & 1:
            return 6, i, prev
        for _ in range(u >> 1):
            u, p = _uvarint(buf, p, rec_end, 5)
            if p < 0:
                return 10, i, prev
            if u & 1:
                return 7, i, prev
            p += u >> 1
            u, p = _uvarint(buf, p, rec_end, 5)
            if p < 0:
                return 10, i, prev
            if u > 1:
                if u & 1:
                    return 8, i, prev
                p += u >> 1
            if p > rec_end:
                return 10, i, prev
        if p != rec_end:
            return 9, i, prev
    if p != end:
        return 11, count, prev
    return 0, count, prev


def walk_records(buf, start: int, end: int, count: int) -> tuple[int, int, int]:
    """(status, index of the offending record, last offsetDelta seen). status 0 = all good."""
    arr = as_u8(buf)
    if not 0 <= start <= end <= arr.shape[0] or count < 0:
        raise ValueError(f"bad walk range {start}..{end} of {arr.shape[0]} bytes, count {count}")
    status, index, last = _walk(arr, start, end, count)
    return int(status), int(index), int(last)
