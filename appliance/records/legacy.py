"""Legacy message sets: magic 0 (Kafka 0.8-0.9) and magic 1 (0.10) messages.

Each entry: ``offset int64, messageSize int32, crc uint32 (CRC32 over magic..end), magic int8,
attributes int8 (bits 0-2 codec: none/gzip/snappy/lz4; bit 3 LogAppendTime, magic 1 only),
[timestamp int64, magic 1 only], key bytes (int32 length, -1 null), value bytes (same)``.

A compressed entry is a wrapper whose value is the compressed inner message set. The wrapper's
offset is the absolute offset of the last inner message; magic 1 inner offsets are relative
(absolute = wrapper offset - last inner offset + inner offset), magic 0 inner offsets are taken as
written. A magic 1 LogAppendTime wrapper's timestamp is every inner message's timestamp.

All functions are stateless and thread-safe.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from appliance.errors import (
    CorruptRecordError,
    InvalidRecordError,
    UnsupportedCompressionTypeError,
)
from appliance.records.compression import DEFAULT_MAX_DECOMPRESSED, codec_of, compress, decompress
from appliance.records.record_types import Compression, Record, TimestampType
from native import crc32
from native.legacy_layout import (
    CODEC_MASK,
    CRC_OFFSET,
    HEADER_V0,
    HEADER_V1,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_BIT,
)

__all__ = [
    "LegacyMessage", "LegacyEntry", "build_message_set", "iter_message_set", "iter_entries",
    "validate_message_set", "HEADER_V0", "HEADER_V1", "LOG_OVERHEAD", "NO_TIMESTAMP",
]

# The layout is declared once, in native/legacy_layout.py (the kernels read it too).
_HEADERS = (HEADER_V0, HEADER_V1)
_ENTRY_PREFIX = struct.Struct(">qi")  # offset, messageSize
assert _ENTRY_PREFIX.size == LOG_OVERHEAD
_CRC_OFFSET = CRC_OFFSET
_MAGIC_OFFSET = MAGIC_OFFSET          # the CRC covers magic..end
_LEN = struct.Struct(">i")
_U32 = struct.Struct(">I")
# Smallest messageSize: header after the prefix, plus two -1 lengths.
_MIN_SIZE = tuple(h.size - LOG_OVERHEAD + 2 * _LEN.size for h in _HEADERS)

_CODEC_MASK = CODEC_MASK
_TIMESTAMP_TYPE_BIT = TIMESTAMP_TYPE_BIT
_LEGACY_CODECS = (Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4)


@dataclass(frozen=True, slots=True)
class LegacyMessage:
    """One (unwrapped) message: absolute offset, timestamp (-1 for magic 0), key, value.

    ``compression`` is the codec of the wrapper it came in (NONE if it stood alone).
    """

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    magic: int
    timestamp_type: TimestampType = TimestampType.CREATE_TIME
    compression: Compression = Compression.NONE


@dataclass(frozen=True, slots=True)
class LegacyEntry:
    """One top-level entry of a message set and the messages it holds (one unless compressed)."""

    position: int
    magic: int
    compression: Compression
    timestamp_type: TimestampType
    messages: tuple[LegacyMessage, ...]


def _parse(buf, pos: int, end: int) -> tuple[int, int, int, int, bytes | None, bytes | None]:
    """(offset, magic, attributes, timestamp, key, value) of the message in buf[pos:end]."""
    size = end - pos - LOG_OVERHEAD
    if size < _MIN_SIZE[0]:
        raise CorruptRecordError(f"message at byte {pos}: messageSize {size} is too small")
    magic = buf[pos + _MAGIC_OFFSET]
    if magic > 1:
        raise CorruptRecordError(f"message at byte {pos} has magic {magic}, expected 0 or 1")
    if size < _MIN_SIZE[magic]:
        raise CorruptRecordError(f"message at byte {pos}: messageSize {size} is too small")
    header = _HEADERS[magic].unpack_from(buf, pos)
    offset, _, stored_crc, _, attributes = header[:5]
    timestamp = header[5] if magic else NO_TIMESTAMP
    crc = crc32(buf, pos + _MAGIC_OFFSET, end)
    if crc != stored_crc:
        raise CorruptRecordError(
            f"message at byte {pos}: CRC32 {crc:#010x} does not match the stored {stored_crc:#010x}")
    p = pos + _HEADERS[magic].size
    fields: list[bytes | None] = []
    for what in ("key", "value"):
        if p + 4 > end:
            raise CorruptRecordError(f"message at byte {pos}: {what} length runs past the message")
        (n,) = _LEN.unpack_from(buf, p)
        p += 4
        if n == -1:
            fields.append(None)
            continue
        if n < 0 or p + n > end:
            raise CorruptRecordError(f"message at byte {pos}: bad {what} length {n}")
        fields.append(bytes(buf[p:p + n]))
        p += n
    if p != end:
        raise CorruptRecordError(f"message at byte {pos}: {end - p} bytes after the value")
    return offset, magic, attributes, timestamp, fields[0], fields[1]


def _entries(buf, allow_partial: bool) -> Iterator[tuple[int, int]]:
    """(start, end) of each top-level entry."""
    n = len(buf)
    pos = 0
    while pos < n:
        if n - pos < LOG_OVERHEAD:
            if allow_partial:
                return
            raise CorruptRecordError(f"message set ends with a truncated entry at byte {pos}")
        _, size = _ENTRY_PREFIX.unpack_from(buf, pos)
        end = pos + LOG_OVERHEAD + size
        if size < _MIN_SIZE[0]:
            raise CorruptRecordError(f"message at byte {pos}: messageSize {size} is too small")
        if end > n:
            if allow_partial:
                return
            raise CorruptRecordError(
                f"message at byte {pos}: messageSize {size} runs past the {n}-byte buffer")
        yield pos, end
        pos = end


def iter_entries(buf, *, allow_partial: bool = False,
                 max_decompressed: int = DEFAULT_MAX_DECOMPRESSED) -> Iterator[LegacyEntry]:
    """Yield each top-level entry with its messages unwrapped and given absolute offsets.

    Raises CorruptRecordError (truncation, CRC32 mismatch, bad lengths, magic other than 0/1,
    nested compression, inner magic differing from the wrapper's, undecodable data),
    InvalidRecordError (a wrapper with no inner messages), UnsupportedCompressionTypeError
    (codec 4-7). ``allow_partial`` quietly drops a truncated last entry (as Fetch may return).
    """
    for pos, end in _entries(buf, allow_partial):
        offset, magic, attrs, ts, key, value = _parse(buf, pos, end)
        codec = attrs & _CODEC_MASK
        if codec not in _LEGACY_CODECS:
            raise UnsupportedCompressionTypeError(
                f"message at byte {pos}: codec {codec} is not allowed with magic {magic}")
        ts_type = TimestampType.LOG_APPEND_TIME if magic and attrs & _TIMESTAMP_TYPE_BIT \
            else TimestampType.CREATE_TIME
        if codec == 0:
            yield LegacyEntry(pos, magic, Compression.NONE, ts_type,
                              (LegacyMessage(offset, ts, key, value, magic, ts_type),))
            continue
        c = Compression(codec)
        if value is None:
            raise CorruptRecordError(f"compressed message at byte {pos} has a null value")
        inner_buf = decompress(c, value, max_decompressed)
        inner = []
        for ipos, iend in _entries(inner_buf, False):
            ioff, imagic, iattrs, its, ikey, ivalue = _parse(inner_buf, ipos, iend)
            if iattrs & _CODEC_MASK:
                raise CorruptRecordError(f"message at byte {pos} is compressed twice")
            if imagic != magic:
                raise CorruptRecordError(
                    f"message at byte {pos}: inner magic {imagic} differs from the wrapper's {magic}")
            inner.append((ioff, its, ikey, ivalue))
        if not inner:
            raise InvalidRecordError(f"compressed message at byte {pos} holds no messages")
        shift = offset - inner[-1][0] if magic else 0
        msgs = tuple(
            LegacyMessage(ioff + shift, ts if ts_type == TimestampType.LOG_APPEND_TIME else its,
                          ikey, ivalue, magic, ts_type, c)
            for ioff, its, ikey, ivalue in inner)
        yield LegacyEntry(pos, magic, c, ts_type, msgs)


def iter_message_set(buf, *, allow_partial: bool = False,
                     max_decompressed: int = DEFAULT_MAX_DECOMPRESSED) -> Iterator[LegacyMessage]:
    """Every message of a magic 0/1 set, compressed wrappers unwrapped. Raises as iter_entries."""
    for entry in iter_entries(buf, allow_partial=allow_partial, max_decompressed=max_decompressed):
        yield from entry.messages


def validate_message_set(buf, *, max_decompressed: int = DEFAULT_MAX_DECOMPRESSED) -> None:
    """Check a whole magic 0/1 set (every CRC, inner sets included).

    Raises InvalidRecordError if empty, otherwise as :func:`iter_entries`.
    """
    if len(buf) == 0:
        raise InvalidRecordError("the message set is empty")
    for _ in iter_entries(buf, max_decompressed=max_decompressed):
        pass


def _encode(out: bytearray, offset: int, magic: int, attributes: int, timestamp: int,
            key: bytes | None, value: bytes | None) -> None:
    start = len(out)
    hdr = _HEADERS[magic]
    out += bytes(hdr.size)
    for b in (key, value):
        if b is None:
            out += _LEN.pack(-1)
        else:
            out += _LEN.pack(len(b))
            out += b
    size = len(out) - start - LOG_OVERHEAD
    if magic:
        hdr.pack_into(out, start, offset, size, 0, magic, attributes, timestamp)
    else:
        hdr.pack_into(out, start, offset, size, 0, magic, attributes)
    _U32.pack_into(out, start + _CRC_OFFSET, crc32(out, start + _MAGIC_OFFSET, len(out)))


def _bytes_or_none(x, what: str) -> bytes | None:
    if x is None or isinstance(x, bytes):
        return x
    if isinstance(x, (bytearray, memoryview)):
        return bytes(x)
    raise TypeError(f"{what} must be bytes-like or None, not {type(x).__name__}")


def build_message_set(records: Sequence, *, magic: int,
                      compression: Compression = Compression.NONE, base_offset: int = 0,
                      timestamp_type: TimestampType = TimestampType.CREATE_TIME) -> bytes:
    """Build a magic 0 or 1 message set.

    Items are :class:`Record` (absolute offset and timestamp used as given; headers must be empty:
    v0/v1 cannot carry them) or ``(key, value)`` tuples (offset base_offset + index, timestamp
    now). Magic 0 stores no timestamp. With a codec, the messages go into one wrapper (LZ4 for
    magic 0 gets Kafka 0.8's frame checksum, which those readers require). Raises ValueError
    (bad magic, headers, offsets not increasing), UnsupportedCompressionTypeError (ZSTD or 5-7).
    """
    if magic not in (0, 1):
        raise ValueError(f"legacy magic must be 0 or 1, not {magic}")
    codec = codec_of(compression)
    if codec not in _LEGACY_CODECS:
        raise UnsupportedCompressionTypeError(f"{codec.name} needs magic 2; magic {magic} cannot carry it")
    if not records:
        raise ValueError("a message set needs at least one message")
    now = int(time.time() * 1000)
    items = []
    for i, r in enumerate(records):
        if isinstance(r, Record):
            if r.headers:
                raise ValueError(f"record {i} has headers, which magic {magic} cannot carry")
            items.append((r.offset, r.timestamp, r.key, r.value))
        else:
            key, value = r
            items.append((base_offset + i, now, key, value))
    for i in range(1, len(items)):
        if items[i][0] <= items[i - 1][0]:
            raise ValueError(f"message {i}: offset {items[i][0]} does not follow {items[i - 1][0]}")
    lat_bit = _TIMESTAMP_TYPE_BIT if magic and timestamp_type == TimestampType.LOG_APPEND_TIME else 0
    ts_of = (lambda t: t) if magic else (lambda t: NO_TIMESTAMP)
    out = bytearray()
    try:
        if codec == Compression.NONE:
            for off, ts, key, value in items:
                _encode(out, off, magic, lat_bit, ts_of(ts), _bytes_or_none(key, "key"),
                        _bytes_or_none(value, "value"))
            return bytes(out)
        first = items[0][0]
        inner = bytearray()
        for off, ts, key, value in items:
            # magic 1 inner offsets are relative to the first; magic 0 keeps them absolute
            _encode(inner, off - first if magic else off, magic, lat_bit, ts_of(ts),
                    _bytes_or_none(key, "key"), _bytes_or_none(value, "value"))
        payload = compress(codec, inner, legacy_lz4_checksum=(magic == 0))
        wrapper_ts = ts_of(max(ts for _, ts, _, _ in items))
        _encode(out, items[-1][0], magic, int(codec) | lat_bit, wrapper_ts, None, payload)
    except struct.error as e:
        raise ValueError(f"message field out of range: {e}") from None
    return bytes(out)
