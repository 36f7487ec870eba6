"""Validate a Produce request's uncompressed v2 batches in one kernel call: the append path's
per-batch checks (header sanity, CRC32C, the record walk, contiguous offsets) fused.

Measured reason it exists (perf/bench_storage.py, 16 KiB batches of 1 KiB records): checked
one batch at a time from Python, validation took ~40 us per batch, most of it call overhead
around kernels that do ~1 us of work; it held a validated append at 26-30 % of a plain write.

The kernel never raises and knows no error messages: on anything it does not accept as plainly
valid (a bad CRC, a compressed batch, a short buffer, ...) it reports "not plain" and the
caller runs :func:`appliance.records.batch.validate_records`, its twin, which accepts
compressed batches and raises the precise error for bad ones.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from native.batch_layout import (
    ATTRIBUTES_OFFSET,
    BASE_OFFSET_OFFSET,
    BASE_SEQUENCE_OFFSET,
    BASE_TIMESTAMP_OFFSET,
    COMPRESSION_CODEC_MASK,
    CRC_OFFSET,
    CRC_START,
    CURRENT_MAGIC,
    HEADER_FIELDS,
    HEADER_SIZE,
    LAST_OFFSET_DELTA_OFFSET,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    MIN_BATCH_LENGTH,
    PARTITION_LEADER_EPOCH_OFFSET,
    PRODUCER_EPOCH_OFFSET,
    PRODUCER_ID_OFFSET,
    RECORDS_COUNT_OFFSET,
)
from native.big_endian import be_i16, be_i32, be_i64, be_u32
from native.buffers import as_u8
from native.cpu import TABLE_FORCED
from native.crc import crc32c_raw
from native.records_walk import _walk

__all__ = ["validate_plain_batches"]

_FIELDS = len(HEADER_FIELDS)  # a row per batch: the header fields in HEADER_FIELDS order
_CRC_INIT = np.int64(0xFFFFFFFF)
_SMALLEST_BATCH = HEADER_SIZE + 7  # a header and one record of the fewest bytes


@njit(nogil=True, cache=not TABLE_FORCED)
def _validate_kernel(a, n, max_batch, out):
    """Rows of ``out`` for the batches of a[0:n]; returns how many, or -1 if not plain."""
    pos = 0
    nb = 0
    prev_last = np.int64(-1)
    while pos < n:
        if n - pos < HEADER_SIZE or a[pos + MAGIC_OFFSET] != CURRENT_MAGIC:
            return -1
        length = be_i32(a, pos + LENGTH_OFFSET)
        size = length + LOG_OVERHEAD
        if length < MIN_BATCH_LENGTH or size > n - pos or size > max_batch:
            return -1
        attributes = be_i16(a, pos + ATTRIBUTES_OFFSET)
        if attributes & COMPRESSION_CODEC_MASK:
            return -1
        stored = be_u32(a, pos + CRC_OFFSET)
        if np.int64(crc32c_raw(_CRC_INIT, a, pos + CRC_START, pos + size) ^ _CRC_INIT) != stored:
            return -1
        base = be_i64(a, pos + BASE_OFFSET_OFFSET)
        delta = be_i32(a, pos + LAST_OFFSET_DELTA_OFFSET)
        count = be_i32(a, pos + RECORDS_COUNT_OFFSET)
        if count <= 0 or delta != count - 1 or base <= prev_last:
            return -1
        status, _, last = _walk(a, pos + HEADER_SIZE, pos + size, count)
        if status != 0 or last != delta:
            return -1
        row = out[nb]
        row[0] = base
        row[1] = length
        row[2] = be_i32(a, pos + PARTITION_LEADER_EPOCH_OFFSET)
        row[3] = CURRENT_MAGIC
        row[4] = stored
        row[5] = attributes
        row[6] = delta
        row[7] = be_i64(a, pos + BASE_TIMESTAMP_OFFSET)
        row[8] = be_i64(a, pos + MAX_TIMESTAMP_OFFSET)
        row[9] = be_i64(a, pos + PRODUCER_ID_OFFSET)
        row[10] = be_i16(a, pos + PRODUCER_EPOCH_OFFSET)
        row[11] = be_i32(a, pos + BASE_SEQUENCE_OFFSET)
        row[12] = count
        nb += 1
        prev_last = base + delta
        pos += size
    return nb


def validate_plain_batches(buf: object, max_batch_bytes: int) -> list[tuple[int, ...]] | None:
    """Header tuples (HEADER_FIELDS order) of the batches in ``buf`` when every one is an
    uncompressed v2 batch that :func:`appliance.records.batch.validate_records` would accept
    (with ``max_batch_bytes``); else None, and the caller validates the slow way."""
    a = as_u8(buf)
    n = a.shape[0]
    if n == 0:
        return None
    out = np.empty((n // _SMALLEST_BATCH + 1, _FIELDS), np.int64)
    nb = _validate_kernel(a, n, max_batch_bytes, out)
    if nb < 0:
        return None
    return out[:nb].tolist()
