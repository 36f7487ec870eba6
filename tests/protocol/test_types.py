"""Primitive wire types: exact encodings, round trips and hostile-input errors."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.errors import ErrorCode, InvalidRequestError
from appliance.protocol import types as T
from appliance.protocol.errors import ProtocolDecodeError, ProtocolEncodeError


def dec(t, data: bytes, pos: int = 0):
    return t.decode(memoryview(data), pos)


@pytest.mark.parametrize("t,value,wire", [
    (T.Int8, -2, b"\xfe"),
    (T.Int16, 0x1234, b"\x12\x34"),
    (T.Int32, -1, b"\xff\xff\xff\xff"),
    (T.Int64, 1 << 40, b"\x00\x00\x01\x00\x00\x00\x00\x00"),
    (T.Boolean, True, b"\x01"),
    (T.Boolean, False, b"\x00"),
    (T.String, "hé", b"\x00\x03h\xc3\xa9"),
    (T.NullableString, None, b"\xff\xff"),
    (T.Bytes, b"ab", b"\x00\x00\x00\x02ab"),
    (T.NullableBytes, None, b"\xff\xff\xff\xff"),
    (T.Records, None, b"\xff\xff\xff\xff"),
    (T.Array(T.Int32), [1, 2], b"\x00\x00\x00\x02\x00\x00\x00\x01\x00\x00\x00\x02"),
    (T.Array(T.String, nullable=True), None, b"\xff\xff\xff\xff"),
    (T.Array(T.String), ["a"], b"\x00\x00\x00\x01\x00\x01a"),
])
def test_exact_encoding_and_back(t, value, wire):
    assert t.encode(value) == wire
    got, end = dec(t, wire + b"trailing")
    assert end == len(wire)
    assert (bytes(got) if isinstance(got, memoryview) else got) == value


def test_boolean_reads_any_nonzero_as_true():
    assert dec(T.Boolean, b"\x07") == (True, 1)


def test_records_decode_is_a_zero_copy_slice():
    data = bytearray(b"\x00\x00\x00\x03abcXYZ")
    got, end = dec(T.Records, bytes(data))
    assert isinstance(got, memoryview) and bytes(got) == b"abc" and end == 7
    buf = memoryview(data)
    view, _ = T.Records.decode(buf, 0)
    data[4] = ord("z")  # the slice sees the change: no copy was made
    assert bytes(view) == b"zbc"


def test_decode_errors_carry_invalid_request():
    with pytest.raises(ProtocolDecodeError) as ei:
        dec(T.Int32, b"\x00\x01")
    assert isinstance(ei.value, InvalidRequestError)
    assert ei.value.code == ErrorCode.INVALID_REQUEST


@pytest.mark.parametrize("t,data,match", [
    (T.Int64, b"\x00" * 7, "truncated"),
    (T.String, b"\x00", "truncated"),
    (T.String, b"\x00\x05abc", "truncated"),
    (T.String, b"\xff\xff", "null in non-nullable"),
    (T.NullableString, b"\xff\xfe", "invalid string length -2"),
    (T.String, b"\x00\x02\xc3\x28", "invalid UTF-8"),
    (T.Bytes, b"\x00\x00\x00\x09abc", "truncated"),
    (T.Bytes, b"\xff\xff\xff\xff", "null in non-nullable"),
    (T.NullableBytes, b"\xff\xff\xff\xfe", "invalid bytes length -2"),
    (T.Records, b"\x80\x00\x00\x00", "invalid records length"),
    (T.Records, b"\x7f\xff\xff\xff", "truncated"),
    (T.Array(T.Int32), b"\xff\xff\xff\xff", "invalid array count -1"),
    (T.Array(T.Int32, nullable=True), b"\xff\xff\xff\xfe", "invalid array count -2"),
    (T.Array(T.Int32), b"\x00\x00\x00\x03" + b"\x00" * 11, "needs more bytes"),
    # a hostile count must be refused before any allocation or loop
    (T.Array(T.String), b"\x7f\xff\xff\xff" + b"\x00\x00", "needs more bytes"),
])
def test_hostile_input(t, data, match):
    with pytest.raises(ProtocolDecodeError, match=match):
        dec(t, data)


@pytest.mark.parametrize("t,value", [
    (T.Int8, 128), (T.Int16, -(2**15) - 1), (T.Int32, "1"), (T.Int64, None),
    (T.String, None), (T.String, "x" * 40000), (T.String, "\ud800"), (T.String, b"bytes"),
    (T.Bytes, None), (T.Bytes, "text"), (T.Array(T.Int32), None), (T.Array(T.Int32), [1 << 40]),
    (T.Records, T.FileSlice("/f", 0, 5)),
])
def test_encode_errors(t, value):
    with pytest.raises(ProtocolEncodeError):
        t.encode(value)


def test_file_slice_validates():
    with pytest.raises(ProtocolEncodeError):
        T.FileSlice(3, -1, 5)
    with pytest.raises(ProtocolEncodeError):
        T.FileSlice(3, 0, 1 << 31)


def test_large_records_are_passed_through_uncopied():
    big = memoryview(bytes(T.RECORDS_INLINE_LIMIT))
    out, parts = bytearray(b"head"), []
    T.write_records(big, out, parts)
    assert parts[0] == b"head" + struct.pack(">i", len(big)) and parts[1] is big and out == b""


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=50))
def test_string_round_trip(s):
    assert dec(T.String, T.String.encode(s))[0] == s
