"""numba helpers: big-endian (network order) integers in a uint8 array, as Kafka lays them out.

Every kernel that reads or writes a log entry's header fields uses these, so there is one
definition of the byte order. All work in int64 (numba's natural width, no unsigned 64-bit
arithmetic); they are ``inline="always"`` so a kernel compiles them as if written in place.
No bounds checks: the caller has checked the range.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["be_i16", "be_u32", "be_i32", "be_i64", "put_be_u32", "put_be_i64"]


@njit(nogil=True, cache=True, inline="always")
def be_i16(a, p):
    """The signed 16-bit integer at a[p:p + 2], as an int64."""
    v = (np.int64(a[p]) << 8) | np.int64(a[p + 1])
    return v - 65536 if v >= 32768 else v


@njit(nogil=True, cache=True, inline="always")
def be_u32(a, p):
    """The unsigned 32-bit integer at a[p:p + 4], as an int64."""
    return ((np.int64(a[p]) << 24) | (np.int64(a[p + 1]) << 16) | (np.int64(a[p + 2]) << 8)
            | np.int64(a[p + 3]))


@njit(nogil=True, cache=True, inline="always")
def be_i32(a, p):
    """The signed 32-bit integer at a[p:p + 4], as an int64."""
    v = be_u32(a, p)
    return v - (np.int64(1) << 32) if v >= (np.int64(1) << 31) else v


@njit(nogil=True, cache=True, inline="always")
def be_i64(a, p):
    """The signed 64-bit integer at a[p:p + 8]."""
    hi = be_u32(a, p)
    # Two's complement from the high word's sign.
    if hi >= (np.int64(1) << 31):
        hi -= np.int64(1) << 32
    return (hi << 32) | be_u32(a, p + 4)


@njit(nogil=True, cache=True, inline="always")
def put_be_u32(out, q, v):
    """Write the low 32 bits of ``v`` at out[q:q + 4]."""
    out[q] = (v >> 24) & 0xFF
    out[q + 1] = (v >> 16) & 0xFF
    out[q + 2] = (v >> 8) & 0xFF
    out[q + 3] = v & 0xFF


@njit(nogil=True, cache=True, inline="always")
def put_be_i64(out, q, v):
    """Write ``v`` (two's complement) at out[q:q + 8]."""
    put_be_u32(out, q, (v >> 32) & 0xFFFFFFFF)
    put_be_u32(out, q + 4, v & 0xFFFFFFFF)
