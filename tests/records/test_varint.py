import random

import pytest
from kafka.record import util as kp

from appliance.errors import InvalidRecordError
from appliance.records.varint import (
    decode_unsigned,
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


# --- the numba twin (native/varint.py) against this module, the reference ---

def _native():
    import numba as nb
    import numpy as np

    from native import varint as V

    @nb.njit(cache=False)
    def encode(v):
        out = np.zeros(10, np.uint8)
        p = V.write_varint(out, 0, v)
        return out[:p].copy(), V.varint_size(v)

    @nb.njit(cache=False)
    def decode(buf, max_bytes):
        u, p = V.read_uvarint(buf, 0, len(buf), max_bytes)
        return V.unzigzag(u), p

    return encode, decode, np


def test_native_twin_matches_python_on_edges_and_random():
    encode, decode, np = _native()
    rng = random.Random(11)
    values = EDGES64 + [rng.randint(-(2**63), 2**63 - 1) >> rng.randint(0, 63) for _ in range(3000)]
    for v in values:
        wire, size = encode(v)
        assert bytes(wire) == encode_varlong(v), v
        assert size == size_of_varint(v) == len(wire)
        assert decode(wire, 10) == (v, len(wire)), v
        if -(2**31) <= v < 2**31:
            assert decode(wire, 5) == decode_varint(bytes(wire)), v


def test_zigzag_of_int64_extremes():
    encode, decode, _ = _native()
    assert encode_varlong(2**63 - 1) == b"\xfe" + b"\xff" * 8 + b"\x01"
    assert encode_varlong(-(2**63)) == b"\xff" * 9 + b"\x01"
    for v in (2**63 - 1, -(2**63)):
        assert bytes(encode(v)[0]) == encode_varlong(v)
        assert decode(encode(v)[0], 10) == (v, 10)
        assert decode_varlong(encode_varlong(v)) == (v, 10)


@pytest.mark.parametrize("bad,max_bytes", [
    (b"", 5), (b"\x80", 5), (b"\xff\xff", 10), (b"\x80\x80\x80\x80", 5),  # truncated
    (b"\x80\x80\x80\x80\x80\x00", 5), (b"\x80" * 10 + b"\x00", 10),     # overlong
])
def test_native_twin_refuses_what_python_refuses(bad, max_bytes):
    _, decode, np = _native()
    assert decode(np.frombuffer(bad, np.uint8), max_bytes)[1] == -1
    with pytest.raises(InvalidRecordError):
        decode_unsigned(bad, 0, max_bytes)


def test_fast_path_agrees_with_loop():
    # decode_varint's inline one- and two-byte forms against the general loop, at their edges
    for v in range(-9000, 9000):
        enc = encode_varint(v)
        u, p = decode_unsigned(enc, 0, 5)
        assert decode_varint(enc) == ((u >> 1) ^ -(u & 1), p) == (v, len(enc))
        assert decode_varint(enc + b"\x00", 0) == (v, len(enc))
