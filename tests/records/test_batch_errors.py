"""Malformed v2 input: each case refused with its specific error, caller's buffer untouched."""

import struct

import pytest

from appliance.errors import (
    CorruptRecordError,
    InvalidRecordError,
    MessageTooLargeError,
    UnsupportedCompressionTypeError,
)
from appliance.records import batch_layout as L
from appliance.records.batch import (
    build_batch,
    decode_batch,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
    validate_batch,
    validate_records,
)
from appliance.records.compression import compress
from appliance.records.varint import encode_varint, encode_varlong
from native import crc32c


def rec(offset_delta: int, key: bytes | None = b"k", value: bytes | None = b"v",
        headers=(), ts_delta: int = 0, raw_tail: bytes = b"") -> bytes:
    """One record, length-prefixed, built field by field (raw_tail lands inside the length)."""
    body = bytearray(b"\x00") + encode_varlong(ts_delta) + encode_varint(offset_delta)
    for b in (key, value):
        body += encode_varint(-1) if b is None else encode_varint(len(b)) + b
    body += encode_varint(len(headers))
    for hk, hv in headers:
        body += encode_varint(len(hk)) + hk
        body += encode_varint(-1) if hv is None else encode_varint(len(hv)) + hv
    body += raw_tail
    return encode_varint(len(body)) + bytes(body)


def raw_batch(records: list[bytes], *, count: int | None = None, last_delta: int | None = None,
              codec: int = 0, attributes: int | None = None, tail: bytes = b"") -> bytes:
    """A batch around already-encoded records with a correct CRC, whatever the records say."""
    section = b"".join(records) + tail
    if codec:
        section = compress(codec, section)
    n = len(records) if count is None else count
    out = bytearray(L.HEADER_SIZE)
    L.HEADER_STRUCT.pack_into(
        out, 0, 0, L.MIN_BATCH_LENGTH + len(section), -1, 2, 0,
        codec if attributes is None else attributes,
        n - 1 if last_delta is None else last_delta, 1000, 1000, -1, -1, -1, n)
    out += section
    struct.pack_into(">I", out, L.CRC_OFFSET, crc32c(out, L.ATTRIBUTES_OFFSET))
    return bytes(out)


GOOD = raw_batch([rec(0), rec(1, None, None, [(b"h", b"x")]), rec(2)])


def refused(buf: bytes, exc, match: str, *, contiguous: bool = True):
    """Every reader refuses ``buf`` with ``exc``; none of them touches a bytearray."""
    ba = bytearray(buf)
    with pytest.raises(exc, match=match):
        validate_batch(ba, contiguous_offsets=contiguous)
    with pytest.raises(exc, match=match):
        validate_records(ba)
    assert ba == buf


def test_good_batch_passes_all_checks():
    assert validate_batch(GOOD).records_count == 3
    assert [r.offset for r in decode_batch(GOOD)[1]] == [0, 1, 2]


def test_wrong_crc():
    bad = bytearray(GOOD)
    bad[-1] ^= 0x01
    refused(bytes(bad), CorruptRecordError, "CRC32C")
    with pytest.raises(CorruptRecordError, match="CRC32C"):
        decode_batch(bytes(bad))
    with pytest.raises(CorruptRecordError, match="CRC32C"):
        validate_batch(bytes(bad), verify_records=False)


def test_wrong_magic():
    for magic in (0, 1, 3):
        bad = bytearray(GOOD)
        bad[L.MAGIC_OFFSET] = magic
        with pytest.raises(CorruptRecordError, match=f"magic {magic}"):
            validate_batch(bad)
        with pytest.raises(CorruptRecordError, match=f"magic {magic}"):
            validate_records(bad)
        with pytest.raises(CorruptRecordError, match=f"magic {magic}"):
            decode_batch(bad)


def test_batch_length_past_buffer_or_too_small():
    refused(GOOD[:-1], CorruptRecordError, "past the")
    refused(GOOD[:30], CorruptRecordError, "truncated")
    bad = bytearray(GOOD)
    struct.pack_into(">i", bad, L.BATCH_LENGTH_OFFSET, 48)
    refused(bytes(bad), CorruptRecordError, "batchLength 48")


def test_record_count_disagrees():
    records = [rec(0), rec(1), rec(2)]
    refused(raw_batch(records, count=4, last_delta=2), InvalidRecordError, "only 3 records")
    refused(raw_batch(records, count=2, last_delta=2), InvalidRecordError, "trailing bytes")
    refused(raw_batch(records, count=-1, last_delta=2), InvalidRecordError, "recordsCount -1")


