"""v2 batches against kafka-python's and aiokafka's own builders and readers."""

import struct

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder
from kafka.record.default_records import DefaultRecordBatch

from appliance.records import batch_layout as L
from appliance.records.batch import (
    HEADER_SIZE,
    Compression,
    Record,
    TimestampType,
    build_batch,
    decode_batch,
    decode_records,
    iter_batches,
    read_header,
    validate_batch,
    validate_records,
)
from tests.records.helpers import CODECS, kp_build_v2, kp_read_v2, sample_rows


def _as_rows(records):
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in records]


def test_layout_matches_kafka_python():
    assert L.HEADER_FORMAT == DefaultRecordBatch.HEADER_STRUCT.format
    assert HEADER_SIZE == DefaultRecordBatch.HEADER_STRUCT.size == 61
    assert L.CRC_OFFSET == DefaultRecordBatch.CRC_OFFSET
    assert L.ATTRIBUTES_OFFSET == DefaultRecordBatch.ATTRIBUTES_OFFSET


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_batch_validates_and_decodes(codec):
    rows = sample_rows()
    buf = kp_build_v2(rows, codec, producer=(4242, 3, 17))
    h = validate_batch(buf)
    assert (h.compression, h.records_count, h.last_offset_delta) == (codec, len(rows), len(rows) - 1)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (4242, 3, 17)
    assert h.max_timestamp == max(r[1] for r in rows) and h.base_timestamp == rows[0][1]
    assert h.size == len(buf) and h.timestamp_type == TimestampType.CREATE_TIME
    assert not h.is_transactional and not h.is_control
    hdr, records = decode_batch(buf)
    assert hdr == h == read_header(buf)
    assert _as_rows(records) == [(o, t, k, v, hs) for o, t, k, v, hs in rows]
    assert validate_records(buf) == [h]


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_reads_our_batch(codec):
    rows = sample_rows()
    records = [Record(1000 + o, t, k, v, tuple(hs)) for o, t, k, v, hs in rows]
    buf = build_batch(records, base_offset=1000, compression=codec, producer_id=9,
                      producer_epoch=1, base_sequence=5, partition_leader_epoch=3)
    kb = DefaultRecordBatch(buf)
    assert kb.validate_crc()
    assert (kb.compression_type, kb.base_offset, kb.leader_epoch) == (codec, 1000, 3)
    assert (kb.producer_id, kb.producer_epoch, kb.base_sequence) == (9, 1, 5)
    assert kb.max_timestamp == max(r.timestamp for r in records)
    assert kp_read_v2(buf) == _as_rows(records)
    validate_batch(buf)


@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka_builder_batch_validates(codec):
    rows = sample_rows(25)
    b = AioBuilder(2, codec, 0, -1, -1, -1, 1 << 24)
    for o, t, k, v, hs in rows:
        assert b.append(o, t, k, v, hs) is not None
    buf = bytes(b.build())
    validate_records(buf)
    assert _as_rows(decode_records(buf)) == [(o, t, k, v, hs) for o, t, k, v, hs in rows]


def test_tuple_records_get_index_offsets_and_base_timestamp():
    buf = build_batch([(b"k", b"v"), (None, None, [("a", b"1")])], base_offset=50,
                      base_timestamp=123, is_transactional=True, producer_id=1, producer_epoch=0,
                      base_sequence=0)
    h, recs = decode_batch(buf)
    assert h.is_transactional and h.base_offset == 50
    assert recs == [Record(50, 123, b"k", b"v"), Record(51, 123, None, None, (("a", b"1"),))]
    kb = DefaultRecordBatch(buf)
    assert kb.is_transactional


def test_log_append_time_batch():
    buf = build_batch([(b"a", b"1"), (b"b", b"2")], base_timestamp=777,
                      timestamp_type=TimestampType.LOG_APPEND_TIME)
    h, recs = decode_batch(buf)
    assert h.timestamp_type == TimestampType.LOG_APPEND_TIME and h.max_timestamp == 777
    assert [r.timestamp for r in recs] == [777, 777]
    assert [r[1] for r in kp_read_v2(buf)] == [777, 777]


def test_multiple_batches_iterate_and_validate():
    b1 = build_batch([(b"a", b"1"), (b"b", b"2")], base_offset=0)
    b2 = build_batch([(b"c", b"3")], base_offset=2, compression=Compression.LZ4)
    buf = b1 + b2
    assert [(p, h.base_offset) for p, h in iter_batches(buf)] == [(0, 0), (len(b1), 2)]
    assert [h.last_offset for h in validate_records(buf)] == [1, 2]
    assert [r.offset for r in decode_records(buf)] == [0, 1, 2]
    assert kp_read_v2(buf)[2][2:4] == (b"c", b"3")
    # a fetch may end mid-batch: allowed only when asked
    assert [p for p, _ in iter_batches(buf[:-5], allow_partial=True)] == [0]


def test_large_values_need_multibyte_varints():
    big = bytes(range(256)) * 1000
    buf = build_batch([(big, big), (None, b"")], compression=Compression.NONE)
    validate_records(buf)
    assert decode_records(buf)[0].value == big
    assert kp_read_v2(buf)[0][3] == big


def test_control_batch_flag():
    # transaction marker shape: key = version + type, value = version + coordinator epoch
    key, value = struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 5)
    buf = build_batch([(key, value)], is_control=True, is_transactional=True, producer_id=8,
                      producer_epoch=2)
    h = validate_batch(buf)
    assert h.is_control and h.is_transactional
    assert DefaultRecordBatch(buf).is_control_batch
