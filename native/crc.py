"""CRC32C (Castagnoli) and CRC32 (zlib) numba kernels and their public wrappers.

CRC32C uses the SSE4.2 ``crc32`` instruction when the CPU has it (decided once at import, see
:mod:`native.cpu`): three independent streams over adjacent blocks hide the instruction's
3-cycle latency, and are merged with precomputed "shift over N zero bytes" tables. Otherwise,
and for CRC32, a slice-by-8 table kernel runs.

All kernels take and return the *raw* CRC register (no inversion), so they chain; the public
functions add the standard ``~`` on entry and exit. Kernels are ``nogil``: the wrappers are
thread-safe and release the GIL while computing.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from native.buffers import u8_range
from native.cpu import HAS_SSE42
from native.crc_tables import CRC32_POLY, CRC32C_POLY, shift_table, slice8_table
from native.intrinsics import load_u64_le, sse42_crc32_u8, sse42_crc32_u64

__all__ = [
    "crc32c", "crc32", "crc32c_update", "crc32_update", "crc32c_table",
    "crc32c_raw", "crc32_raw", "CRC32C_IMPL",
]

_MASK32 = np.uint64(0xFFFFFFFF)
_CRC32C_SLICE8 = slice8_table(CRC32C_POLY)
_CRC32_SLICE8 = slice8_table(CRC32_POLY)

# Block sizes of the 3-stream hardware loop (as in Mark Adler's crc32c.c): LONG for big
# buffers, then MEDIUM, then SHORT for what remains; all divisible by 8. MEDIUM is ours: a
# produce batch of ~16 KiB is under 3 x LONG, and in SHORT blocks the merges (two table
# shifts per 768 bytes) took a third of its time. 4 KiB, not 2: on memory not in the cache
# (the recovery scan) three streams of 2 KiB runs read at 9 GB/s against 12 with 4 KiB runs
# or none (perf/README.md, "CRC32C's middle tier"); in cache the two are alike.
_LONG = 8192
_MEDIUM = 4096
_SHORT = 256
_SHIFT_LONG = shift_table(_LONG, CRC32C_POLY)
_SHIFT_MEDIUM = shift_table(_MEDIUM, CRC32C_POLY)
_SHIFT_SHORT = shift_table(_SHORT, CRC32C_POLY)


@njit(nogil=True, cache=True)
def _slice8_raw(state, a, start, end, table):
    """Raw CRC register after feeding a[start:end]; reflected polynomial given by ``table``."""
    c = np.uint64(state) & _MASK32
    i = start
    t0 = table[0]
    t1 = table[1]
    t2 = table[2]
    t3 = table[3]
    t4 = table[4]
    t5 = table[5]
    t6 = table[6]
    t7 = table[7]
    while end - i >= 8:
        w = load_u64_le(a, i) ^ c
        c = np.uint64(
            t7[w & 0xFF] ^ t6[(w >> np.uint64(8)) & 0xFF]
            ^ t5[(w >> np.uint64(16)) & 0xFF] ^ t4[(w >> np.uint64(24)) & 0xFF]
            ^ t3[(w >> np.uint64(32)) & 0xFF] ^ t2[(w >> np.uint64(40)) & 0xFF]
            ^ t1[(w >> np.uint64(48)) & 0xFF] ^ t0[w >> np.uint64(56)]
        )
        i += 8
    while i < end:
        c = (c >> np.uint64(8)) ^ np.uint64(t0[(c ^ np.uint64(a[i])) & 0xFF])
        i += 1
    return c


@njit(nogil=True, cache=True)
def _crc32c_raw_table(state, a, start, end):
    return _slice8_raw(state, a, start, end, _CRC32C_SLICE8)


@njit(nogil=True, cache=True)
def _crc32_raw_table(state, a, start, end):
    return _slice8_raw(state, a, start, end, _CRC32_SLICE8)


@njit(nogil=True, cache=True, inline="always")
def _shift(t, s):
    """Advance raw state ``s`` over the fixed number of zero bytes ``t`` was built for."""
    return np.uint64(
        t[0, s & 0xFF] ^ t[1, (s >> np.uint64(8)) & 0xFF]
        ^ t[2, (s >> np.uint64(16)) & 0xFF] ^ t[3, (s >> np.uint64(24)) & 0xFF]
    )


@njit(nogil=True, cache=True)
def _crc32c_raw_sse42(state, a, start, end):
    """Raw CRC32C register after feeding a[start:end], with the SSE4.2 instruction."""
    c0 = np.uint64(state) & _MASK32
    i = start
    while end - i >= 3 * _LONG:
        c1 = np.uint64(0)
        c2 = np.uint64(0)
        stop = i + _LONG
        while i < stop:
            c0 = sse42_crc32_u64(c0, load_u64_le(a, i))
            c1 = sse42_crc32_u64(c1, load_u64_le(a, i + _LONG))
            c2 = sse42_crc32_u64(c2, load_u64_le(a, i + 2 * _LONG))
            i += 8
        c0 = _shift(_SHIFT_LONG, c0) ^ c1
        c0 = _shift(_SHIFT_LONG, c0) ^ c2
        i += 2 * _LONG
    while end - i >= 3 * _MEDIUM:
        c1 = np.uint64(0)
        c2 = np.uint64(0)
        stop = i + _MEDIUM
        while i < stop:
            c0 = sse42_crc32_u64(c0, load_u64_le(a, i))
            c1 = sse42_crc32_u64(c1, load_u64_le(a, i + _MEDIUM))
            c2 = sse42_crc32_u64(c2, load_u64_le(a, i + 2 * _MEDIUM))
            i += 8
        c0 = _shift(_SHIFT_MEDIUM, c0) ^ c1
        c0 = _shift(_SHIFT_MEDIUM, c0) ^ c2
        i += 2 * _MEDIUM
    while end - i >= 3 * _SHORT:
        c1 = np.uint64(0)
        c2 = np.uint64(0)
        stop = i + _SHORT
        while i < stop:
            c0 = sse42_crc32_u64(c0, load_u64_le(a, i))
            c1 = sse42_crc32_u64(c1, load_u64_le(a, i + _SHORT))
            c2 = sse42_crc32_u64(c2, load_u64_le(a, i + 2 * _SHORT))
            i += 8
        c0 = _shift(_SHIFT_SHORT, c0) ^ c1
        c0 = _shift(_SHIFT_SHORT, c0) ^ c2
        i += 2 * _SHORT
    while end - i >= 8:
        c0 = sse42_crc32_u64(c0, load_u64_le(a, i))
        i += 8
    while i < end:
        c0 = sse42_crc32_u8(c0, a[i])
        i += 1
    return c0


#: The CRC32C raw-state kernel other kernels call (``crc32c_raw(state, a, start, end)``).
crc32c_raw = _crc32c_raw_sse42 if HAS_SSE42 else _crc32c_raw_table
#: The CRC32 (zlib) raw-state kernel other kernels call (``crc32_raw(state, a, start, end)``).
crc32_raw = _crc32_raw_table
#: Which CRC32C kernel is in use: "sse4.2" or "table".
CRC32C_IMPL: str = "sse4.2" if HAS_SSE42 else "table"


def crc32c_update(crc: int, buf: object, start: int = 0, end: int = -1) -> int:
    """Continue CRC32C ``crc`` (a previous result, 0 to begin) over ``buf[start:end]``.

    ``end == -1`` means the end of ``buf``. ``buf``: bytes, bytearray, memoryview, mmap or a
    contiguous numpy array, read without copying. Raises TypeError for other buffer types and
    ValueError for a bad range or a ``crc`` outside 0..2**32-1. Thread-safe; releases the GIL.
    """
    a, s, e = u8_range(buf, start, end)
    if not 0 <= crc <= 0xFFFFFFFF:
        raise ValueError(f"crc must be an unsigned 32-bit value, got {crc}")
    return crc32c_raw(crc ^ 0xFFFFFFFF, a, s, e) ^ 0xFFFFFFFF


def crc32c(buf: object, start: int = 0, end: int = -1) -> int:
    """CRC32C (Castagnoli) of ``buf[start:end]`` as an unsigned 32-bit int.

    Same arguments and errors as :func:`crc32c_update`.
    """
    a, s, e = u8_range(buf, start, end)
    return crc32c_raw(0xFFFFFFFF, a, s, e) ^ 0xFFFFFFFF


def crc32_update(crc: int, buf: object, start: int = 0, end: int = -1) -> int:
    """Continue zlib's CRC32 ``crc`` over ``buf[start:end]`` (like ``zlib.crc32(data, crc)``).

    Same arguments and errors as :func:`crc32c_update`.
    """
    a, s, e = u8_range(buf, start, end)
    if not 0 <= crc <= 0xFFFFFFFF:
        raise ValueError(f"crc must be an unsigned 32-bit value, got {crc}")
    return _crc32_raw_table(crc ^ 0xFFFFFFFF, a, s, e) ^ 0xFFFFFFFF


def crc32(buf: object, start: int = 0, end: int = -1) -> int:
    """zlib's CRC32 of ``buf[start:end]`` as an unsigned 32-bit int (equals ``zlib.crc32``).

    Same arguments and errors as :func:`crc32c_update`.
    """
    a, s, e = u8_range(buf, start, end)
    return _crc32_raw_table(0xFFFFFFFF, a, s, e) ^ 0xFFFFFFFF


def crc32c_table(buf: object, start: int = 0, end: int = -1) -> int:
    """CRC32C with the portable slice-by-8 kernel, whatever the CPU (tests and benchmarks)."""
    a, s, e = u8_range(buf, start, end)
    return (_crc32c_raw_table(0xFFFFFFFF, a, s, e)) ^ 0xFFFFFFFF
