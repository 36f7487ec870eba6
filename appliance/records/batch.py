"""RecordBatch v2 (magic 2): read, validate, decode, build and patch in place.

Layout (big-endian header, see :mod:`appliance.records.batch_layout`), then ``recordsCount``
records, each: ``length varint, attributes int8, timestampDelta varlong, offsetDelta varint,
keyLength varint (-1 null), key, valueLength varint (-1 null), value, headersCount varint,
headers (keyLength varint, key utf-8, valueLength varint (-1 null), value)``. With a codec in
attributes bits 0-2 the whole records section is compressed as one blob.

Every function is stateless and thread-safe; the ``set_*`` functions write into the caller's
buffer and only after all their checks have passed (a refused call modifies nothing).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator, Sequence
from functools import partial
from typing import NamedTuple

from appliance.errors import (
    CorruptRecordError,
    InvalidRecordError,
    MessageTooLargeError,
    UnsupportedCompressionTypeError,
)
from appliance.records import batch_layout as L
from appliance.records.compression import DEFAULT_MAX_DECOMPRESSED, codec_of, compress, decompress
from appliance.records.record_types import Compression, Record, TimestampType
from appliance.records.varint import (
    INT32_MAX,
    decode_unsigned,
    decode_varint,
    decode_varlong,
    write_varint,
    write_varlong,
)
from native import crc32c
from native.records_walk import walk_records
from native.validate import validate_plain_batches

__all__ = [
    "Compression", "TimestampType", "Record", "BatchHeader", "HEADER_SIZE", "MAGIC",
    "read_header", "validate_batch", "validate_records", "decode_batch", "iter_batches",
    "decode_records", "build_batch", "set_base_offset", "set_log_append_time",
    "set_partition_leader_epoch",
]

HEADER_SIZE = L.HEADER_SIZE
MAGIC = 2

_unpack_header = L.HEADER_STRUCT.unpack_from
_pack_header = L.HEADER_STRUCT.pack_into
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")


class BatchHeader(NamedTuple):
    """The 61-byte v2 batch header, field for field."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies (header included)."""
        return self.batch_length + L.LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> Compression:
        """The codec; raises UnsupportedCompressionTypeError for ids 5-7."""
        return codec_of(self.attributes & L.COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType((self.attributes & L.TIMESTAMP_TYPE_BIT) >> 3)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & L.TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & L.CONTROL_BIT)


def read_header(buf, pos: int = 0) -> BatchHeader:
    """Unpack the header at ``pos``. Only bounds are checked (CorruptRecordError if truncated)."""
    if pos < 0 or pos + HEADER_SIZE > len(buf):
        raise CorruptRecordError(f"batch header at byte {pos} is truncated ({len(buf)}-byte buffer)")
    return BatchHeader._make(_unpack_header(buf, pos))


def _checked_header(buf, pos: int) -> tuple[BatchHeader, int]:
    """Header at ``pos`` plus the batch's end, checking magic and that batchLength fits."""
    # Magic first: a short legacy message is better named by its magic than called truncated.
    if 0 <= pos and pos + L.MAGIC_OFFSET < len(buf) and buf[pos + L.MAGIC_OFFSET] != MAGIC:
        raise CorruptRecordError(
            f"batch at byte {pos} has magic {buf[pos + L.MAGIC_OFFSET]}, expected {MAGIC}")
    h = read_header(buf, pos)
    if h.magic != MAGIC:
        raise CorruptRecordError(f"batch at byte {pos} has magic {h.magic}, expected {MAGIC}")
    if h.batch_length < L.MIN_BATCH_LENGTH:
        raise CorruptRecordError(
            f"batch at byte {pos}: batchLength {h.batch_length} < {L.MIN_BATCH_LENGTH}")
    end = pos + L.LOG_OVERHEAD + h.batch_length
    if end > len(buf):
        raise CorruptRecordError(
            f"batch at byte {pos}: batchLength {h.batch_length} runs past the {len(buf)}-byte buffer")
    return h, end


def _check_crc(buf, pos: int, end: int, h: BatchHeader) -> None:
    crc = crc32c(buf, pos + L.ATTRIBUTES_OFFSET, end)
    if crc != h.crc:
        raise CorruptRecordError(
            f"batch at byte {pos}: CRC32C {crc:#010x} does not match the stored {h.crc:#010x}")


