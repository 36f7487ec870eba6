"""Magic 0/1 message sets against kafka-python's LegacyRecordBatchBuilder and reader."""

import struct

import pytest

from appliance.errors import CorruptRecordError, InvalidRecordError, UnsupportedCompressionTypeError
from appliance.records.legacy import (
    LOG_OVERHEAD,
    build_message_set,
    iter_entries,
    iter_message_set,
    validate_message_set,
)
from appliance.records.record_types import Compression, Record, TimestampType
from native import crc32
from tests.records.helpers import LEGACY_CODECS, kp_build_legacy, kp_read_legacy, sample_rows

ROWS = sample_rows(30)


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_kafka_python_set_reads(magic, codec):
    buf = kp_build_legacy(ROWS, magic, codec)
    validate_message_set(buf)
    msgs = list(iter_message_set(buf))
    assert [(m.key, m.value) for m in msgs] == [(r[2], r[3]) for r in ROWS]
    assert [m.timestamp for m in msgs] == ([r[1] for r in ROWS] if magic else [-1] * len(ROWS))
    assert {m.compression for m in msgs} == {codec} and {m.magic for m in msgs} == {magic}
    offsets = [m.offset for m in msgs]
    if codec and magic:
        # a producer's wrapper carries offset 0, so relative inner offsets land below it
        assert offsets == list(range(-len(ROWS) + 1, 1))
    else:
        assert offsets == [r[0] for r in ROWS]
    # kafka-python's reader agrees with ours message for message (it leaves the offsets of a
    # wrapper at offset 0 relative instead of negative: such a set only ever goes to a broker)
    theirs = kp_read_legacy(buf)
    assert [t[1:] for t in theirs] == [(m.timestamp if magic else None, m.key, m.value) for m in msgs]
    if not (codec and magic):
        assert [t[0] for t in theirs] == offsets


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_our_set_read_by_kafka_python(magic, codec):
    records = [Record(500 + o, t, k, v) for o, t, k, v, _ in ROWS]
    buf = build_message_set(records, magic=magic, compression=codec)
    assert kp_read_legacy(buf) == [(r.offset, r.timestamp if magic else None, r.key, r.value)
                                   for r in records]
    assert [(m.offset, m.key, m.value) for m in iter_message_set(buf)] == \
        [(r.offset, r.key, r.value) for r in records]
    entries = list(iter_entries(buf))
    assert len(entries) == (1 if codec else len(records))


def test_magic1_log_append_time_wrapper():
    buf = build_message_set([Record(3, 99, b"a", b"1"), Record(4, 99, b"b", b"2")], magic=1,
                            compression=Compression.GZIP,
                            timestamp_type=TimestampType.LOG_APPEND_TIME)
    msgs = list(iter_message_set(buf))
    assert [(m.offset, m.timestamp, m.timestamp_type) for m in msgs] == \
        [(3, 99, TimestampType.LOG_APPEND_TIME), (4, 99, TimestampType.LOG_APPEND_TIME)]
    assert [r[:2] for r in kp_read_legacy(buf)] == [(3, 99), (4, 99)]


def test_tuples_get_base_offset_plus_index():
    buf = build_message_set([(b"k", b"v"), (None, None)], magic=0, base_offset=10)
    assert [(m.offset, m.key, m.value, m.timestamp) for m in iter_message_set(buf)] == \
        [(10, b"k", b"v", -1), (11, None, None, -1)]


def test_build_refuses():
    with pytest.raises(UnsupportedCompressionTypeError):
        build_message_set([(b"k", b"v")], magic=1, compression=Compression.ZSTD)
    with pytest.raises(ValueError, match="headers"):
        build_message_set([Record(0, 0, b"k", b"v", (("h", b"x"),))], magic=1)
    with pytest.raises(ValueError, match="magic"):
        build_message_set([(b"k", b"v")], magic=2)
    with pytest.raises(ValueError, match="does not follow"):
        build_message_set([Record(5, 0, None, b"a"), Record(5, 0, None, b"b")], magic=1)


def _fix_crc(buf: bytearray, pos: int = 0) -> bytearray:
    (size,) = struct.unpack_from(">i", buf, pos + 8)
    struct.pack_into(">I", buf, pos + 12, crc32(buf, pos + 16, pos + LOG_OVERHEAD + size))
    return buf


def _refused(buf, exc, match):
    ba = bytearray(buf)
    with pytest.raises(exc, match=match):
        validate_message_set(ba)
    with pytest.raises(exc, match=match):
        list(iter_message_set(ba))
    assert ba == buf


def test_bad_sets_refused():
    good = build_message_set([(b"k", b"v"), (b"k2", b"v2")], magic=1)
    flipped = bytearray(good)
    flipped[-1] ^= 1
    _refused(bytes(flipped), CorruptRecordError, "CRC32")
    _refused(good[:-1], CorruptRecordError, "runs past")
    _refused(good + b"\x00" * 5, CorruptRecordError, "truncated")
    assert [m.key for m in iter_message_set(good[:-1], allow_partial=True)] == [b"k"]
    bad_magic = bytearray(good)
    bad_magic[16] = 2
    _refused(bytes(_fix_crc(bad_magic)), CorruptRecordError, "magic 2")
    long_key = bytearray(good)
    struct.pack_into(">i", long_key, 26, 100)
    _refused(bytes(_fix_crc(long_key)), CorruptRecordError, "bad key length")
    with pytest.raises(InvalidRecordError):
        validate_message_set(b"")


def test_bad_wrappers_refused():
    inner = build_message_set([(b"k", b"v")], magic=1)
    nested = build_message_set([Record(0, 0, None, build_message_set(
        [(b"k", b"v")], magic=1, compression=Compression.GZIP))], magic=1)
    # hand-make wrappers: null value, doubly compressed, zstd codec, inner magic mismatch
    def wrapper(value, attrs, magic=1):
        out = bytearray(struct.pack(">qiIbbq", 0, 0, 0, magic, attrs, 0)[:26 if magic else 18])
        out += struct.pack(">i", -1)
        out += struct.pack(">i", -1) if value is None else struct.pack(">i", len(value)) + value
        struct.pack_into(">i", out, 8, len(out) - 12)
        return bytes(_fix_crc(out))
    from appliance.records.compression import compress
    _refused(wrapper(None, 1), CorruptRecordError, "null value")
    twice = build_message_set([(b"k", b"v")], magic=1, compression=Compression.GZIP)
    _refused(wrapper(compress(1, twice), 1), CorruptRecordError, "compressed twice")
    _refused(wrapper(compress(4, inner), 4), UnsupportedCompressionTypeError, "codec 4")
    _refused(wrapper(compress(1, inner), 1, magic=0), CorruptRecordError, "inner magic")
    _refused(wrapper(compress(1, b""), 1), InvalidRecordError, "no messages")
    assert list(iter_message_set(nested))[0].value.startswith(b"\x00")
