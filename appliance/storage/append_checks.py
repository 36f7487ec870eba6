"""Checks on the batches of one append that the record validation does not make.

:func:`headers_unvalidated` reads the batch headers when the caller skips full validation
(``validate=False``: batches from our own IPC hand-off, already validated once): magic and
lengths only. :func:`require_keys` enforces Kafka's rule for compacted topics. Headers are
:class:`~appliance.records.batch.BatchHeader` tuples (what ``validate_records`` returns), read
by field name.

Thread-safety: stateless functions.
"""

from __future__ import annotations

from appliance.errors import CorruptRecordError, InvalidRecordError, KafkaError
from appliance.records.batch import BatchHeader, decode_batch, validate_records
from native import append_plan as P
from native.batch_layout import (
    CONTROL_FLAG_MASK,
    CURRENT_MAGIC,
    HEADER_SIZE,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    TRANSACTIONAL_FLAG_MASK,
)

__all__ = ["headers_unvalidated", "require_keys", "plan_append_twin"]

_unpack_header = HEADER_STRUCT.unpack_from
_make_header = BatchHeader._make


def headers_unvalidated(mv: memoryview) -> list[BatchHeader]:
    """Headers of the batches in ``mv`` checking only magic and lengths. Raises
    InvalidRecordError (empty) and CorruptRecordError."""
    n = len(mv)
    if n == 0:
        raise InvalidRecordError("the records field is empty")
    out = []
    pos = 0
    while pos < n:
        if pos + HEADER_SIZE > n:
            raise CorruptRecordError(f"batch header at byte {pos} is truncated")
        h = _make_header(_unpack_header(mv, pos))
        if h.magic != CURRENT_MAGIC:
            raise CorruptRecordError(
                f"batch at byte {pos} has magic {h.magic}, expected {CURRENT_MAGIC}")
        length = h.batch_length
        size = length + LOG_OVERHEAD
        if length < MIN_BATCH_LENGTH or pos + size > n:
            raise CorruptRecordError(f"batch at byte {pos}: batchLength {length} does not fit")
        out.append(h)
        pos += size
    return out


def require_keys(mv: memoryview, heads: list[BatchHeader]) -> None:
    """Kafka refuses keyless records in a compacted topic (the cleaner could not dedupe them).
    Control batches carry their own keys and are exempt. Raises InvalidRecordError."""
    pos = 0
    for h in heads:
        if not h.attributes & CONTROL_FLAG_MASK:
            for rec in decode_batch(mv, pos)[1]:
                if rec.key is None:
                    raise InvalidRecordError("Compacted topic cannot accept message without key")
        pos += h.batch_length + LOG_OVERHEAD


def plan_append_twin(buf: object, params: list[int]) -> tuple[int, list[tuple[int, ...]], tuple[int, ...]]:
    """The pure-Python twin of :func:`native.append_plan.plan_append`, for the tests: the same
    params (a list, inputs at the P_* slots), returning (batch count or PLAN_SLOW, the rows,
    the outputs O_LAST_OFFSET..O_FIRST_OFFSET). Built from the general path's checks:
    validate_records / headers_unvalidated, then PartitionLog.append's per-batch limits."""
    mv = memoryview(buf).cast("B")
    try:
        heads = (validate_records(mv, max_batch_bytes=params[P.P_MAX_BATCH]) if params[P.P_VALIDATE]
                 else headers_unvalidated(mv))
    except KafkaError:
        return P.PLAN_SLOW, [], ()
    if params[P.P_VALIDATE] and any(h.attributes & 7 for h in heads):
        return P.PLAN_SLOW, [], ()  # compressed: valid, but the general path's to take
    if any(h.attributes & (TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK) for h in heads):
        return P.PLAN_SLOW, [], ()  # transactional or control: the general path's to take
    nxt, now, diff = params[P.P_NEXT_OFFSET], params[P.P_NOW], params[P.P_TS_DIFF_MAX]
    since, interval = params[P.P_INDEX_SINCE], params[P.P_INDEX_INTERVAL]
    seg_max, seg_off = params[P.P_SEG_MAX_TS], params[P.P_SEG_OFFSET_OF_MAX]
    rows, pos, max_ts, records, need, idem, entries = [], 0, -1, 0, 0, 0, 0
    for h in heads:
        size = h.batch_length + LOG_OVERHEAD
        if size > params[P.P_MAX_BATCH]:
            return P.PLAN_SLOW, [], ()
        if diff != P.NO_LIMIT and any(t >= 0 and abs(t - now) > diff
                                      for t in (h.base_timestamp, h.max_timestamp)):
            return P.PLAN_SLOW, [], ()
        base = nxt if params[P.P_ASSIGN] else h.base_offset
        if base < nxt:
            return P.PLAN_SLOW, [], ()
        need |= base != h.base_offset
        idem |= h.producer_id >= 0 and h.base_sequence >= 0
        last = base + h.last_offset_delta
        indexed = since > interval
        if indexed:
            entries += 1
            since = 0
        since += size
        if h.max_timestamp > seg_max:
            seg_max, seg_off = h.max_timestamp, last
        rows.append((pos, size, base, last, h.max_timestamp, h.records_count, h.producer_id,
                     h.producer_epoch, h.base_sequence, h.last_offset_delta, int(indexed),
                     seg_max, seg_off))
        max_ts = max(max_ts, h.max_timestamp)
        records += h.records_count
        nxt = last + 1
        pos += size
    return len(rows), rows, (nxt - 1, max_ts, records, int(need), int(idem), since, seg_max,
                             seg_off, entries, rows[0][2])
