import random

import pytest
from kafka.record import util as kp

from appliance.errors import InvalidRecordError
from appliance.records.varint import (
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
    size_of_varint,
)

EDGES32 = [0, 1, -1, 63, -64, 64, -65, 8191, -8192, 2**31 - 1, -(2**31)]
EDGES64 = EDGES32 + [2**63 - 1, -(2**63), 2**35, -(2**40) - 7]


def _kp_encode(v: int) -> bytes:
    out = bytearray()
    kp.encode_varint(v, out.append)
    return bytes(out)


@pytest.mark.parametrize("v", EDGES32)
def test_varint_matches_kafka_python(v):
    enc = encode_varint(v)
    assert enc == _kp_encode(v)
    assert decode_varint(b"\xff" + enc + b"\x00", 1) == (v, 1 + len(enc))
    assert size_of_varint(v) == len(enc) == kp.size_of_varint(v)


def test_varlong_random_against_kafka_python():
    rng = random.Random(7)
    values = EDGES64 + [rng.randint(-(2**63), 2**63 - 1) >> rng.randint(0, 62) for _ in range(2000)]
    for v in values:
        enc = encode_varlong(v)
        assert enc == _kp_encode(v)
        assert decode_varlong(enc) == (v, len(enc))
        assert kp.decode_varint(enc, 0) == (v, len(enc))


def test_out_of_range_refused():
    with pytest.raises(ValueError):
        encode_varint(2**31)
    with pytest.raises(ValueError):
        encode_varlong(-(2**63) - 1)


@pytest.mark.parametrize("bad", [b"", b"\x80", b"\xff\xff", b"\x80\x80\x80\x80"])
def test_truncated_refused(bad):
    with pytest.raises(InvalidRecordError, match="truncated"):
        decode_varint(bad)


def test_overlong_refused():
    # six bytes for a 32-bit varint, eleven for a 64-bit one
    with pytest.raises(InvalidRecordError, match="longer"):
        decode_varint(b"\x80\x80\x80\x80\x80\x00")
    with pytest.raises(InvalidRecordError, match="longer"):
        decode_varlong(b"\x80" * 10 + b"\x00")
    # five bytes but more than 32 bits of payload
    with pytest.raises(InvalidRecordError, match="32 bits"):
        decode_varint(b"\xff\xff\xff\xff\x7f")
    with pytest.raises(InvalidRecordError, match="64 bits"):
        decode_varlong(b"\xff" * 9 + b"\x7f")
