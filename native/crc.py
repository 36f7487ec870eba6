"""PLACEHOLDER until the numba kernels land: same signatures, backed by crc32c and zlib."""

import zlib

import crc32c as _crc32c_pkg


def _view(buf, start, end):
    mv = memoryview(buf).cast("B")
    return mv[start:(len(mv) if end < 0 else end)]


def crc32c(buf, start: int = 0, end: int = -1) -> int:
    return _crc32c_pkg.crc32c(_view(buf, start, end))


def crc32(buf, start: int = 0, end: int = -1) -> int:
    return zlib.crc32(_view(buf, start, end)) & 0xFFFFFFFF
