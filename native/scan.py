"""Walk a buffer of Kafka v2 RecordBatches: the log-recovery scan and the fetch/Spark walker.

:func:`scan_batches` validates each batch header (and, optionally, its CRC32C with the fast
kernel from :mod:`native.crc`) and reports where every batch starts, its offsets, max timestamp,
size and record count, plus where and why the walk stopped. It never raises for bad *data*:
corruption is reported through ``stop_reason``/``stop_position`` so recovery can truncate there.

With ``legacy=True`` it also walks magic 0/1 entries (a topic stored in a pre-0.11 message
format, possibly mixed with v2 batches after a format change): the offset and length fields and
the magic byte sit where a v2 batch has them, so the walk dispatches on byte 16. A legacy entry
is reported as a batch whose last offset is the entry's offset (a compressed wrapper carries the
offset of its last inner message) and whose CRC is the CRC32 stored at byte 12 over magic..end;
its max timestamp is the magic 1 timestamp (-1 for magic 0). A wrapper's first offset is not in
its header (it is inside the compressed value): the scan reports the previous entry's last
offset + 1 (the writer assigns consecutive offsets), or the wrapper's own offset when it is the
first entry walked and no ``expect_offset`` was given; its record count is derived the same way.
"""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple

import numpy as np
from numba import njit

from native.batch_layout import (
    BASE_OFFSET_OFFSET,
    CRC_OFFSET,
    CRC_START,
    CURRENT_MAGIC,
    HEADER_SIZE,
    LAST_OFFSET_DELTA_OFFSET,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    MIN_BATCH_LENGTH,
    RECORDS_COUNT_OFFSET,
)
from native.big_endian import be_i32, be_i64, be_u32
from native.buffers import as_u8, byte_range
from native.cpu import TABLE_FORCED
from native.crc import crc32_raw, crc32c_raw
from native.legacy_layout import (
    ATTRIBUTES_OFFSET as LEGACY_ATTRIBUTES_OFFSET,
)
from native.legacy_layout import (
    CODEC_MASK as LEGACY_CODEC_MASK,
)
from native.legacy_layout import (
    CRC_OFFSET as LEGACY_CRC_OFFSET,
)
from native.legacy_layout import (
    HEADER_SIZE_V0,
    HEADER_SIZE_V1,
    LENGTH_SIZE,
)
from native.legacy_layout import (
    MAGIC_OFFSET as LEGACY_MAGIC_OFFSET,
)
from native.legacy_layout import (
    TIMESTAMP_OFFSET as LEGACY_TIMESTAMP_OFFSET,
)

__all__ = [
    "scan_batches", "ScanResult", "ScanStop", "DEFAULT_MAX_BATCH_SIZE",
    "SCAN_END", "SCAN_PARTIAL", "SCAN_BAD_HEADER", "SCAN_BAD_CRC", "SCAN_OFFSET_BACKWARDS",
    "SCAN_LIMIT",
]

SCAN_END = 0  # clean end of the buffer (or of [start, end))
SCAN_PARTIAL = 1  # a batch header or body runs past `end`
SCAN_BAD_HEADER = 2  # magic != 2 (0/1 with legacy), length out of range, negative offset/delta/count
SCAN_BAD_CRC = 3  # the last reported batch failed its CRC32C
SCAN_OFFSET_BACKWARDS = 4  # baseOffset <= previous lastOffset, or < expect_offset
SCAN_LIMIT = 5  # max_batches reached
_SCAN_FULL = -1  # kernel only: output arrays are full; the wrapper grows them and resumes


class ScanStop(IntEnum):
    """Why :func:`scan_batches` stopped (compares equal to the ``SCAN_*`` ints)."""

    END = SCAN_END
    PARTIAL = SCAN_PARTIAL
    BAD_HEADER = SCAN_BAD_HEADER
    BAD_CRC = SCAN_BAD_CRC
    OFFSET_BACKWARDS = SCAN_OFFSET_BACKWARDS
    LIMIT = SCAN_LIMIT


#: Default upper bound on a batch's total size; a larger batchLength is treated as garbage.
#: Kafka segments default to 1 GiB, so no real batch is bigger.
DEFAULT_MAX_BATCH_SIZE = 1 << 30

