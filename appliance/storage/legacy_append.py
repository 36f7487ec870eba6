"""Produce to a topic stored in a pre-0.11 message format: v2 batches in, magic 0/1 entries out.

A topic whose ``message.format.version`` is older than 0.11 (0.8.0 ... 0.10.2) stores Kafka's
legacy message sets, as a Kafka 0.10-2.x broker does (its LogValidator converts every produce to
the topic's magic). The request's batches arrive as v2 (produce v0-2 message sets were already
converted by the network worker, IPC producers write v2); each becomes:

The numba down-converter of old fetches (:mod:`appliance.records.down_convert`) does the work,
on a copy of the batches with their offsets (and LogAppendTime) set, refusing records with
headers; a ``compression.type`` other than the batch's codec is rebuilt record by record.

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

import struct
from typing import Any, NamedTuple

from appliance.errors import (
    CorruptRecordError,
    InvalidTimestampError,
    MessageTooLargeError,
    UnsupportedCompressionTypeError,
    UnsupportedForMessageFormatError,
)
from appliance.records.batch import decode_batch, set_log_append_time
from appliance.records.down_convert import down_convert_batches
from appliance.records.legacy import build_message_set
from appliance.records.record_types import Compression, Record, TimestampType
from native.batch_layout import LOG_OVERHEAD
from native.scan import scan_batches

__all__ = ["LegacyAppend", "to_legacy_entries", "target_codec"]

_I64 = struct.Struct(">q")  # a v2 batch's baseOffset
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
    magic ``magic`` entries, the first batch's records from ``first_offset`` on (each batch's
    offset deltas kept, as the v2 path assigns them).

    ``log_append_time``: the LogAppendTime to stamp (None: CreateTime). Raises
    UnsupportedForMessageFormatError (headers, producer ids, control batches),
    UnsupportedCompressionTypeError (ZSTD), InvalidTimestampError (a magic 1 CreateTime batch
    whose base or max timestamp is outside ``timestamp_diff_max`` of ``now_ms``, the v2 path's
    check), MessageTooLargeError (an entry over ``max_message_bytes``), and what
    :func:`decode_batch` raises.
    """
    bases = []
    nxt = first_offset
    count = 0
    recompress = False
    for h in heads:
        if h.producer_id >= 0 or h.is_transactional or h.is_control:
            raise UnsupportedForMessageFormatError(
                f"idempotent or transactional batches cannot be stored in magic {magic}")
        if magic == 1 and log_append_time is None:
            for ts in (h.base_timestamp, h.max_timestamp):
                if ts >= 0 and abs(ts - now_ms) > timestamp_diff_max:
                    raise InvalidTimestampError(
                        f"timestamp {ts} is more than {timestamp_diff_max} ms from broker time {now_ms}")
        recompress |= target_codec(compression_type, h.compression) != h.compression
        bases.append(nxt)
        nxt += h.last_offset_delta + 1
        count += h.records_count
    data = None
    if not recompress:
        data = _with_kernel(mv, heads, bases, magic, log_append_time)
    if data is None:  # a codec change, or headers (the Python path names the error)
        data = _in_python(mv, heads, bases, magic, compression_type, log_append_time)
    r = scan_batches(data, 0, len(data), verify_crc=False, legacy=True)
    if r.count and int(r.sizes.max()) > max_message_bytes:
        raise MessageTooLargeError(f"message of {int(r.sizes.max())} bytes is over "
                                   f"max.message.bytes {max_message_bytes}")
    max_ts = int(r.max_timestamps.max()) if r.count else -1
    return LegacyAppend(data, nxt - 1, max_ts, count)


def _with_kernel(mv: memoryview, heads: list[Any], bases: list[int], magic: int,
                 log_append_time: int | None) -> bytes | None:
    """The numba down-converter's output for the batches with their offsets and LogAppendTime
    set (a copy is rewritten, the request stays as it came); None if a record has headers."""
    buf = bytearray(mv)
    pos = 0
    for h, base in zip(heads, bases, strict=True):
        _I64.pack_into(buf, pos, base)
        if log_append_time is not None:
            set_log_append_time(buf, pos, log_append_time)
        pos += h.batch_length + LOG_OVERHEAD
    try:
        return down_convert_batches(buf, magic=magic, refuse_headers=True)
    except CorruptRecordError:
        return None


def _in_python(mv: memoryview, heads: list[Any], bases: list[int], magic: int,
               compression_type: str, log_append_time: int | None) -> bytes:
    """The same entries built record by record (a topic codec other than the batch's), raising
    UnsupportedForMessageFormatError for headers."""
    out = bytearray()
    ts_type = TimestampType.CREATE_TIME if log_append_time is None else TimestampType.LOG_APPEND_TIME
    pos = 0
    for h, base in zip(heads, bases, strict=True):
        _, records = decode_batch(mv, pos)
        pos += h.batch_length + LOG_OVERHEAD
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
            ts = -1 if magic == 0 else (r.timestamp if log_append_time is None else log_append_time)
            stored.append(Record(base + r.offset - h.base_offset, ts, r.key, r.value))
        if codec == Compression.NONE:
            for rec in stored:
                out += build_message_set([rec], magic=magic, timestamp_type=ts_type)
        else:
            out += build_message_set(stored, magic=magic, compression=codec, timestamp_type=ts_type)
    return bytes(out)
