"""Plan a PartitionLog append in one kernel call: validation, limits, offset assignment, the
idempotent-batch scan and the index rule, for every batch of a Produce request's records.

Measured reason it exists (perf/bench_storage.py, 16 KiB batches of 1 KiB records, one batch
per call): the append spent ~20 us of Python around a ~13 us write(): the fused validation
kernel's wrapper (header tuples, BatchHeader objects), then a per-batch Python pass for limits,
offsets and producer checks, then a per-batch pass for the index. Here all of it is one call
returning int64 columns. The append path calls it inside native.append_commit's kernel, which
goes on to write the batches and their index entries in the same call.

The kernel never raises, never writes the buffer, and knows no error messages: on anything it
does not accept as plainly valid (a bad CRC, a compressed batch, a timestamp out of range, an
offset going backwards, ...) it returns :data:`PLAN_SLOW` and the caller runs its general path,
which raises the precise error (or accepts, e.g. compressed batches). Its twin is
:func:`native.twins.plan_append_twin`.

``params`` (int64, :data:`PARAMS_LEN`) carries the inputs ``P_*`` and receives the outputs
``O_*``; ``rows`` (int64, a row per batch, columns ``R_*``) receives the per-batch columns.
"""

from __future__ import annotations

import struct

import numpy as np
from numba import njit

from native.batch_layout import (
    ATTRIBUTES_OFFSET,
    BASE_OFFSET_OFFSET,
    BASE_SEQUENCE_OFFSET,
    BASE_TIMESTAMP_OFFSET,
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
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
    PRODUCER_EPOCH_OFFSET,
    PRODUCER_ID_OFFSET,
    RECORDS_COUNT_OFFSET,
    TRANSACTIONAL_FLAG_MASK,
)
from native.big_endian import be_i16, be_i32, be_i64, be_u32
from native.buffers import as_u8
from native.cpu import TABLE_FORCED
from native.crc import crc32c_raw
from native.records_walk import _walk

__all__ = [
    "plan_append", "write_base_offsets", "new_params", "new_rows", "PLAN_SLOW", "PLAN_MORE_ROWS",
    "PARAMS_LEN", "ROW_FIELDS", "NO_LIMIT", "PARAMS_IN", "PARAMS_IN_AT", "PARAMS_OUT",
    "PARAMS_OUT_AT", "ROW",
    "P_MAX_BATCH", "P_VALIDATE", "P_ASSIGN", "P_NEXT_OFFSET", "P_NOW", "P_TS_DIFF_MAX",
    "P_INDEX_SINCE", "P_INDEX_INTERVAL", "P_SEG_MAX_TS", "P_SEG_OFFSET_OF_MAX",
    "O_LAST_OFFSET", "O_MAX_TS", "O_RECORDS", "O_NEED_OFFSETS", "O_IDEMPOTENT",
    "O_INDEX_SINCE", "O_SEG_MAX_TS", "O_SEG_OFFSET_OF_MAX", "O_INDEX_ENTRIES", "O_FIRST_OFFSET",
    "plan_append_u8",
    "R_POS", "R_SIZE", "R_BASE", "R_LAST", "R_MAX_TS", "R_COUNT", "R_PRODUCER_ID",
    "R_PRODUCER_EPOCH", "R_BASE_SEQUENCE", "R_DELTA", "R_INDEXED", "R_RUN_MAX_TS",
    "R_RUN_OFFSET_OF_MAX",
]

#: plan_append's result when the general (Python) path must decide.
PLAN_SLOW = -1
#: plan_append's result when ``rows`` has fewer rows than there are batches.
PLAN_MORE_ROWS = -2
#: "no limit" for P_TS_DIFF_MAX and P_MAX_BATCH.
NO_LIMIT = 2**63 - 1

# params: inputs
P_MAX_BATCH = 0  # max.message.bytes: a larger batch takes the general path (which raises)
P_VALIDATE = 1  # 1: CRC, record walk, uncompressed, counts; 0: magic and lengths only
P_ASSIGN = 2  # 1: assign offsets from P_NEXT_OFFSET; 0: keep them (must not go below it)
P_NEXT_OFFSET = 3  # the log end offset
P_NOW = 4  # broker time, ms
P_TS_DIFF_MAX = 5  # message.timestamp.difference.max.ms (NO_LIMIT: unchecked)
P_INDEX_SINCE = 6  # bytes appended to the active segment since its last index entry
P_INDEX_INTERVAL = 7  # index.interval.bytes
P_SEG_MAX_TS = 8  # the active segment's max timestamp so far
P_SEG_OFFSET_OF_MAX = 9  # and the offset it first appeared at
# params: outputs
O_LAST_OFFSET = 16
O_MAX_TS = 17  # max of the batches' max timestamps
O_RECORDS = 18
O_NEED_OFFSETS = 19  # 1 when some batch's baseOffset must be rewritten
O_IDEMPOTENT = 20  # 1 when some batch has a producer id and sequence
O_INDEX_SINCE = 21
O_SEG_MAX_TS = 22
O_SEG_OFFSET_OF_MAX = 23
O_INDEX_ENTRIES = 24  # batches with R_INDEXED set
O_FIRST_OFFSET = 25  # the first batch's (assigned) base offset
PARAMS_LEN = 32