_INT64_MIN = -(1 << 63)
# a legacy wrapper's record count is estimated from the offset gap before it (the real one is
# inside the compressed value); a gap left by compaction can pass int32, so it is capped
LEGACY_COUNT_CAP = (1 << 31) - 1
_INT64_MAX = (1 << 63) - 1
# Typed (not a literal) so the kernel calls the same crc32c_raw specialization as the wrappers.
_CRC_INIT = np.int64(0xFFFFFFFF)
# Smallest legacy messageSize per magic: the header after offset+length, and two -1 lengths.
_LEGACY_MIN_LENGTH_V0 = HEADER_SIZE_V0 - LOG_OVERHEAD + 2 * LENGTH_SIZE
_LEGACY_MIN_LENGTH_V1 = HEADER_SIZE_V1 - LOG_OVERHEAD + 2 * LENGTH_SIZE
# The legacy layout shares the v2 framing the walk relies on.
assert LEGACY_MAGIC_OFFSET == MAGIC_OFFSET and LENGTH_OFFSET == 8 and BASE_OFFSET_OFFSET == 0


class ScanResult(NamedTuple):
    """One entry per batch walked, in buffer order (arrays have exactly ``count`` entries)."""

    positions: np.ndarray  # int64: batch start, absolute index into the buffer
    base_offsets: np.ndarray  # int64
    last_offsets: np.ndarray  # int64: baseOffset + lastOffsetDelta
    max_timestamps: np.ndarray  # int64
    sizes: np.ndarray  # int32: total bytes, including the 12-byte offset+length prefix
    record_counts: np.ndarray  # int32
    crc_ok: np.ndarray  # bool: only the last entry can be False (then stop_reason is BAD_CRC)
    count: int
    stop_position: int  # first byte not covered by a valid batch (where to truncate)
    stop_reason: ScanStop


# numba's on-disk cache is keyed by CPU, not by which CRC kernel the global `crc32c_raw` named at
# compile time; so when the table kernel is forced on a CPU that has SSE4.2, compile afresh.
@njit(nogil=True, cache=not TABLE_FORCED)
def _scan_kernel(a, pos, end, verify, limit, prev_last, max_size, n, legacy,
                 positions, base_offsets, last_offsets, max_ts, sizes, counts, crc_ok):
    """Walk batches from ``pos``; append entries at index ``n``. ``legacy``: magic 0/1 entries
    are walked too (``prev_last`` above INT64_MIN is a real offset: a legacy wrapper's first
    offset is then prev_last + 1).

    Returns (n, stop_position, reason, prev_last). ``limit`` is the total entry count allowed
    (-1: no limit). Reason _SCAN_FULL means the arrays are full and the walk can resume.
    """
    cap = positions.shape[0]
    while True:
        if pos == end:
            return n, pos, SCAN_END, prev_last
        if limit >= 0 and n >= limit:
            return n, pos, SCAN_LIMIT, prev_last
        if n >= cap:
            return n, pos, _SCAN_FULL, prev_last
        avail = end - pos
        if avail < LOG_OVERHEAD:
            return n, pos, SCAN_PARTIAL, prev_last
        length = be_i32(a, pos + LENGTH_OFFSET)
        base = be_i64(a, pos + BASE_OFFSET_OFFSET)
        if length > max_size - LOG_OVERHEAD or base < 0:
            return n, pos, SCAN_BAD_HEADER, prev_last
        # CURRENT_MAGIC too when the magic is not in the buffer yet (then the entry is partial)
        magic = a[pos + MAGIC_OFFSET] if avail > MAGIC_OFFSET else CURRENT_MAGIC
        delta = np.int64(0)
        if magic != CURRENT_MAGIC:
            if not legacy or magic > 1:
                return n, pos, SCAN_BAD_HEADER, prev_last
            if length < (_LEGACY_MIN_LENGTH_V1 if magic == 1 else _LEGACY_MIN_LENGTH_V0):
                return n, pos, SCAN_BAD_HEADER, prev_last
        else:
            # the magic is not in the buffer yet: a legacy entry may be as short as magic 0's minimum
            if length < (_LEGACY_MIN_LENGTH_V0 if legacy and avail <= MAGIC_OFFSET else MIN_BATCH_LENGTH):
                return n, pos, SCAN_BAD_HEADER, prev_last
            if avail >= LAST_OFFSET_DELTA_OFFSET + 4:
                delta = be_i32(a, pos + LAST_OFFSET_DELTA_OFFSET)
                if delta < 0 or base > _INT64_MAX - delta:
                    return n, pos, SCAN_BAD_HEADER, prev_last
            if avail >= HEADER_SIZE and be_i32(a, pos + RECORDS_COUNT_OFFSET) < 0:
                return n, pos, SCAN_BAD_HEADER, prev_last
        total = length + LOG_OVERHEAD
        if avail < total:
            return n, pos, SCAN_PARTIAL, prev_last
        if base <= prev_last:
            return n, pos, SCAN_OFFSET_BACKWARDS, prev_last
        ok = True
        if magic == CURRENT_MAGIC:
            first = base
            last = base + delta
            if verify:
                stored = be_u32(a, pos + CRC_OFFSET)
                computed = crc32c_raw(_CRC_INIT, a, pos + CRC_START, pos + total) ^ _CRC_INIT
                ok = np.int64(computed) == stored
            timestamp = be_i64(a, pos + MAX_TIMESTAMP_OFFSET)
            count = be_i32(a, pos + RECORDS_COUNT_OFFSET)
        else:
            # a legacy entry's offset is its last; a wrapper's first follows the last one seen
            first = base
            if a[pos + LEGACY_ATTRIBUTES_OFFSET] & LEGACY_CODEC_MASK != 0 and prev_last > _INT64_MIN:
                first = prev_last + 1
            last = base
            if verify:
                stored = be_u32(a, pos + LEGACY_CRC_OFFSET)
                computed = crc32_raw(_CRC_INIT, a, pos + LEGACY_MAGIC_OFFSET, pos + total) ^ _CRC_INIT
                ok = np.int64(computed) == stored
            timestamp = be_i64(a, pos + LEGACY_TIMESTAMP_OFFSET) if magic == 1 else np.int64(-1)
            count = min(base - first + 1, LEGACY_COUNT_CAP)
        positions[n] = pos
        base_offsets[n] = first
        last_offsets[n] = last
        max_ts[n] = timestamp
        sizes[n] = total
        counts[n] = count
        crc_ok[n] = ok
        n += 1
        if not ok:
            return n, pos, SCAN_BAD_CRC, prev_last
        prev_last = last
        pos += total