def _records_section(buf, pos: int, end: int, h: BatchHeader, max_decompressed: int):
    """(data, start, stop) of the (decompressed if need be) records section."""
    codec = h.attributes & L.COMPRESSION_MASK
    if codec == 0:
        return buf, pos + HEADER_SIZE, end
    if codec > Compression.ZSTD:
        raise UnsupportedCompressionTypeError(f"batch at byte {pos}: compression codec {codec}")
    data = decompress(codec, memoryview(buf)[pos + HEADER_SIZE:end], max_decompressed)
    return data, 0, len(data)


def _walk_records(data, p: int, end: int, count: int) -> int:
    """Check that ``count`` records exactly fill data[p:end]; return the last offsetDelta (-1 if none).

    The hot loop of the produce path: locals only, no per-record objects, and every varint's
    one- and two-byte forms (all that realistic records use) decoded inline; longer ones go to
    decode_unsigned. u is the raw (zigzag) value: (u >> 1) ^ -(u & 1) decodes it, u & 1 means
    negative, u == 1 means -1 (null).
    """
    uv = decode_unsigned
    prev = -1
    i = 0
    try:
        while i < count:
            if p >= end:
                raise InvalidRecordError(f"recordsCount is {count} but the batch holds only {i} records")
            # length
            b = data[p]
            if b < 0x80:
                u = b
                p += 1
            else:
                c = data[p + 1]
                if c < 0x80:
                    u = (b & 0x7F) | (c << 7)
                    p += 2
                else:
                    u, p = uv(data, p, 5)
            length = (u >> 1) ^ -(u & 1)
            rec_end = p + length
            # 6 = the smallest body: attributes + five one-byte varints
            if length < 6 or rec_end > end:
                raise InvalidRecordError(f"record {i} has an impossible length {length}")
            # attributes (unused in v2), then timestampDelta: only its extent matters
            if data[p + 1] < 0x80:
                p += 2
            elif data[p + 2] < 0x80:
                p += 3
            else:
                p = uv(data, p + 1, 10)[1]
            # offsetDelta
            b = data[p]
            if b < 0x80:
                u = b
                p += 1
            else:
                c = data[p + 1]
                if c < 0x80:
                    u = (b & 0x7F) | (c << 7)
                    p += 2
                else:
                    u, p = uv(data, p, 5)
            od = (u >> 1) ^ -(u & 1)
            if od <= prev:
                raise InvalidRecordError(f"record {i} has offsetDelta {od} after {prev}")
            prev = od
            # key
            b = data[p]
            if b < 0x80:
                u = b
                p += 1
            else:
                c = data[p + 1]
                if c < 0x80:
                    u = (b & 0x7F) | (c << 7)
                    p += 2
                else:
                    u, p = uv(data, p, 5)
            if u > 1:
                if u & 1:
                    raise InvalidRecordError(f"record {i} has a negative key length")
                p += u >> 1
            # value
            b = data[p]
            if b < 0x80:
                u = b
                p += 1
            else:
                c = data[p + 1]
                if c < 0x80:
                    u = (b & 0x7F) | (c << 7)
                    p += 2
                else:
                    u, p = uv(data, p, 5)
            if u > 1:
                if u & 1:
                    raise InvalidRecordError(f"record {i} has a negative value length")
                p += u >> 1
            # headers
            b = data[p]
            if b == 0:
                p += 1
            else:
                if b < 0x80:
                    u = b
                    p += 1
                else:
                    u, p = uv(data, p, 5)
                if u & 1:
                    raise InvalidRecordError(f"record {i} has a negative header count")
                for _ in range(u >> 1):
                    b = data[p]
                    if b < 0x80:
                        u = b
                        p += 1
                    else:
                        u, p = uv(data, p, 5)
                    if u & 1:
                        raise InvalidRecordError(f"record {i} has a header with a null or negative key")
                    p += u >> 1
                    b = data[p]
                    if b < 0x80:
                        u = b
                        p += 1
                    else:
                        u, p = uv(data, p, 5)
                    if u > 1:
                        if u & 1:
                            raise InvalidRecordError(f"record {i} has a header value length below -1")
                        p += u >> 1
                    if p > rec_end:
                        break
            if p != rec_end:
                raise InvalidRecordError(
                    f"record {i}: fields take {p - rec_end + length} bytes but its length says {length}")
            i += 1
    except IndexError:
        raise InvalidRecordError(f"record {i} is truncated: a varint or field runs past the end of the batch") from None
    if p != end:
        raise InvalidRecordError(f"{end - p} trailing bytes after the {count} records of the batch")
    return prev


