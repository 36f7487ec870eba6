"""Produce to a topic stored in a pre-0.11 message format: v2 batches in, magic 0/1 entries out.

A topic whose ``message.format.version`` is older than 0.11 (0.8.0 ... 0.10.2) stores Kafka's
legacy message sets, as a Kafka 0.10-2.x broker does (its LogValidator converts every produce to
the topic's magic). The request's batches arrive as v2 (produce v0-2 message sets were already
converted by the network worker, IPC producers write v2); each becomes:

- uncompressed: one message per record;
- compressed: one wrapper per batch, holding its records, with the codec of the topic's
  ``compression.type`` (``producer``: the batch's own). Magic 1 inner offsets are relative
  (0..n-1) and the wrapper carries the last absolute offset; magic 0 inner offsets are absolute
  (:func:`appliance.records.legacy.build_message_set` writes both);
- timestamps: magic 1 keeps each record's CreateTime, or with ``message.timestamp.type`` =
  LogAppendTime takes the broker's time with the LogAppendTime attribute (wrapper and inner
  messages); magic 0 has none.

Refused, as Kafka refuses them, with nothing written: records with headers, and batches of an
idempotent or transactional producer (UNSUPPORTED_FOR_MESSAGE_FORMAT); ZSTD, which magic 0/1
cannot carry (UNSUPPORTED_COMPRESSION_TYPE). Stateless, thread-safe.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from appliance.errors import (
    InvalidTimestampError,
    MessageTooLargeError,
    UnsupportedCompressionTypeError,
    UnsupportedForMessageFormatError,
)
from appliance.records.batch import decode_batch
from appliance.records.legacy import build_message_set
from appliance.records.record_types import Compression, Record, TimestampType

__all__ = ["LegacyAppend", "to_legacy_entries", "target_codec"]

# compression.type names (the topic key's values) -> the codec entries are written with
_TOPIC_CODECS = {"uncompressed": Compression.NONE, "gzip": Compression.GZIP,
                 "snappy": Compression.SNAPPY, "lz4": Compression.LZ4, "zstd": Compression.ZSTD}


class LegacyAppend(NamedTuple):
    """The converted entries and what the append reports."""

    data: bytes
    last_offset: int
    max_timestamp: int
    num_records: int


def target_codec(compression_type: str, batch_codec: Compression) -> Compression:
    """The codec a batch is stored with: the topic's ``compression.type``, or the batch's own
    when that is ``producer``."""
    return _TOPIC_CODECS.get(str(compression_type), batch_codec)


def to_legacy_entries(mv: memoryview, heads: list[Any], *, magic: int, first_offset: int,
                      compression_type: str, log_append_time: int | None, now_ms: int,
                      timestamp_diff_max: int, max_message_bytes: int) -> LegacyAppend:
    """Convert the validated v2 batches of ``mv`` (``heads``: their BatchHeaders, in order) to
    magic ``magic`` entries with offsets ``first_offset``, ``first_offset + 1``, ...

    ``log_append_time``: the LogAppendTime to stamp (None: CreateTime). Raises
    UnsupportedForMessageFormatError (headers, producer ids, control batches),
    UnsupportedCompressionTypeError (ZSTD), InvalidTimestampError (a magic 1 CreateTime outside
    ``timestamp_diff_max`` of ``now_ms``), MessageTooLargeError (an entry over
    ``max_message_bytes``), and what :func:`decode_batch` raises.
    """
    out = bytearray()
    nxt = first_offset
    max_ts = -1
    count = 0
    ts_type = TimestampType.CREATE_TIME if log_append_time is None else TimestampType.LOG_APPEND_TIME
    pos = 0
    for h in heads:
        size = h.batch_length + 12
        if h.producer_id >= 0 or h.is_transactional or h.is_control:
            raise UnsupportedForMessageFormatError(
                f"idempotent or transactional batches cannot be stored in magic {magic}")
        _, records = decode_batch(mv, pos)
        pos += size
        if not records:
            continue
        codec = target_codec(compression_type, h.compression)
        if codec == Compression.ZSTD:
            raise UnsupportedCompressionTypeError(f"ZSTD cannot be stored in magic {magic}")
        stored = []
        for r in records:
            if r.headers:
                raise UnsupportedForMessageFormatError(
                    f"record headers cannot be stored in magic {magic}")
            if magic == 0:
                ts = -1
            elif log_append_time is not None:
                ts = log_append_time
            else:
                ts = r.timestamp
                if ts >= 0 and abs(ts - now_ms) > timestamp_diff_max:
                    raise InvalidTimestampError(
                        f"timestamp {ts} is more than {timestamp_diff_max} ms from broker time {now_ms}")
            stored.append(Record(nxt, ts, r.key, r.value))
            nxt += 1
            max_ts = max(max_ts, ts)
        count += len(stored)
        if codec == Compression.NONE:
            for rec in stored:
                entry = build_message_set([rec], magic=magic, timestamp_type=ts_type)
                _check_size(entry, max_message_bytes)
                out += entry
        else:
            entry = build_message_set(stored, magic=magic, compression=codec,
                                      timestamp_type=ts_type)
            _check_size(entry, max_message_bytes)
            out += entry
    return LegacyAppend(bytes(out), nxt - 1, max_ts, count)


def _check_size(entry: bytes, limit: int) -> None:
    if len(entry) > limit:
        raise MessageTooLargeError(f"message of {len(entry)} bytes is over max.message.bytes {limit}")
