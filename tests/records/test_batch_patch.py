"""In-place patches keep the batch valid for our validator and for kafka-python's reader."""

import pytest
from kafka.record.default_records import DefaultRecordBatch

from appliance.records.batch import (
    Compression,
    TimestampType,
    build_batch,
    decode_batch,
    read_header,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
    validate_records,
)


@pytest.mark.parametrize("view", [bytearray, lambda b: memoryview(bytearray(b))])
def test_patches_in_a_larger_buffer(view):
    a = build_batch([(b"a", b"1"), (b"b", b"2")], base_timestamp=10)
    b = build_batch([(b"c", b"3")], base_timestamp=20, compression=Compression.GZIP)
    buf = view(a + b)
    crc_before = read_header(buf, len(a)).crc
    set_base_offset(buf, 0, 100)
    set_base_offset(buf, len(a), 102)
    set_partition_leader_epoch(buf, len(a), 7)
    assert read_header(buf, len(a)).crc == crc_before  # neither field is under the CRC
    set_log_append_time(buf, len(a), 5555)
    hs = validate_records(buf)
    assert [h.base_offset for h in hs] == [100, 102]
    assert hs[1].partition_leader_epoch == 7 and hs[1].timestamp_type == TimestampType.LOG_APPEND_TIME
    assert hs[0].timestamp_type == TimestampType.CREATE_TIME
    _, recs = decode_batch(buf, len(a))
    assert [(r.offset, r.timestamp, r.value) for r in recs] == [(102, 5555, b"3")]
    kb = DefaultRecordBatch(bytes(buf)[len(a):])
    assert kb.validate_crc() and kb.timestamp_type == 1 and kb.leader_epoch == 7
    assert [(r.offset, r.timestamp) for r in kb] == [(102, 5555)]
    assert bytes(buf)[:len(a)] != a and decode_batch(buf)[1][1].offset == 101