_NATIVE_WALK_MIN = 8  # below this many records the kernel's call overhead exceeds the Python walk
_NO_LIMIT = (1 << 63) - 1  # max_batch_bytes=None: the kernel compares against this


def _walk(data, start: int, stop: int, count: int) -> int:
    """The record walk: the numba kernel when it pays, the Python walk (its twin) otherwise and
    whenever the kernel finds a problem, so the error raised carries the precise message."""
    if count >= _NATIVE_WALK_MIN:
        status, _, last = walk_records(data, start, stop, count)
        if status == 0:
            return last
    return _walk_records(data, start, stop, count)


def _check_batch(buf, pos: int, verify_records: bool, max_decompressed: int,
                 contiguous_offsets: bool) -> BatchHeader:
    h, end = _checked_header(buf, pos)
    _check_crc(buf, pos, end, h)
    codec = h.attributes & L.COMPRESSION_MASK
    if codec > Compression.ZSTD:
        raise UnsupportedCompressionTypeError(f"batch at byte {pos}: compression codec {codec}")
    if not verify_records:
        return h
    count = h.records_count
    if count < 0 or h.last_offset_delta < 0:
        raise InvalidRecordError(
            f"batch at byte {pos}: recordsCount {count}, lastOffsetDelta {h.last_offset_delta}")
    data, start, stop = _records_section(buf, pos, end, h, max_decompressed)
    last = _walk(data, start, stop, count)
    if count:
        if last != h.last_offset_delta:
            raise InvalidRecordError(
                f"batch at byte {pos}: last record's offsetDelta {last} != lastOffsetDelta "
                f"{h.last_offset_delta}")
        # Strictly increasing deltas from >= 0 ending at count-1 are exactly 0..count-1.
        if contiguous_offsets and h.last_offset_delta != count - 1:
            raise InvalidRecordError(
                f"batch at byte {pos}: {count} records but lastOffsetDelta {h.last_offset_delta}")
    return h


def validate_batch(buf, pos: int = 0, *, verify_records: bool = True,
                   max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
                   contiguous_offsets: bool = True) -> BatchHeader:
    """Validate the batch at ``pos`` and return its header.

    Raises CorruptRecordError (truncated header, bad magic, batchLength < 49 or past the buffer,
    CRC mismatch, undecodable compressed data or more than ``max_decompressed`` bytes of it),
    UnsupportedCompressionTypeError (codec 5-7) and InvalidRecordError (recordsCount disagreeing
    with the records, bad varints, record lengths that do not add up, offsetDeltas not strictly
    increasing up to lastOffsetDelta, trailing bytes; with ``contiguous_offsets`` the deltas must
    be exactly 0..recordsCount-1, as producers write them). ``verify_records=False`` checks the
    header and CRC only.
    """
    return _check_batch(buf, pos, verify_records, max_decompressed, contiguous_offsets)


