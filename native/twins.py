"""Pure-Python twins of the numba kernels: slow, straightforward, written for reading.

Tests check every kernel against its twin; the twins share no code with the kernels beyond the
declared layouts, the result type and the buffer/range argument handling.
"""

from __future__ import annotations

import struct

import numpy as np

from native.batch_layout import CRC_START, CURRENT_MAGIC, HEADER_STRUCT, LOG_OVERHEAD
from native.buffers import as_u8, byte_range
from native.crc_tables import CRC32_POLY, CRC32C_POLY
from native.index_layout import OFFSET_INDEX_ENTRY, TIME_INDEX_ENTRY
from native.legacy_layout import HEADER_V0, HEADER_V1
from native.scan import (
    DEFAULT_MAX_BATCH_SIZE,
    LEGACY_COUNT_CAP,
    SCAN_BAD_CRC,
    SCAN_BAD_HEADER,
    SCAN_END,
    SCAN_LIMIT,
    SCAN_OFFSET_BACKWARDS,
    SCAN_PARTIAL,
    ScanResult,
    ScanStop,
)

__all__ = [
    "crc32c_twin", "crc32_twin", "scan_batches_twin", "offset_index_floor_twin",
    "time_index_floor_twin",
]


def _byte_table(poly: int) -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        table.append(c)
    return table


_CRC32C_TABLE = _byte_table(CRC32C_POLY)
_CRC32_TABLE = _byte_table(CRC32_POLY)


def _crc(table: list[int], data: bytes) -> int:
    c = 0xFFFFFFFF
    for byte in data:
        c = (c >> 8) ^ table[(c ^ byte) & 0xFF]
    return c ^ 0xFFFFFFFF


def _bytes(buf: object, start: int, end: int) -> bytes:
    a = as_u8(buf)
    s, e = byte_range(a.shape[0], start, end)
    return a[s:e].tobytes()


def crc32c_twin(buf: object, start: int = 0, end: int = -1) -> int:
    """CRC32C of buf[start:end], one byte at a time."""
    return _crc(_CRC32C_TABLE, _bytes(buf, start, end))


def crc32_twin(buf: object, start: int = 0, end: int = -1) -> int:
    """zlib CRC32 of buf[start:end], one byte at a time."""
    return _crc(_CRC32_TABLE, _bytes(buf, start, end))


def scan_batches_twin(buf: object, start: int = 0, end: int = -1, verify_crc: bool = True,
                      max_batches: int = -1, expect_offset: int = -1,
                      max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
                      legacy: bool = False) -> ScanResult:
    """Same contract as :func:`native.scan.scan_batches`, with struct and a Python loop."""
    a = as_u8(buf)
    s, e = byte_range(a.shape[0], start, end)
    data = a.tobytes()
    rows: list[tuple[int, int, int, int, int, int, bool]] = []
    prev_last = expect_offset - 1 if expect_offset >= 0 else None
    pos = s

    def done(reason: int) -> ScanResult:
        cols = list(zip(*rows, strict=True)) or [()] * 7
        dtypes = (np.int64, np.int64, np.int64, np.int64, np.int32, np.int32, np.bool_)
        arrays = [np.array(c, dtype=d) for c, d in zip(cols, dtypes, strict=True)]
        stop = rows[-1][0] if reason == SCAN_BAD_CRC else pos
        return ScanResult(*arrays, count=len(rows), stop_position=stop, stop_reason=ScanStop(reason))

    while True:
        if pos == e:
            return done(SCAN_END)
        if max_batches >= 0 and len(rows) >= max_batches:
            return done(SCAN_LIMIT)
        avail = e - pos
        if avail < LOG_OVERHEAD:
            return done(SCAN_PARTIAL)
        base, length = struct.unpack_from(">qi", data, pos)
        if length + LOG_OVERHEAD > max_batch_size or base < 0:
            return done(SCAN_BAD_HEADER)
        is_legacy = legacy and avail > 16 and data[pos + 16] in (0, 1)
        delta = 0
        if is_legacy:
            magic = data[pos + 16]
            layout = HEADER_V1 if magic else HEADER_V0
            if length < layout.size - LOG_OVERHEAD + 8:
                return done(SCAN_BAD_HEADER)
        else:
            least = 14 if legacy and avail <= 16 else HEADER_STRUCT.size - LOG_OVERHEAD
            if length < least:
                return done(SCAN_BAD_HEADER)
            # Check each header field that is inside the buffer, even when the batch is partial.
            header = data[pos:pos + min(avail, HEADER_STRUCT.size)]
            if len(header) > 16 and header[16] != CURRENT_MAGIC:
                return done(SCAN_BAD_HEADER)
            if len(header) >= 27:
                (delta,) = struct.unpack_from(">i", header, 23)
                if delta < 0 or base + delta >= 1 << 63:
                    return done(SCAN_BAD_HEADER)
            if len(header) == HEADER_STRUCT.size:
                fields = HEADER_STRUCT.unpack(header)
                if fields[-1] < 0:
                    return done(SCAN_BAD_HEADER)
        total = LOG_OVERHEAD + length
        if avail < total:
            return done(SCAN_PARTIAL)
        if prev_last is not None and base <= prev_last:
            return done(SCAN_OFFSET_BACKWARDS)
        if is_legacy:
            # a magic 0/1 entry: offset = its last offset; a wrapper's first follows the last seen
            fields = layout.unpack_from(data, pos)
            first, last = base, base
            if fields[4] & 7 and prev_last is not None:
                first = prev_last + 1
            max_ts = fields[5] if magic else -1
            count = min(base - first + 1, LEGACY_COUNT_CAP)
            ok = not verify_crc or crc32_twin(data, pos + 16, pos + total) == fields[2]
        else:
            (_, _, _, _, stored_crc, _, _, _, max_ts, _, _, _, count) = fields
            first, last = base, base + delta
            ok = not verify_crc or crc32c_twin(data, pos + CRC_START, pos + total) == stored_crc
        rows.append((pos, first, last, max_ts, total, count, ok))
        if not ok:
            return done(SCAN_BAD_CRC)
        prev_last = last
        pos += total


def _keys(buf: object, n_entries: int, entry: struct.Struct) -> list[int]:
    data = as_u8(buf).tobytes()
    if n_entries < 0 or n_entries * entry.size > len(data):
        raise ValueError("n_entries does not fit the buffer")
    return [entry.unpack_from(data, i * entry.size)[0] for i in range(n_entries)]


def offset_index_floor_twin(buf: object, n_entries: int, target_relative: int) -> int:
    """Linear scan: the last slot whose key <= target, or -1."""
    result = -1
    for slot, key in enumerate(_keys(buf, n_entries, OFFSET_INDEX_ENTRY)):
        if key <= target_relative:
            result = slot
    return result


def time_index_floor_twin(buf: object, n_entries: int, target_ts: int) -> int:
    """Linear scan: the first slot holding the largest key <= target, or -1."""
    keys = _keys(buf, n_entries, TIME_INDEX_ENTRY)
    floor_keys = [k for k in keys if k <= target_ts]
    return keys.index(max(floor_keys)) if floor_keys else -1