# rows: a row per batch
R_POS = 0  # byte position in the buffer
R_SIZE = 1
R_BASE = 2  # the (assigned) base offset
R_LAST = 3  # the (assigned) last offset
R_MAX_TS = 4
R_COUNT = 5
R_PRODUCER_ID = 6
R_PRODUCER_EPOCH = 7
R_BASE_SEQUENCE = 8
R_DELTA = 9  # lastOffsetDelta
R_INDEXED = 10  # 1: this batch gets an index entry (Kafka's index.interval.bytes rule)
R_RUN_MAX_TS = 11  # the segment's running max timestamp after this batch
R_RUN_OFFSET_OF_MAX = 12  # and the offset where it first appeared
ROW_FIELDS = 13

#: struct views of the same layouts, for the caller's Python side: packing 9 inputs into the
#: params array costs ~0.5 us this way against ~2 us through numpy item assignment.
PARAMS_IN = struct.Struct("=9q")  # P_VALIDATE .. P_SEG_OFFSET_OF_MAX, at byte 8
PARAMS_IN_AT = P_VALIDATE * 8
PARAMS_OUT = struct.Struct("=10q")  # O_LAST_OFFSET .. O_FIRST_OFFSET
PARAMS_OUT_AT = O_LAST_OFFSET * 8
ROW = struct.Struct(f"={ROW_FIELDS}q")

_CRC_INIT = np.int64(0xFFFFFFFF)
_TXN_BITS = TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK


@njit(nogil=True, cache=not TABLE_FORCED)
def _plan_kernel(a, n, params, rows):
    """Fill ``rows`` and the outputs of ``params``; returns the batch count, PLAN_SLOW or
    PLAN_MORE_ROWS. The checks for validate=1 are native.validate's; for 0, append_checks'
    headers_unvalidated. Then PartitionLog.append's per-batch limits, in its order."""
    if n == 0:
        return PLAN_SLOW
    max_batch = params[P_MAX_BATCH]
    validate = params[P_VALIDATE] != 0
    assign = params[P_ASSIGN] != 0
    nxt = params[P_NEXT_OFFSET]
    now = params[P_NOW]
    diff_max = params[P_TS_DIFF_MAX]
    since = params[P_INDEX_SINCE]
    interval = params[P_INDEX_INTERVAL]
    seg_max = params[P_SEG_MAX_TS]
    seg_off = params[P_SEG_OFFSET_OF_MAX]
    cap = rows.shape[0]
    pos = 0
    nb = 0
    prev_last = np.int64(-1)
    records = np.int64(0)
    need_offsets = 0
    idempotent = 0
    max_ts = np.int64(-1)
    entries = 0
    while pos < n:
        if n - pos < HEADER_SIZE or a[pos + MAGIC_OFFSET] != CURRENT_MAGIC:
            return PLAN_SLOW
        length = be_i32(a, pos + LENGTH_OFFSET)
        size = length + LOG_OVERHEAD
        if length < MIN_BATCH_LENGTH or size > n - pos or size > max_batch:
            return PLAN_SLOW
        base_in = be_i64(a, pos + BASE_OFFSET_OFFSET)
        delta = be_i32(a, pos + LAST_OFFSET_DELTA_OFFSET)
        count = be_i32(a, pos + RECORDS_COUNT_OFFSET)
        if be_i16(a, pos + ATTRIBUTES_OFFSET) & _TXN_BITS:
            return PLAN_SLOW  # transactions and their markers: the general path keeps their state
        if validate:
            if be_i16(a, pos + ATTRIBUTES_OFFSET) & COMPRESSION_CODEC_MASK:
                return PLAN_SLOW
            stored = be_u32(a, pos + CRC_OFFSET)
            if np.int64(crc32c_raw(_CRC_INIT, a, pos + CRC_START, pos + size) ^ _CRC_INIT) != stored:
                return PLAN_SLOW
            if count <= 0 or delta != count - 1 or base_in <= prev_last:
                return PLAN_SLOW
            status, _, last = _walk(a, pos + HEADER_SIZE, pos + size, count)
            if status != 0 or last != delta:
                return PLAN_SLOW
            prev_last = base_in + delta
        base_ts = be_i64(a, pos + BASE_TIMESTAMP_OFFSET)
        batch_max_ts = be_i64(a, pos + MAX_TIMESTAMP_OFFSET)
        if diff_max != NO_LIMIT:
            if base_ts >= 0 and abs(base_ts - now) > diff_max:
                return PLAN_SLOW
            if batch_max_ts >= 0 and abs(batch_max_ts - now) > diff_max:
                return PLAN_SLOW
        if assign:
            base = nxt
        else:
            base = base_in
            if base < nxt:
                return PLAN_SLOW
        if base != base_in:
            need_offsets = 1
        if nb >= cap:
            return PLAN_MORE_ROWS
        pid = be_i64(a, pos + PRODUCER_ID_OFFSET)
        seq = be_i32(a, pos + BASE_SEQUENCE_OFFSET)
        if pid >= 0 and seq >= 0:
            idempotent = 1
        last_offset = base + delta
        row = rows[nb]
        row[R_POS] = pos
        row[R_SIZE] = size
        row[R_BASE] = base
        row[R_LAST] = last_offset
        row[R_MAX_TS] = batch_max_ts
        row[R_COUNT] = count
        row[R_PRODUCER_ID] = pid
        row[R_PRODUCER_EPOCH] = be_i16(a, pos + PRODUCER_EPOCH_OFFSET)
        row[R_BASE_SEQUENCE] = seq
        row[R_DELTA] = delta
        # the index rule (storage.index.index_entry_slots) and the running max timestamp
        # (LogSegment._index_batches), batch by batch
        if since > interval:
            row[R_INDEXED] = 1
            entries += 1
            since = 0
        else:
            row[R_INDEXED] = 0
        since += size
        if batch_max_ts > seg_max:
            seg_max = batch_max_ts
            seg_off = last_offset
        row[R_RUN_MAX_TS] = seg_max
        row[R_RUN_OFFSET_OF_MAX] = seg_off
        if batch_max_ts > max_ts:
            max_ts = batch_max_ts
        records += count
        nxt = last_offset + 1
        nb += 1
        pos += size
    params[O_LAST_OFFSET] = nxt - 1
    params[O_MAX_TS] = max_ts
    params[O_RECORDS] = records
    params[O_NEED_OFFSETS] = need_offsets
    params[O_IDEMPOTENT] = idempotent
    params[O_INDEX_SINCE] = since
    params[O_SEG_MAX_TS] = seg_max
    params[O_SEG_OFFSET_OF_MAX] = seg_off
    params[O_INDEX_ENTRIES] = entries
    params[O_FIRST_OFFSET] = rows[0, R_BASE]
    return nb


@njit(nogil=True, cache=True)
def _write_bases_kernel(a, rows, nb):
    for i in range(nb):
        p = rows[i, R_POS]
        v = rows[i, R_BASE]
        for k in range(8):
            a[p + BASE_OFFSET_OFFSET + k] = (v >> (56 - 8 * k)) & 0xFF


def new_params() -> np.ndarray:
    """A params array for :func:`plan_append` (reuse it: one per log)."""
    return np.zeros(PARAMS_LEN, np.int64)


def new_rows(capacity: int = 16) -> np.ndarray:
    """A rows array for :func:`plan_append`; grow it when PLAN_MORE_ROWS comes back."""
    return np.empty((capacity, ROW_FIELDS), np.int64)


def plan_append(buf: object, params: np.ndarray, rows: np.ndarray) -> int:
    """Plan the append of the v2 batches in ``buf`` (see the module docstring); returns the
    batch count (rows[:count] filled, outputs set in params), PLAN_SLOW or PLAN_MORE_ROWS."""
    a = as_u8(buf)
    return _plan_kernel(a, a.shape[0], params, rows)


#: :func:`plan_append` for a caller that already has the 1-D uint8 array: (array, its length,
#: params, rows). The append path calls it directly (the wrapper is ~0.5 us of a ~10 us call).
plan_append_u8 = _plan_kernel


def write_base_offsets(buf: object, rows: np.ndarray, nb: int) -> None:
    """Write rows[:nb]'s R_BASE into the baseOffset of each batch of the writable ``buf``
    (outside the CRC, so the batches stay valid)."""
    _write_bases_kernel(as_u8(buf), rows, nb)