def validate_records(buf, *, max_batch_bytes: int | None = None,
                     max_decompressed: int = DEFAULT_MAX_DECOMPRESSED) -> list[BatchHeader]:
    """Validate a Produce request's ``records`` field: one or more consecutive v2 batches.

    Each batch gets :func:`validate_batch` (records walked, offsets contiguous) and must hold at
    least one record; a batch's baseOffset must be past the previous batch's last offset.
    Raises InvalidRecordError (empty field, empty batch, offsets going backwards, see
    validate_batch), MessageTooLargeError (a batch larger than ``max_batch_bytes``),
    CorruptRecordError (magic 0/1 data — convert it with
    :func:`appliance.records.convert.legacy_to_v2` first — or see validate_batch),
    UnsupportedCompressionTypeError.
    """
    n = len(buf)
    if n == 0:
        raise InvalidRecordError("the records field is empty")
    # the fused kernel takes plainly valid uncompressed batches in one call; anything else
    # (compressed, or bad: then the error raised below names the problem) goes the slow way
    rows = validate_plain_batches(buf, _NO_LIMIT if max_batch_bytes is None else max_batch_bytes)
    if rows is not None:
        return [BatchHeader._make(r) for r in rows]
    if n > L.MAGIC_OFFSET and buf[L.MAGIC_OFFSET] != MAGIC:
        raise CorruptRecordError(
            f"records have magic {buf[L.MAGIC_OFFSET]}: legacy (v0/v1) message sets must be "
            "converted to v2 batches before validation")
    out: list[BatchHeader] = []
    pos = 0
    prev_last = None
    while pos < n:
        h = read_header(buf, pos)
        if max_batch_bytes is not None and h.size > max_batch_bytes:
            raise MessageTooLargeError(
                f"batch at byte {pos} is {h.size} bytes, over the {max_batch_bytes}-byte limit")
        h = _check_batch(buf, pos, True, max_decompressed, True)
        if h.records_count == 0:
            raise InvalidRecordError(f"batch at byte {pos} has no records")
        if prev_last is not None and h.base_offset <= prev_last:
            raise InvalidRecordError(
                f"batch at byte {pos}: baseOffset {h.base_offset} is not after the previous "
                f"batch's last offset {prev_last}")
        prev_last = h.last_offset
        out.append(h)
        pos += h.size
    return out