def test_offset_deltas_backwards_or_gapped():
    refused(raw_batch([rec(0), rec(2), rec(1)], last_delta=2), InvalidRecordError, "offsetDelta 1 after 2")
    refused(raw_batch([rec(0), rec(0)]), InvalidRecordError, "offsetDelta 0 after 0")
    refused(raw_batch([rec(0), rec(1)], last_delta=5), InvalidRecordError, "lastOffsetDelta")
    gapped = raw_batch([rec(0), rec(3)], last_delta=3)
    refused(gapped, InvalidRecordError, "2 records but lastOffsetDelta 3")
    # a compacted log may have gaps; allowed when asked
    assert validate_batch(gapped, contiguous_offsets=False).last_offset_delta == 3
    assert [r.offset for r in decode_batch(gapped)[1]] == [0, 3]


def test_truncated_varint():
    # the last record's headerCount is a dangling continuation byte
    last = rec(1)
    broken = encode_varint(len(last) - 1) + last[1:-1] + b"\x80"
    refused(raw_batch([rec(0), broken]), InvalidRecordError, "truncated")
    # a record length varint cut off at the very end of the batch
    refused(raw_batch([rec(0)], count=2, tail=b"\xff"), InvalidRecordError, "truncated")


def test_trailing_garbage_inside_batch():
    refused(raw_batch([rec(0), rec(1)], tail=b"\x00\x00junk"), InvalidRecordError, "trailing")
    refused(raw_batch([rec(0), rec(1)], tail=b"junk", codec=1), InvalidRecordError, "trailing")
    with pytest.raises(InvalidRecordError, match="trailing"):
        decode_batch(raw_batch([rec(0), rec(1)], tail=b"junk"))


def test_record_length_does_not_add_up():
    refused(raw_batch([rec(0, raw_tail=b"zz"), rec(1)]), InvalidRecordError, "length")
    # key length claims more bytes than the record has
    r = bytearray(rec(0, key=b"abc"))
    r[4] = encode_varint(40)[0]
    refused(raw_batch([bytes(r)]), InvalidRecordError, "runs past the end of the batch")
    with pytest.raises(InvalidRecordError, match="bad key length 40"):
        decode_batch(raw_batch([bytes(r)]))


def test_negative_lengths():
    body = b"\x00" + encode_varlong(0) + encode_varint(0) + encode_varint(-2) + encode_varint(-1) + b"\x00"
    refused(raw_batch([encode_varint(len(body)) + body]), InvalidRecordError, "negative")
    null_header_key = b"\x00\x00\x00\x01\x01\x02" + encode_varint(-1) + encode_varint(-1)
    refused(raw_batch([encode_varint(len(null_header_key)) + null_header_key]),
            InvalidRecordError, "null or negative key")


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec(codec):
    refused(raw_batch([rec(0)], attributes=codec), UnsupportedCompressionTypeError, f"codec {codec}")
    with pytest.raises(UnsupportedCompressionTypeError):
        decode_batch(raw_batch([rec(0)], attributes=codec))


def test_compressed_garbage_and_bomb():
    refused(raw_batch([b"not gzip"], attributes=1), CorruptRecordError, "GZIP")
    big = raw_batch([rec(0, value=bytes(4 << 20))], codec=4)
    with pytest.raises(CorruptRecordError, match="limit"):
        validate_batch(big, max_decompressed=1 << 20)
    with pytest.raises(CorruptRecordError, match="limit"):
        decode_batch(big, max_decompressed=1 << 20)
    validate_batch(big)


def test_validate_records_field_rules():
    with pytest.raises(InvalidRecordError, match="empty"):
        validate_records(b"")
    b0 = build_batch([(b"a", b"1"), (b"b", b"2")], base_offset=0)
    with pytest.raises(InvalidRecordError, match="not after"):
        validate_records(b0 + build_batch([(b"c", b"3")], base_offset=1))
    with pytest.raises(MessageTooLargeError, match="limit"):
        validate_records(b0, max_batch_bytes=len(b0) - 1)
    assert len(validate_records(b0, max_batch_bytes=len(b0))) == 1
    with pytest.raises(InvalidRecordError, match="no records"):
        validate_records(raw_batch([], last_delta=0))
    with pytest.raises(CorruptRecordError):  # a good batch followed by half a header
        validate_records(b0 + b0[:20])


def test_patchers_refuse_without_touching():
    bad = bytearray(GOOD)
    bad[-1] ^= 1
    snapshot = bytes(bad)
    with pytest.raises(CorruptRecordError, match="CRC32C"):
        set_log_append_time(bad, 0, 5)
    short = bytearray(GOOD[:-1])
    for fn in (set_base_offset, set_log_append_time, set_partition_leader_epoch):
        with pytest.raises(CorruptRecordError):
            fn(short, 0, 5)
    with pytest.raises(ValueError):
        set_log_append_time(bytearray(GOOD), 0, 1 << 64)
    with pytest.raises(TypeError):
        set_base_offset(GOOD, 0, 7)  # bytes are read-only
    assert bytes(bad) == snapshot and bytes(short) == GOOD[:-1]
