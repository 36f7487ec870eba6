"""legacy <-> v2 conversion, checked with kafka-python's readers on both sides."""

import pytest

from appliance.errors import CorruptRecordError, UnsupportedCompressionTypeError
from appliance.records.batch import (
    Compression,
    Record,
    TimestampType,
    build_batch,
    decode_records,
    iter_batches,
    validate_records,
)
from appliance.records.convert import legacy_to_v2, records_magic, v2_to_legacy
from appliance.records.legacy import build_message_set, iter_message_set
from tests.records.helpers import (
    LEGACY_CODECS,
    kp_build_legacy,
    kp_read_legacy,
    kp_read_v2,
    sample_rows,
)

ROWS = sample_rows(30)


@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_v1_to_v2_to_v1_keeps_everything(codec):
    records = [Record(200 + o, t, k, v) for o, t, k, v, _ in ROWS]
    v1 = build_message_set(records, magic=1, compression=codec)
    assert records_magic(v1) == 1
    v2 = legacy_to_v2(v1, keep_offsets=True)
    assert records_magic(v2) == 2
    assert [h.compression for _, h in iter_batches(v2)] == [codec]
    validate_records(v2)
    assert decode_records(v2) == records
    assert [r[:4] for r in kp_read_v2(v2)] == [(r.offset, r.timestamp, r.key, r.value) for r in records]
    back = v2_to_legacy(v2, magic=1)
    assert records_magic(back) == 1
    assert kp_read_legacy(back) == [(r.offset, r.timestamp, r.key, r.value) for r in records]
    assert [m.compression for m in iter_message_set(back)] == [codec] * len(records)


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_produced_legacy_set_renumbered_from_base_offset(magic, codec):
    v2 = legacy_to_v2(kp_build_legacy(ROWS, magic, codec), base_offset=1000)
    (h,) = validate_records(v2)
    assert (h.base_offset, h.records_count, h.compression) == (1000, len(ROWS), codec)
    got = decode_records(v2)
    assert [r.offset for r in got] == list(range(1000, 1000 + len(ROWS)))
    assert [(r.key, r.value) for r in got] == [(r[2], r[3]) for r in ROWS]
    assert [r.timestamp for r in got] == ([r[1] for r in ROWS] if magic else [-1] * len(ROWS))


def test_mixed_entries_make_several_batches():
    a = build_message_set([Record(0, 5, b"a", b"1"), Record(1, 6, b"b", b"2")], magic=1)
    b = build_message_set([Record(2, 7, b"c", b"3")], magic=1, compression=Compression.SNAPPY)
    c = build_message_set([Record(3, 9, b"d", b"4"), Record(4, 9, b"e", b"5")], magic=1,
                          timestamp_type=TimestampType.LOG_APPEND_TIME)
    v2 = legacy_to_v2(a + b + c)
    hs = validate_records(v2)
    assert [(h.base_offset, h.records_count, h.compression, h.timestamp_type) for h in hs] == [
        (0, 2, 0, 0), (2, 1, Compression.SNAPPY, 0), (3, 2, 0, TimestampType.LOG_APPEND_TIME)]
    assert [(r.offset, r.timestamp) for r in decode_records(v2)] == \
        [(0, 5), (1, 6), (2, 7), (3, 9), (4, 9)]


@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_v2_to_v0_drops_timestamps_and_headers(codec):
    v2 = build_batch([(b"k", b"v", [("h", b"x")]), (None, b"w")], base_offset=40,
                     base_timestamp=1234, compression=codec)
    v0 = v2_to_legacy(v2, magic=0)
    assert records_magic(v0) == 0
    assert kp_read_legacy(v0) == [(40, None, b"k", b"v"), (41, None, None, b"w")]
    assert legacy_to_v2(v0, keep_offsets=True) == build_batch(
        [Record(40, -1, b"k", b"v"), Record(41, -1, None, b"w")], base_offset=40, compression=codec)


def test_v2_log_append_time_to_v1():
    buf = bytearray(build_batch([(b"a", b"1"), (b"b", b"2")], base_timestamp=1))
    from appliance.records.batch import set_log_append_time
    set_log_append_time(buf, 0, 4444)
    for codec_buf in (bytes(buf),):
        v1 = v2_to_legacy(codec_buf, magic=1)
        msgs = list(iter_message_set(v1))
        assert [(m.timestamp, m.timestamp_type) for m in msgs] == \
            [(4444, TimestampType.LOG_APPEND_TIME)] * 2


def test_zstd_and_control_batches():
    z = build_batch([(b"k", b"v")], compression=Compression.ZSTD)
    with pytest.raises(UnsupportedCompressionTypeError, match="ZSTD"):
        v2_to_legacy(z, magic=1)
    marker = build_batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x05")], base_offset=1,
                         is_control=True, is_transactional=True, producer_id=3, producer_epoch=0)
    data = build_batch([(b"k", b"v")], base_offset=0)
    assert kp_read_legacy(v2_to_legacy(data + marker, magic=1))[0][0] == 0
    assert len(kp_read_legacy(v2_to_legacy(data + marker, magic=1))) == 1
    with pytest.raises(ValueError):
        v2_to_legacy(data, magic=2)


def test_records_magic_and_bad_input():
    with pytest.raises(CorruptRecordError):
        records_magic(b"\x00" * 16)
    with pytest.raises(CorruptRecordError, match="magic 2"):
        legacy_to_v2(build_batch([(b"k", b"v")]))
    with pytest.raises(CorruptRecordError, match="magic 1"):
        v2_to_legacy(build_message_set([(b"k", b"v")], magic=1), magic=1)
    with pytest.raises(CorruptRecordError, match="legacy"):
        validate_records(build_message_set([(b"k", b"v")], magic=0))
