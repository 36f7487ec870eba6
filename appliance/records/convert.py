"""Conversion between legacy message sets (magic 0/1) and RecordBatch v2 (magic 2).

Up-conversion keeps keys, values, timestamps (magic 0 has none: -1) and the codec of each
compressed wrapper; down-conversion keeps offsets, keys, values, timestamps (magic 1) and codecs
but DROPS record headers, which v0/v1 cannot carry, and skips control batches (transaction
markers), which have no v0/v1 form — as Kafka's own down-conversion does. Stateless, thread-safe.
"""

from __future__ import annotations

from appliance.errors import CorruptRecordError, InvalidRecordError, UnsupportedCompressionTypeError
from appliance.records.batch import build_batch, decode_batch, iter_batches
from appliance.records.batch_layout import MAGIC_OFFSET
from appliance.records.compression import DEFAULT_MAX_DECOMPRESSED
from appliance.records.legacy import build_message_set, iter_entries
from appliance.records.record_types import Compression, Record, TimestampType

__all__ = ["records_magic", "legacy_to_v2", "v2_to_legacy"]

_MAGIC_POS = MAGIC_OFFSET  # same byte in all three formats (after offset, length and crc/leaderEpoch)


def records_magic(buf) -> int:
    """The magic byte of the first entry in ``buf``; CorruptRecordError if it is too short."""
    if len(buf) <= _MAGIC_POS:
        raise CorruptRecordError(f"{len(buf)} bytes are too few to hold a record entry")
    return buf[_MAGIC_POS]


def legacy_to_v2(message_set, *, base_offset: int = 0, keep_offsets: bool = False,
                 max_decompressed: int = DEFAULT_MAX_DECOMPRESSED) -> bytes:
    """Convert a magic 0/1 message set to consecutive v2 batches.

    Each compressed wrapper becomes one batch with the same codec; each run of uncompressed
    messages with the same timestamp type becomes one uncompressed batch. Offsets are renumbered
    base_offset, base_offset+1, ... (what a broker does with produced data) unless
    ``keep_offsets``, which keeps the offsets the set carries. Raises what
    :func:`appliance.records.legacy.iter_entries` raises, InvalidRecordError for an empty set or
    (with keep_offsets) offsets that do not increase.
    """
    groups: list[tuple[Compression, TimestampType, list]] = []
    for entry in iter_entries(message_set, max_decompressed=max_decompressed):
        # A LogAppendTime v2 batch has one timestamp for all its records, so such messages only
        # share a batch when their timestamps agree.
        if (entry.compression == Compression.NONE and groups
                and groups[-1][0] == Compression.NONE and groups[-1][1] == entry.timestamp_type
                and (entry.timestamp_type == TimestampType.CREATE_TIME
                     or groups[-1][2][-1].timestamp == entry.messages[0].timestamp)):
            groups[-1][2].extend(entry.messages)
        else:
            groups.append((entry.compression, entry.timestamp_type, list(entry.messages)))
    if not groups:
        raise InvalidRecordError("the message set is empty")
    out = bytearray()
    next_offset = base_offset
    for codec, ts_type, msgs in groups:
        if keep_offsets:
            offsets = [m.offset for m in msgs]
        else:
            offsets = list(range(next_offset, next_offset + len(msgs)))
            next_offset += len(msgs)
        records = [Record(o, m.timestamp, m.key, m.value) for o, m in zip(offsets, msgs, strict=True)]
        log_append = ts_type == TimestampType.LOG_APPEND_TIME
        try:
            out += build_batch(
                records, base_offset=offsets[0], compression=codec, timestamp_type=ts_type,
                base_timestamp=msgs[0].timestamp if log_append else None)
        except ValueError as e:
            raise InvalidRecordError(f"cannot convert to v2: {e}") from None
    return bytes(out)


def v2_to_legacy(batches, *, magic: int, allow_partial: bool = False,
                 max_decompressed: int = DEFAULT_MAX_DECOMPRESSED) -> bytes:
    """Convert v2 batches to a magic ``magic`` (0 or 1) message set with the same offsets.

    A compressed batch becomes one wrapper with the same codec; headers are dropped and control
    batches skipped (see the module doc); magic 0 loses timestamps. Raises
    UnsupportedCompressionTypeError for a ZSTD batch (v0/v1 have no ZSTD), ValueError for a
    magic other than 0/1, and what :func:`appliance.records.batch.decode_batch` raises. With
    ``allow_partial`` a truncated last batch (a fetch's byte limit cut it) is left out.
    """
    if magic not in (0, 1):
        raise ValueError(f"legacy magic must be 0 or 1, not {magic}")
    out = bytearray()
    for pos, h in iter_batches(batches, allow_partial=allow_partial):
        if h.is_control:
            continue
        codec = h.compression
        if codec == Compression.ZSTD:
            raise UnsupportedCompressionTypeError(
                f"batch at byte {pos} is ZSTD-compressed, which magic {magic} cannot carry")
        _, records = decode_batch(batches, pos, max_decompressed=max_decompressed)
        if not records:
            continue
        stripped = [Record(r.offset, r.timestamp, r.key, r.value) for r in records]
        out += build_message_set(stripped, magic=magic, compression=codec,
                                 timestamp_type=h.timestamp_type)
    return bytes(out)
