"""The hot loops, as numba kernels (nopython, nogil, cache), each with a pure-Python twin.

Public API (stable; other packages import these names):

- ``crc32c(buf, start=0, end=-1) -> int``: CRC32C (Castagnoli) of ``buf[start:end]``
  (SSE4.2 instruction when available, else slice-by-8 tables).
- ``crc32c_update(crc, buf, start=0, end=-1) -> int``: continue a CRC32C.
- ``crc32(buf, start=0, end=-1) -> int``: CRC32 (zlib's polynomial) of ``buf[start:end]``.
- ``crc32_update(crc, buf, start=0, end=-1) -> int``: continue a CRC32.
- ``scan_batches(buf, start=0, end=-1, verify_crc=True, max_batches=-1, expect_offset=-1)``
  -> ``ScanResult``: walk v2 RecordBatches (see :mod:`native.scan`).
- ``offset_index_floor(buf, n_entries, target_relative) -> int`` and
  ``time_index_floor(buf, n_entries, target_ts) -> int`` (see :mod:`native.index_search`).

Layouts: :mod:`native.batch_layout` (RecordBatch v2 header), :mod:`native.index_layout`.
Buffers may be bytes, bytearray, memoryview, mmap.mmap or numpy arrays; none are copied.
"""

from native.cache_dir import use_versioned_cache

use_versioned_cache()  # before any kernel module: see native/cache_dir.py

from native.crc import crc32, crc32_update, crc32c, crc32c_update  # noqa: E402
from native.index_search import offset_index_floor, time_index_floor  # noqa: E402
from native.scan import (  # noqa: E402
    SCAN_BAD_CRC,
    SCAN_BAD_HEADER,
    SCAN_END,
    SCAN_LIMIT,
    SCAN_OFFSET_BACKWARDS,
    SCAN_PARTIAL,
    ScanResult,
    ScanStop,
    scan_batches,
)

__all__ = [
    "crc32", "crc32_update", "crc32c", "crc32c_update",
    "offset_index_floor", "time_index_floor",
    "scan_batches", "ScanResult", "ScanStop",
    "SCAN_END", "SCAN_PARTIAL", "SCAN_BAD_HEADER", "SCAN_BAD_CRC", "SCAN_OFFSET_BACKWARDS",
    "SCAN_LIMIT",
]