def _arrays(cap: int) -> list[np.ndarray]:
    return [
        np.empty(cap, np.int64), np.empty(cap, np.int64), np.empty(cap, np.int64),
        np.empty(cap, np.int64), np.empty(cap, np.int32), np.empty(cap, np.int32),
        np.empty(cap, np.bool_),
    ]


def scan_batches(buf: object, start: int = 0, end: int = -1, verify_crc: bool = True,
                 max_batches: int = -1, expect_offset: int = -1,
                 max_batch_size: int = DEFAULT_MAX_BATCH_SIZE, legacy: bool = False) -> ScanResult:
    """Walk v2 RecordBatches in ``buf[start:end]`` until the first invalid or partial batch.

    ``buf``: bytes, bytearray, memoryview, mmap or contiguous numpy array (not copied).
    ``end == -1``: end of buffer. ``verify_crc``: check each batch's CRC32C (else every
    ``crc_ok`` is True). ``max_batches``: stop after this many (-1: no limit).
    ``expect_offset``: the first batch's baseOffset must be >= this (-1: no constraint);
    every later batch must start after the previous one's last offset.
    ``max_batch_size``: a batch claiming to be larger is a bad header.
    ``legacy``: walk magic 0/1 entries too (see the module docstring); else they are bad headers.

    Positions are absolute indexes into ``buf``. A batch failing its CRC is the last entry, with
    ``crc_ok`` False, ``stop_reason`` BAD_CRC and ``stop_position`` at its start.
    Raises ValueError/TypeError for bad arguments, never for bad data. Thread-safe (no shared
    state); the kernel releases the GIL.
    """
    a = as_u8(buf)
    s, e = byte_range(a.shape[0], start, end)
    if max_batches < -1:
        raise ValueError(f"max_batches must be >= 0 or -1, got {max_batches}")
    if expect_offset < -1:
        raise ValueError(f"expect_offset must be >= 0 or -1, got {expect_offset}")
    if max_batch_size < HEADER_SIZE:
        raise ValueError(f"max_batch_size must be >= {HEADER_SIZE}, got {max_batch_size}")
    max_batch_size = min(int(max_batch_size), _INT64_MAX)
    prev_last = expect_offset - 1 if expect_offset >= 0 else _INT64_MIN
    # Most callers scan batches of several KiB; start there and grow if the guess is short.
    cap = max(16, min((e - s) // 4096, (e - s) // HEADER_SIZE + 1))
    if max_batches >= 0:
        cap = max(1, min(cap, max_batches))
    out = _arrays(cap)
    n, pos = 0, s
    while True:
        n, pos, reason, prev_last = _scan_kernel(
            a, pos, e, bool(verify_crc), int(max_batches), prev_last, max_batch_size, n,
            bool(legacy), *out
        )
        if reason != _SCAN_FULL:
            break
        grown = _arrays(2 * out[0].shape[0])
        for new, old in zip(grown, out, strict=True):
            new[:n] = old
        out = grown
    return ScanResult(*(arr[:n] for arr in out), count=int(n), stop_position=int(pos),
                      stop_reason=ScanStop(reason))
