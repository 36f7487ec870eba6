"""CRC polynomials and the lookup tables the kernels use, computed once at import.

All CRCs here are *reflected* (LSB-first), as CRC32C and zlib's CRC32 are. "Raw state" means the
register value without the initial/final inversion; the public functions apply ``~`` on entry
and exit, so raw-state kernels chain: ``raw(raw(s, A), B) == raw(s, A + B)``.

- slice-by-8 tables (8 x 256 uint32) for the portable kernels;
- "shift" tables (4 x 256 uint32) that advance a raw state over N zero bytes in 4 lookups,
  used to combine independently computed CRC streams: raw(s, A + B) == shift(s, len(B)) ^ raw(0, B).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "CRC32C_POLY", "CRC32_POLY", "slice8_table", "multmodp", "x8nmodp", "shift_table",
]

CRC32C_POLY = 0x82F63B78  # Castagnoli, reflected
CRC32_POLY = 0xEDB88320  # IEEE 802.3 / zlib, reflected


def slice8_table(poly: int) -> np.ndarray:
    """(8, 256) uint32: row 0 is the classic byte table; row k advances row k-1 by one more byte."""
    t = np.zeros((8, 256), dtype=np.uint32)
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        t[0, n] = c
    for k in range(1, 8):
        for n in range(256):
            prev = int(t[k - 1, n])
            t[k, n] = (prev >> 8) ^ int(t[0, prev & 0xFF])
    return t


def multmodp(a: int, b: int, poly: int) -> int:
    """a(x) * b(x) mod p(x) in the reflected representation (bit 31 is x^0)."""
    m = 1 << 31
    p = 0
    while m:
        if a & m:
            p ^= b
        m >>= 1
        b = (b >> 1) ^ poly if b & 1 else b >> 1
    return p


def x8nmodp(n: int, poly: int) -> int:
    """x^(8n) mod p(x): the operator that advances a raw state over ``n`` zero bytes."""
    p = 1 << 31  # x^0
    x2k = 1 << 30  # x^(2^0) = x^1
    e = 8 * n
    while e:
        if e & 1:
            p = multmodp(x2k, p, poly)
        x2k = multmodp(x2k, x2k, poly)
        e >>= 1
    return p


def shift_table(n_bytes: int, poly: int) -> np.ndarray:
    """(4, 256) uint32 so that, for a raw state s, advancing it over ``n_bytes`` zero bytes is
    ``t[0][s & 0xff] ^ t[1][(s >> 8) & 0xff] ^ t[2][(s >> 16) & 0xff] ^ t[3][s >> 24]``."""
    op = x8nmodp(n_bytes, poly)
    # The operator is linear: tabulate it on single bits, then XOR-combine per byte value.
    cols = [multmodp(op, 1 << b, poly) for b in range(32)]
    t = np.zeros((4, 256), dtype=np.uint32)
    for j in range(4):
        for v in range(1, 256):
            low = (v & -v).bit_length() - 1
            t[j, v] = int(t[j, v & (v - 1)]) ^ cols[8 * j + low]
    return t
