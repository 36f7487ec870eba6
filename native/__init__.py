"""The hot loops, as numba kernels (nopython, nogil, cache), each with a pure-Python twin.

Public API (stable; other packages import only these names):

- ``crc32c(buf, start=0, end=-1) -> int``: CRC32C (Castagnoli) of ``buf[start:end]``.
- ``crc32(buf, start=0, end=-1) -> int``: CRC32 (zlib's polynomial) of ``buf[start:end]``.
"""

from native.crc import crc32, crc32c

__all__ = ["crc32", "crc32c"]
