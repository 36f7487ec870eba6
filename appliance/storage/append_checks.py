"""Checks on the batches of one append that the record validation does not make.

:func:`headers_unvalidated` reads the batch headers when the caller skips full validation
(``validate=False``: batches from our own IPC hand-off, already validated once): magic and
lengths only. :func:`require_keys` enforces Kafka's rule for compacted topics. Headers are
:class:`~appliance.records.batch.BatchHeader` tuples (what ``validate_records`` returns), read
by field name.

Thread-safety: stateless functions.
"""

from __future__ import annotations

from appliance.errors import CorruptRecordError, InvalidRecordError
from appliance.records.batch import BatchHeader, decode_batch
from native.batch_layout import (
    CONTROL_FLAG_MASK,
    CURRENT_MAGIC,
    HEADER_SIZE,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
)

__all__ = ["headers_unvalidated", "require_keys"]

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
