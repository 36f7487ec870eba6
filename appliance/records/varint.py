"""Zigzag varints as used by Kafka's RecordBatch v2 (protobuf-style base-128, little-endian groups).

The one Python implementation; :mod:`native.varint` is its numba twin for the kernels (the
tests compare them). ``records/batch.py``'s record walk inlines the one- and two-byte forms of
``decode_unsigned`` for speed (it is the produce path's walk below eight records).

``varint`` values are signed 32-bit, ``varlong`` values signed 64-bit; both are zigzag-encoded so small
negative numbers stay short. Decoders take a buffer and position and return ``(value, new_pos)``.
All functions are pure and thread-safe.
"""

from __future__ import annotations

from appliance.errors import InvalidRecordError

__all__ = [
    "encode_varint", "encode_varlong", "write_varint", "write_varlong",
    "decode_varint", "decode_varlong", "decode_unsigned", "size_of_varint",
    "INT32_MIN", "INT32_MAX", "INT64_MIN", "INT64_MAX",
]

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1

# Longest legal encodings: ceil(32/7) and ceil(64/7) bytes.
_MAX_BYTES_32 = 5
_MAX_BYTES_64 = 10


def _zigzag(value: int) -> int:
    # Arithmetic shift by 63 is also right for int32 inputs: both give -1 or 0.
    return (value << 1) ^ (value >> 63)


def write_varint(out: bytearray, value: int) -> None:
    """Append the zigzag varint (int32) of ``value`` to ``out``. Raises ValueError if out of range."""
    if not INT32_MIN <= value <= INT32_MAX:
        raise ValueError(f"varint out of int32 range: {value}")
    _write_unsigned(out, _zigzag(value))


def write_varlong(out: bytearray, value: int) -> None:
    """Append the zigzag varlong (int64) of ``value`` to ``out``. Raises ValueError if out of range."""
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"varlong out of int64 range: {value}")
    _write_unsigned(out, _zigzag(value))


def _write_unsigned(out: bytearray, u: int) -> None:
    while u > 0x7F:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)


def encode_varint(value: int) -> bytes:
    """The zigzag varint encoding of an int32 (ValueError if out of range)."""
    out = bytearray()
    write_varint(out, value)
    return bytes(out)


def encode_varlong(value: int) -> bytes:
    """The zigzag varlong encoding of an int64 (ValueError if out of range)."""
    out = bytearray()
    write_varlong(out, value)
    return bytes(out)


def size_of_varint(value: int) -> int:
    """Bytes the zigzag encoding of ``value`` takes (works for varint and varlong)."""
    u = _zigzag(value)
    n = 1
    while u > 0x7F:
        u >>= 7
        n += 1
    return n


def decode_unsigned(buf, pos: int, max_bytes: int = _MAX_BYTES_64) -> tuple[int, int]:
    """Decode a plain (non-zigzag) base-128 varint at ``pos``; returns (value, new_pos).

    Raises InvalidRecordError if it is truncated (runs off the buffer) or longer than
    ``max_bytes`` bytes (overlong).
    """
    result = 0
    shift = 0
    end = len(buf)
    for _ in range(max_bytes):
        if pos >= end:
            raise InvalidRecordError(f"truncated varint at byte {pos}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
    raise InvalidRecordError(f"varint longer than {max_bytes} bytes ending at byte {pos}")


def decode_varint(buf, pos: int = 0) -> tuple[int, int]:
    """Decode a zigzag varint (int32) at ``pos``; returns (value, new_pos).

    Raises InvalidRecordError on truncation, more than 5 bytes, or a value beyond 32 bits.
    """
    # the one- and two-byte forms, all that realistic records use, without the loop's call
    if pos + 1 < len(buf):
        b = buf[pos]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
        c = buf[pos + 1]
        if c < 0x80:
            u = (b & 0x7F) | (c << 7)
            return (u >> 1) ^ -(u & 1), pos + 2
    u, pos = decode_unsigned(buf, pos, _MAX_BYTES_32)
    if u > 0xFFFFFFFF:
        raise InvalidRecordError(f"varint exceeds 32 bits before byte {pos}")
    return (u >> 1) ^ -(u & 1), pos


def decode_varlong(buf, pos: int = 0) -> tuple[int, int]:
    """Decode a zigzag varlong (int64) at ``pos``; returns (value, new_pos).

    Raises InvalidRecordError on truncation, more than 10 bytes, or a value beyond 64 bits.
    """
    u, pos = decode_unsigned(buf, pos, _MAX_BYTES_64)
    if u > 0xFFFFFFFFFFFFFFFF:
        raise InvalidRecordError(f"varlong exceeds 64 bits before byte {pos}")
    return (u >> 1) ^ -(u & 1), pos
