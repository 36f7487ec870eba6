"""XXH32, needed only to repair the LZ4 frame header checksum written by Kafka 0.8-0.10.

The inputs are a few header bytes, so a pure-Python hash is fast enough and avoids a dependency.
"""

from __future__ import annotations

__all__ = ["xxh32"]

_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M


def _round(acc: int, lane: int) -> int:
    return (_rotl((acc + lane * _P2) & _M, 13) * _P1) & _M


def xxh32(data: bytes | bytearray | memoryview, seed: int = 0) -> int:
    """The 32-bit xxHash of ``data`` (thread-safe, pure)."""
    b = bytes(data)
    n = len(b)
    p = 0
    if n >= 16:
        v1 = (seed + _P1 + _P2) & _M
        v2 = (seed + _P2) & _M
        v3 = seed & _M
        v4 = (seed - _P1) & _M
        while p + 16 <= n:
            v1 = _round(v1, int.from_bytes(b[p:p + 4], "little"))
            v2 = _round(v2, int.from_bytes(b[p + 4:p + 8], "little"))
            v3 = _round(v3, int.from_bytes(b[p + 8:p + 12], "little"))
            v4 = _round(v4, int.from_bytes(b[p + 12:p + 16], "little"))
            p += 16
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M
    else:
        h = (seed + _P5) & _M
    h = (h + n) & _M
    while p + 4 <= n:
        h = (_rotl((h + int.from_bytes(b[p:p + 4], "little") * _P3) & _M, 17) * _P4) & _M
        p += 4
    while p < n:
        h = (_rotl((h + b[p] * _P5) & _M, 11) * _P1) & _M
        p += 1
    h ^= h >> 15
    h = (h * _P2) & _M
    h ^= h >> 13
    h = (h * _P3) & _M
    h ^= h >> 16
    return h
