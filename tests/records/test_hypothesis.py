"""Property: random records survive build -> validate -> decode, ours and kafka-python's reader,
and v2 -> v1 -> v2 (headers aside)."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from appliance.errors import KafkaError
from appliance.records.batch import (
    Compression,
    Record,
    build_batch,
    decode_batch,
    validate_batch,
    validate_records,
)
from appliance.records.convert import legacy_to_v2, v2_to_legacy
from native import crc32c
from tests.records.helpers import kp_read_v2

maybe_bytes = st.one_of(st.none(), st.binary(max_size=300))
headers = st.lists(st.tuples(st.text(max_size=10), maybe_bytes), max_size=4).map(tuple)
record_fields = st.tuples(maybe_bytes, maybe_bytes, headers,
                          st.integers(-(2**40), 2**40))


@st.composite
def batches(draw):
    fields = draw(st.lists(record_fields, min_size=1, max_size=25))
    base = draw(st.integers(0, 2**62))
    base_ts = draw(st.integers(0, 2**41))
    records, off = [], base
    for key, value, hs, ts_delta in fields:
        records.append(Record(off, base_ts + ts_delta, key, value, hs))
        off += 1
    return base, records, draw(st.sampled_from(list(Compression)))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches())
def test_round_trip(args):
    base, records, codec = args
    buf = build_batch(records, base_offset=base, compression=codec)
    h = validate_batch(buf)
    assert validate_records(buf) == [h]
    assert (h.records_count, h.compression, h.base_offset) == (len(records), codec, base)
    assert h.max_timestamp == max(r.timestamp for r in records)
    assert decode_batch(buf) == (h, records)
    assert kp_read_v2(buf) == [(r.offset, r.timestamp, r.key, r.value, list(r.headers))
                               for r in records]
    if codec != Compression.ZSTD:
        back = legacy_to_v2(v2_to_legacy(buf, magic=1), keep_offsets=True)
        assert decode_batch(back)[1] == [Record(r.offset, r.timestamp, r.key, r.value)
                                         for r in records]


def _with_crc(buf: bytearray) -> bytes:
    buf[17:21] = crc32c(buf, 21).to_bytes(4, "big")
    return bytes(buf)


def _refused_or_valid(buf: bytes) -> None:
    # Whatever the bytes, the answer is a header or a Kafka error: never a crash or a hang.
    for fn in (validate_batch, decode_batch, validate_records):
        try:
            fn(buf)
        except KafkaError:
            pass


@settings(max_examples=150, deadline=None)
@given(st.binary(min_size=61, max_size=400))
def test_random_bytes_never_crash(junk):
    buf = bytearray(junk)
    buf[16] = 2
    buf[8:12] = (len(buf) - 12).to_bytes(4, "big")
    _refused_or_valid(_with_crc(buf))


GOOD = build_batch([(b"key", b"value" * 30, [("h", b"x")]), (None, None), (b"", b"")] * 3)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(21, len(GOOD) - 1), st.integers(0, 255)), min_size=1,
                max_size=4))
def test_mutated_batch_never_crashes(edits):
    buf = bytearray(GOOD)
    for pos, byte in edits:
        buf[pos] = byte
    _refused_or_valid(_with_crc(buf))
