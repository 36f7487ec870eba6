"""Zigzag varints for the numba kernels: the one compiled twin of :mod:`appliance.records.varint`.

Kafka's RecordBatch v2 writes lengths and deltas as protobuf-style base-128 groups of the
zigzag value. The kernels that walk or build records inline these (``inline="always"``), so
there is one definition here instead of a copy per kernel. Nothing raises: a truncated or
overlong encoding is reported as position -1 and the caller decides what to say. The tests
compare every function with the Python module, which is the reference.
"""

from __future__ import annotations

import numba as nb
import numpy as np

__all__ = ["read_uvarint", "read_length", "unzigzag", "zigzag", "write_varint", "varint_size",
           "MAX_BYTES_32", "MAX_BYTES_64"]

# longest legal encodings: ceil(32/7) and ceil(64/7) bytes
MAX_BYTES_32 = 5
MAX_BYTES_64 = 10
# unsigned constants: numba turns uint64-with-int64 arithmetic into float64
_HIGH = np.uint64(0x80)
_LOW7 = np.uint64(0x7F)
_SEVEN = np.uint64(7)
_ONE = np.uint64(1)


@nb.njit(nogil=True, cache=True, inline="always")
def read_uvarint(buf, p, end, max_bytes):
    """(raw base-128 value, new position) of the varint at buf[p:end]; position -1 when it is
    truncated (runs past ``end``) or longer than ``max_bytes``. The value is an int64, so a
    10-byte varlong's top bit wraps exactly as the zigzag of int64 needs."""
    result = np.int64(0)
    shift = 0
    for _ in range(max_bytes):
        if p >= end:
            return np.int64(0), -1
        b = np.int64(buf[p])
        p += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, p
        shift += 7
    return np.int64(0), -1


@nb.njit(nogil=True, cache=True, inline="always")
def unzigzag(u):
    """The signed value of a raw zigzag value (read_uvarint's int64, taken as unsigned so the
    shift is logical: the zigzag of int64 max/min fills all 64 bits)."""
    w = np.uint64(u)
    return np.int64(w >> _ONE) ^ -np.int64(w & _ONE)


@nb.njit(nogil=True, cache=True, inline="always")
def read_length(buf, p, end):
    """A record's zigzag varint length (key, value): (n, position after it), n from -1 (null)
    to the bytes left before ``end``; (0, -1) when the varint or the length is bad."""
    u, p = read_uvarint(buf, p, end, 5)
    if p < 0 or u > 0xFFFFFFFF:
        return 0, -1
    n = unzigzag(u)
    if n < -1 or n > end - p:
        return 0, -1
    return n, p


@nb.njit(nogil=True, cache=True, inline="always")
def zigzag(v):
    """The raw zigzag value of a signed int64, as an unsigned 64-bit number."""
    s = np.int64(v)
    return np.uint64(s << 1) ^ np.uint64(s >> 63)


@nb.njit(nogil=True, cache=True, inline="always")
def write_varint(out, p, v):
    """Write the zigzag varint of ``v`` (any int64) at out[p]; returns the position after it.
    The caller has sized ``out`` (see varint_size)."""
    u = zigzag(v)
    while u >= _HIGH:
        out[p] = (u & _LOW7) | _HIGH
        u >>= _SEVEN
        p += 1
    out[p] = u
    return p + 1


@nb.njit(nogil=True, cache=True, inline="always")
def varint_size(v):
    """Bytes the zigzag varint of ``v`` takes (1-10)."""
    u = zigzag(v)
    n = 1
    while u >= _HIGH:
        u >>= _SEVEN
        n += 1
    return n