def iter_batches(buf, *, allow_partial: bool = False) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) for each batch in ``buf``; checks magic and lengths, not CRCs.

    A truncated last batch raises CorruptRecordError, or ends the iteration quietly with
    ``allow_partial`` (Fetch responses may end mid-batch).
    """
    n = len(buf)
    pos = 0
    while pos < n:
        if allow_partial:
            if n - pos < HEADER_SIZE:
                return
            h = read_header(buf, pos)
            if pos + h.size > n and h.magic == MAGIC and h.batch_length >= L.MIN_BATCH_LENGTH:
                return
        h, end = _checked_header(buf, pos)
        yield pos, h
        pos = end


def _decode_records_section(data, p: int, end: int, h: BatchHeader, pos: int) -> list[Record]:
    base_offset = h.base_offset
    base_ts = h.base_timestamp
    log_append = bool(h.attributes & L.TIMESTAMP_TYPE_BIT)
    out: list[Record] = []
    append = out.append
    prev = -1
    rv = partial(decode_varint, data)

    try:
        for i in range(h.records_count):
            if p >= end:
                raise InvalidRecordError(
                    f"batch at byte {pos}: recordsCount {h.records_count} but only {i} records")
            length, p = rv(p)
            rec_end = p + length
            if length < 6 or rec_end > end:
                raise InvalidRecordError(f"record {i} has an impossible length {length}")
            b = data[p + 1]  # p is the record's attributes byte; timestampDelta follows
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                p += 2
            else:
                ts_delta, p = decode_varlong(data, p + 1)
            od, p = rv(p)
            if od <= prev:
                raise InvalidRecordError(f"record {i} has offsetDelta {od} after {prev}")
            prev = od
            kl, p = rv(p)
            if kl < 0:
                if kl != -1:
                    raise InvalidRecordError(f"record {i} has a bad key length {kl}")
                key = None
            else:
                if p + kl > rec_end:
                    raise InvalidRecordError(f"record {i} has a bad key length {kl}")
                key = bytes(data[p:p + kl])
                p += kl
            vl, p = rv(p)
            if vl < 0:
                if vl != -1:
                    raise InvalidRecordError(f"record {i} has a bad value length {vl}")
                value = None
            else:
                if p + vl > rec_end:
                    raise InvalidRecordError(f"record {i} has a bad value length {vl}")
                value = bytes(data[p:p + vl])
                p += vl
            hc, p = rv(p)
            if hc == 0:
                headers = ()
            else:
                if hc < 0:
                    raise InvalidRecordError(f"record {i} has a negative header count")
                hl = []
                for _ in range(hc):
                    hkl, p = rv(p)
                    if hkl < 0 or p + hkl > rec_end:
                        raise InvalidRecordError(f"record {i} has a bad header key length {hkl}")
                    hkey = bytes(data[p:p + hkl]).decode("utf-8")
                    p += hkl
                    hvl, p = rv(p)
                    if hvl < -1 or p + hvl > rec_end:
                        raise InvalidRecordError(f"record {i} has a bad header value length {hvl}")
                    if hvl < 0:
                        hl.append((hkey, None))
                    else:
                        hl.append((hkey, bytes(data[p:p + hvl])))
                        p += hvl
                headers = tuple(hl)
            if p != rec_end:
                raise InvalidRecordError(f"record {i}: fields do not add up to its length {length}")
            append(Record(base_offset + od, h.max_timestamp if log_append else base_ts + ts_delta,
                          key, value, headers))
    except UnicodeDecodeError as e:
        raise InvalidRecordError(f"batch at byte {pos}: header key is not UTF-8: {e}") from None
    if p != end:
        raise InvalidRecordError(f"batch at byte {pos}: {end - p} trailing bytes after the records")
    if out and prev != h.last_offset_delta:
        raise InvalidRecordError(
            f"batch at byte {pos}: last offsetDelta {prev} != lastOffsetDelta {h.last_offset_delta}")
    return out


def decode_batch(buf, pos: int = 0, *,
                 max_decompressed: int = DEFAULT_MAX_DECOMPRESSED) -> tuple[BatchHeader, list[Record]]:
    """Decode the batch at ``pos`` (decompressing it) into its header and records.

    Records carry absolute offsets (baseOffset + offsetDelta) and timestamps (baseTimestamp +
    delta, or maxTimestamp for every record of a LogAppendTime batch). Checks magic, bounds and
    CRC; raises as :func:`validate_batch` does.
    """
    h, end = _checked_header(buf, pos)
    _check_crc(buf, pos, end, h)
    if h.records_count < 0:
        raise InvalidRecordError(f"batch at byte {pos}: negative recordsCount {h.records_count}")
    data, start, stop = _records_section(buf, pos, end, h, max_decompressed)
    return h, _decode_records_section(data, start, stop, h, pos)


def decode_records(buf, *, max_decompressed: int = DEFAULT_MAX_DECOMPRESSED) -> list[Record]:
    """Every record of every v2 batch in ``buf``, in order (control batches included)."""
    out: list[Record] = []
    for pos, _ in iter_batches(buf):
        out.extend(decode_batch(buf, pos, max_decompressed=max_decompressed)[1])
    return out


def _as_bytes(x, what: str) -> bytes | None:
    if x is None or isinstance(x, bytes):
        return x
    if isinstance(x, (bytearray, memoryview)):
        return bytes(x)
    raise TypeError(f"{what} must be bytes-like or None, not {type(x).__name__}")


def _write_bytes(out: bytearray, b: bytes | None) -> None:
    if b is None:
        out.append(1)  # zigzag(-1)
    else:
        write_varint(out, len(b))
        out += b


def build_batch(records: Sequence, *, base_offset: int = 0,
                compression: Compression = Compression.NONE,
                timestamp_type: TimestampType = TimestampType.CREATE_TIME,
                base_timestamp: int | None = None, producer_id: int = -1,
                producer_epoch: int = -1, base_sequence: int = -1,
                partition_leader_epoch: int = -1, is_transactional: bool = False,
                is_control: bool = False) -> bytes:
    """Build one v2 batch from ``records``.

    Each item is a :class:`Record` (its ``offset`` is absolute: offsetDelta = offset -
    base_offset, which must increase strictly from >= 0; its timestamp is used as is) or a
    ``(key, value)`` / ``(key, value, headers)`` tuple (offsetDelta = its index, timestamp =
    the base timestamp). ``base_timestamp`` defaults to the first record's timestamp if it is a
    Record, else now. With LOG_APPEND_TIME, maxTimestamp (which every record then reads back
    as) is ``base_timestamp``, or now. Raises ValueError (no records, offsets not increasing,
    out-of-range fields), TypeError (non-bytes key/value), UnsupportedCompressionTypeError.
    """
    if not records:
        raise ValueError("a batch needs at least one record")
    codec = codec_of(compression)
    now = int(time.time() * 1000)
    first = records[0]
    if base_timestamp is not None:
        base_ts = base_timestamp
    elif isinstance(first, Record):
        base_ts = first.timestamp
    else:
        base_ts = now
    body = bytearray()
    rec = bytearray()
    prev = -1
    max_ts = None
    for i, r in enumerate(records):
        if isinstance(r, Record):
            delta, ts, key, value, headers = r.offset - base_offset, r.timestamp, r.key, r.value, r.headers
        elif len(r) == 2:
            (key, value), delta, ts, headers = r, i, base_ts, ()
        else:
            (key, value, headers), delta, ts = r, i, base_ts
        if not prev < delta <= INT32_MAX:
            raise ValueError(f"record {i}: offset delta {delta} does not follow {prev}")
        prev = delta
        if max_ts is None or ts > max_ts:
            max_ts = ts
        rec.clear()
        rec.append(0)  # record attributes: unused
        write_varlong(rec, ts - base_ts)
        write_varint(rec, delta)
        _write_bytes(rec, _as_bytes(key, "key"))
        _write_bytes(rec, _as_bytes(value, "value"))
        write_varint(rec, len(headers or ()))
        for hk, hv in headers or ():
            _write_bytes(rec, hk.encode("utf-8") if isinstance(hk, str) else _as_bytes(hk, "header key"))
            _write_bytes(rec, _as_bytes(hv, "header value"))
        write_varint(body, len(rec))
        body += rec
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        max_ts = base_timestamp if base_timestamp is not None else now
    payload = compress(codec, body) if codec else body
    attributes = (int(codec) | (int(timestamp_type) << 3)
                  | (L.TRANSACTIONAL_BIT if is_transactional else 0)
                  | (L.CONTROL_BIT if is_control else 0))
    out = bytearray(HEADER_SIZE)
    try:
        _pack_header(out, 0, base_offset, HEADER_SIZE - L.LOG_OVERHEAD + len(payload),
                     partition_leader_epoch, MAGIC, 0, attributes, prev, base_ts, max_ts,
                     producer_id, producer_epoch, base_sequence, len(records))
    except struct.error as e:
        raise ValueError(f"batch header field out of range: {e}") from None
    out += payload
    _U32.pack_into(out, L.CRC_OFFSET, crc32c(out, L.ATTRIBUTES_OFFSET))
    return bytes(out)


def _writable_header(buf, pos: int) -> tuple[BatchHeader, int]:
    h, end = _checked_header(buf, pos)
    if memoryview(buf).readonly:
        raise TypeError("the buffer is read-only")
    return h, end


def set_base_offset(buf, pos: int, base_offset: int) -> None:
    """Rewrite baseOffset of the batch at ``pos`` in place. The CRC does not cover it.

    Raises CorruptRecordError (not a whole v2 batch there), TypeError (read-only buffer).
    """
    _writable_header(buf, pos)
    _I64.pack_into(buf, pos + L.BASE_OFFSET_OFFSET, base_offset)


def set_partition_leader_epoch(buf, pos: int, epoch: int) -> None:
    """Rewrite partitionLeaderEpoch in place (not covered by the CRC). Raises as set_base_offset."""
    _writable_header(buf, pos)
    _I32.pack_into(buf, pos + L.PARTITION_LEADER_EPOCH_OFFSET, epoch)


def set_log_append_time(buf, pos: int, ts: int) -> None:
    """Mark the batch at ``pos`` LogAppendTime with maxTimestamp ``ts``, recomputing its CRC.

    The old CRC is verified first, so a corrupt batch is refused (CorruptRecordError) rather than
    blessed with a fresh checksum. Raises as set_base_offset.
    """
    if not -(1 << 63) <= ts < (1 << 63):
        raise ValueError(f"timestamp {ts} is out of int64 range")
    h, end = _writable_header(buf, pos)
    _check_crc(buf, pos, end, h)
    _I16.pack_into(buf, pos + L.ATTRIBUTES_OFFSET, h.attributes | L.TIMESTAMP_TYPE_BIT)
    _I64.pack_into(buf, pos + L.MAX_TIMESTAMP_OFFSET, ts)
    _U32.pack_into(buf, pos + L.CRC_OFFSET, crc32c(buf, pos + L.ATTRIBUTES_OFFSET, end))
