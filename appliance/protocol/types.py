"""Kafka's primitive wire types, and their compact variants for flexible versions (KIP-482).

Every type offers ``encode(value) -> bytes``, ``write(value, out: bytearray)`` and
``decode(buf: memoryview, pos: int) -> (value, new_pos)``. Decoding is bounds-checked and
raises :class:`~appliance.protocol.errors.ProtocolDecodeError` on truncated input, illegal
negative lengths, element counts the remaining bytes cannot hold, or invalid UTF-8 — never a
MemoryError and never an unbounded loop, whatever a hostile peer sends.

Fixed-size types expose their ``struct`` format character (``fmt``) so the schema compiler
can merge runs of them into a single ``unpack_from``/``pack`` call.

All objects here are immutable and safe to share between threads.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from appliance.protocol.errors import ProtocolDecodeError, ProtocolEncodeError

__all__ = [
    "WireType", "FixedType", "Int8", "Int16", "Int32", "Int64",
    "Boolean", "String", "NullableString", "Bytes", "NullableBytes", "Records", "Array",
    "FileSlice", "RECORDS_INLINE_LIMIT",
    "decode_string", "decode_nullable_string", "decode_bytes", "decode_nullable_bytes",
    "decode_records", "write_string", "write_nullable_string", "write_bytes",
    "write_nullable_bytes", "write_records", "truncated", "decode_array_count",
    "CompactString", "CompactNullableString", "CompactBytes", "CompactNullableBytes",
    "CompactRecords", "CompactArray", "Uuid", "compact", "write_uvarint", "encode_uvarint",
    "decode_uvarint", "uvarint_at", "skip_tagged_fields", "write_compact_records",
]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_pack_i16 = _I16.pack
_pack_i32 = _I32.pack
_unpack_i16 = _I16.unpack_from
_unpack_i32 = _I32.unpack_from

_NULL16 = _pack_i16(-1)
_NULL32 = _pack_i32(-1)

# Records values at least this large are handed on as their own chunk instead of being
# copied into the surrounding buffer (the I/O shell can write them with writev / sendmsg).
RECORDS_INLINE_LIMIT = 64 * 1024


@dataclass(frozen=True, slots=True)
class FileSlice:
    """A Records value that still lives in a file: ``length`` bytes at ``position``.

    The encoder never reads it; it accounts ``length`` bytes in the frame size and hands the
    slice through so the I/O shell can ``sendfile`` it. ``fd_or_path`` is an open file
    descriptor or a path.
    """

    fd_or_path: int | str
    position: int
    length: int

    def __post_init__(self) -> None:
        if self.position < 0 or self.length < 0 or self.length > 0x7FFFFFFF:
            raise ProtocolEncodeError(f"bad FileSlice position/length: {self.position}/{self.length}")


def truncated(what: str, pos: int) -> ProtocolDecodeError:
    """The error for input that ends inside ``what`` (which starts at ``pos``)."""
    return ProtocolDecodeError(f"truncated input: {what} at offset {pos} runs past the end")


class WireType:
    """Base of all wire types. ``min_size`` is the fewest bytes any value encodes to."""

    name: str = "?"
    fmt: str | None = None  # struct format char for fixed-size types
    size: int | None = None  # fixed encoded size, None if variable
    min_size: int = 1
    nullable: bool = False
    default: Any = None

    def write(self, value: Any, out: bytearray) -> None:
        raise NotImplementedError

    def encode(self, value: Any) -> bytes:
        """Encode one value. Raises ProtocolEncodeError if it does not fit the type."""
        out = bytearray()
        self.write(value, out)
        return bytes(out)

    def decode(self, buf: memoryview, pos: int) -> tuple[Any, int]:
        raise NotImplementedError

    def as_nullable(self) -> WireType:
        """The nullable variant of this type (for fields nullable only in some versions)."""
        if self.nullable:
            return self
        raise TypeError(f"{self.name} has no nullable variant")

    def __repr__(self) -> str:
        return self.name


class FixedType(WireType):
    """A fixed-size number (or boolean) packed big-endian with ``struct``."""

    def __init__(self, name: str, fmt: str, default: Any = 0) -> None:
        self.name = name
        self.fmt = fmt
        self._st = struct.Struct(">" + fmt)
        self.size = self.min_size = self._st.size
        self.default = default

    def write(self, value: Any, out: bytearray) -> None:
        try:
            out += self._st.pack(value)
        except struct.error as e:
            raise ProtocolEncodeError(f"{self.name}: cannot encode {value!r}: {e}") from None

    def decode(self, buf: memoryview, pos: int) -> tuple[Any, int]:
        try:
            (v,) = self._st.unpack_from(buf, pos)
        except struct.error:
            raise truncated(self.name, pos) from None
        return v, pos + self.size


Int8 = FixedType("Int8", "b")
Int16 = FixedType("Int16", "h")
Int32 = FixedType("Int32", "i")
Int64 = FixedType("Int64", "q")
# struct's "?" packs True as 1 and reads any non-zero byte as True, as Kafka's reader does.
Boolean = FixedType("Boolean", "?", False)


# --- strings -------------------------------------------------------------------------------

def decode_nullable_string(buf: memoryview, pos: int) -> tuple[str | None, int]:
    """Decode an int16-length UTF-8 string; length -1 is None."""
    try:
        (n,) = _unpack_i16(buf, pos)
    except struct.error:
        raise truncated("string length", pos) from None
    start = pos + 2
    if n < 0:
        if n == -1:
            return None, start
        raise ProtocolDecodeError(f"invalid string length {n} at offset {pos}")
    end = start + n
    if end > len(buf):
        raise truncated(f"string of {n} bytes", pos)
    return _utf8_text(buf, start, end, pos), end


def _utf8_text(buf: memoryview, start: int, end: int, pos: int) -> str:
    try:
        return str(buf[start:end], "utf-8")
    except UnicodeDecodeError as e:
        raise ProtocolDecodeError(f"invalid UTF-8 in string at offset {pos}: {e.reason}") from None


def _utf8_bytes(value: str, limit: str) -> bytes:
    """A string's UTF-8 bytes for the wire, at most 32767 of them (both string kinds' limit)."""
    try:
        raw = value.encode("utf-8")
    except AttributeError:
        raise ProtocolEncodeError(f"String: expected str, got {type(value).__name__}") from None
    except UnicodeEncodeError as e:
        raise ProtocolEncodeError(f"String: not encodable as UTF-8: {e.reason}") from None
    if len(raw) > 0x7FFF:
        raise ProtocolEncodeError(f"String: {len(raw)} bytes exceeds the {limit}")
    return raw


def _not_null(decoded: tuple[Any, int], what: str, pos: int) -> tuple[Any, int]:
    if decoded[0] is None:
        raise ProtocolDecodeError(f"null in non-nullable {what} at offset {pos}")
    return decoded


def decode_string(buf: memoryview, pos: int) -> tuple[str, int]:
    """Decode a non-nullable string: length -1 is an error here."""
    return _not_null(decode_nullable_string(buf, pos), "string", pos)


def write_nullable_string(value: str | None, out: bytearray) -> None:
    if value is None:
        out += _NULL16
        return
    write_string(value, out)


def write_string(value: str, out: bytearray) -> None:
    raw = _utf8_bytes(value, "int16 length limit")
    out += _pack_i16(len(raw))
    out += raw


class _SizedType(WireType):
    """A length-prefixed string or bytes type, one of a (plain, nullable) pair made by
    :func:`_sized_pair`: the four variants (compact or not, nullable or not) differ only in
    name, smallest encoding, empty value and their write/decode functions."""

    def __init__(self, name: str, min_size: int, default: Any, nullable: bool,
                 write: Any, decode: Any) -> None:
        self.name = name
        self.min_size = min_size
        self.default = default
        self.nullable = nullable
        self.write = write  # type: ignore[method-assign]
        self.decode = decode  # type: ignore[method-assign]
        self._nullable_twin: WireType = self

    def as_nullable(self) -> WireType:
        return self._nullable_twin


def _sized_pair(name: str, min_size: int, empty: Any, write: Any, decode: Any,
                write_nullable: Any, decode_nullable: Any) -> tuple[_SizedType, _SizedType]:
    """(plain, nullable) variants of one sized type; "String" -> "NullableString",
    "CompactBytes" -> "CompactNullableBytes"."""
    nullable_name = name.replace("Compact", "CompactNullable") if name.startswith("Compact") \
        else "Nullable" + name
    plain = _SizedType(name, min_size, empty, False, write, decode)
    nullable = _SizedType(nullable_name, min_size, None, True, write_nullable, decode_nullable)
    plain._nullable_twin = nullable
    return plain, nullable


String, NullableString = _sized_pair("String", 2, "", write_string, decode_string,
                                     write_nullable_string, decode_nullable_string)


# --- bytes and records ---------------------------------------------------------------------

def _bytes_span(buf: memoryview, pos: int, what: str) -> tuple[int, int]:
    """(start, length) of an int32-length blob at pos; length -1 means null."""
    try:
        (n,) = _unpack_i32(buf, pos)
    except struct.error:
        raise truncated(f"{what} length", pos) from None
    start = pos + 4
    if n < -1:
        raise ProtocolDecodeError(f"invalid {what} length {n} at offset {pos}")
    if n > len(buf) - start:
        raise truncated(f"{what} of {n} bytes", pos)
    return start, n


def decode_nullable_bytes(buf: memoryview, pos: int) -> tuple[bytes | None, int]:
    start, n = _bytes_span(buf, pos, "bytes")
    if n < 0:
        return None, start
    return bytes(buf[start:start + n]), start + n


def decode_bytes(buf: memoryview, pos: int) -> tuple[bytes, int]:
    start, n = _bytes_span(buf, pos, "bytes")
    if n < 0:
        raise ProtocolDecodeError(f"null in non-nullable bytes at offset {pos}")
    return bytes(buf[start:start + n]), start + n


def decode_records(buf: memoryview, pos: int) -> tuple[memoryview | None, int]:
    """Records: a zero-copy slice of ``buf`` (None for length -1)."""
    start, n = _bytes_span(buf, pos, "records")
    if n < 0:
        return None, start
    return buf[start:start + n], start + n


def _blob(value: Any, what: str) -> Any:
    if isinstance(value, bytes | bytearray):
        return value
    if isinstance(value, memoryview):
        if value.ndim == 1 and value.format in ("B", "b", "c") and value.c_contiguous:
            return value
        return memoryview(value.tobytes())
    raise ProtocolEncodeError(f"{what}: expected bytes-like, got {type(value).__name__}")


def write_nullable_bytes(value: Any, out: bytearray) -> None:
    if value is None:
        out += _NULL32
        return
    write_bytes(value, out)


def write_bytes(value: Any, out: bytearray) -> None:
    if value is None:
        raise ProtocolEncodeError("Bytes: None in a non-nullable field")
    b = _blob(value, "Bytes")
    out += _pack_i32(len(b) if not isinstance(b, memoryview) else b.nbytes)
    out += b


def write_records(value: Any, out: bytearray, parts: list) -> None:
    """Write a Records value. Large blobs and FileSlices become their own entries in ``parts``
    (after flushing ``out`` into ``parts``) so they are neither copied nor read here."""
    if value is None:
        out += _NULL32
        return
    if isinstance(value, FileSlice):
        out += _pack_i32(value.length)
        parts.append(bytes(out))
        out.clear()
        parts.append(value)
        return
    b = _blob(value, "Records")
    n = b.nbytes if isinstance(b, memoryview) else len(b)
    if n > 0x7FFFFFFF:
        raise ProtocolEncodeError(f"Records: {n} bytes exceeds the int32 length limit")
    out += _pack_i32(n)
    if n >= RECORDS_INLINE_LIMIT:
        parts.append(bytes(out))
        out.clear()
        parts.append(b)
    else:
        out += b


Bytes, NullableBytes = _sized_pair("Bytes", 4, b"", write_bytes, decode_bytes,
                                   write_nullable_bytes, decode_nullable_bytes)


class _RecordsType(WireType):
    """Always nullable; decodes to a memoryview slice of the input (zero copy)."""

    name = "Records"
    min_size = 4
    nullable = True
    default = None

    def decode(self, buf: memoryview, pos: int) -> tuple[memoryview | None, int]:
        return decode_records(buf, pos)

    def write(self, value: Any, out: bytearray) -> None:
        if isinstance(value, FileSlice):
            raise ProtocolEncodeError("Records: a FileSlice can only be written by a frame encoder")
        parts: list = []
        write_records(value, out, parts)
        if parts:  # a large blob was split off: join back, the caller wants one buffer
            parts.append(bytes(out))
            out.clear()
            for p in parts:
                out += p


Records = _RecordsType()


# --- arrays --------------------------------------------------------------------------------

class Array(WireType):
    """An int32 count followed by that many elements; count -1 is null (if nullable).

    ``Array(Struct(...))`` is compiled by :mod:`appliance.protocol.schema`; the generic
    ``encode``/``decode`` here handle arrays of primitive types.
    """

    min_size = 4

    def __init__(self, element: Any, nullable: bool = False) -> None:
        self.element = element
        self.nullable = nullable
        self.name = f"Array({getattr(element, 'name', element)!s}{', nullable' if nullable else ''})"
        self.default = None if nullable else ()

    def as_nullable(self) -> Array:
        return self if self.nullable else Array(self.element, nullable=True)

    _null = _NULL32  # a null array's encoding

    def _count(self, buf: memoryview, pos: int) -> tuple[int, int]:
        """(element count or -1 for null, where the elements start), checked against what remains."""
        return decode_array_count(buf, pos, self.element.min_size, self.nullable)

    def _write_count(self, n: int, out: bytearray) -> None:
        out += _pack_i32(n)

    def decode(self, buf: memoryview, pos: int) -> tuple[list | None, int]:
        n, start = self._count(buf, pos)
        if n < 0:
            return None, start
        el = self.element
        if el.fmt is not None:
            return list(struct.unpack_from(f">{n}{el.fmt}", buf, start)), start + n * el.size
        out = []
        dec = el.decode
        for _ in range(n):
            v, start = dec(buf, start)
            out.append(v)
        return out, start

    def write(self, value: Any, out: bytearray) -> None:
        if value is None:
            if not self.nullable:
                raise ProtocolEncodeError(f"{self.name}: None in a non-nullable array")
            out += self._null
            return
        el = self.element
        if el.fmt is not None:
            try:
                packed = struct.pack(f">{len(value)}{el.fmt}", *value)
            except (struct.error, TypeError) as e:
                raise ProtocolEncodeError(f"{self.name}: cannot encode {value!r}: {e}") from None
            self._write_count(len(value), out)
            out += packed
            return
        self._write_count(len(value), out)
        for v in value:
            el.write(v, out)


def decode_array_count(buf: memoryview, pos: int, min_size: int, nullable: bool) -> tuple[int, int]:
    """Read an array count at pos and check the rest of buf could hold that many elements
    of at least ``min_size`` bytes each (so a hostile count cannot make us allocate or loop).
    Returns (count, position after the count); count is -1 for a null array."""
    try:
        (n,) = _unpack_i32(buf, pos)
    except struct.error:
        raise truncated("array count", pos) from None
    start = pos + 4
    if n < 0:
        if n == -1 and nullable:
            return -1, start
        raise ProtocolDecodeError(f"invalid array count {n} at offset {pos}")
    if n * max(min_size, 1) > len(buf) - start:
        raise ProtocolDecodeError(
            f"array count {n} at offset {pos} needs more bytes than remain ({len(buf) - start})")
    return n, start


# --- flexible versions (KIP-482): unsigned varints, compact encodings, tagged fields --------
#
# In a message's flexible versions strings, bytes, records and arrays carry an unsigned varint
# of (length + 1) instead of an int16/int32 length, 0 meaning null; every struct ends with a
# tagged-field section. The schema compiler swaps each type for its ``compact`` variant there,
# so a declaration names String once and gets both encodings.

_UVARINT_SMALL = tuple(bytes((i,)) for i in range(128))


def write_uvarint(n: int, out: bytearray) -> None:
    """Append ``n`` (0 <= n < 2**32) as an unsigned LEB128 varint."""
    if 0 <= n < 128:
        out += _UVARINT_SMALL[n]
        return
    if n < 0 or n > 0xFFFFFFFF:
        raise ProtocolEncodeError(f"unsigned varint out of range: {n}")
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def encode_uvarint(n: int) -> bytes:
    """``n`` as an unsigned varint."""
    if 0 <= n < 128:
        return _UVARINT_SMALL[n]
    out = bytearray()
    write_uvarint(n, out)
    return bytes(out)


def uvarint_at(buf: memoryview, pos: int) -> tuple[int, int]:
    """decode_uvarint unrolled for generated decoders: raises IndexError on truncated input
    (their caller reports it as truncated), ProtocolDecodeError past 5 bytes or 32 bits."""
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    n = b & 0x7F
    b = buf[pos + 1]
    if b < 0x80:
        return n | b << 7, pos + 2
    n |= (b & 0x7F) << 7
    b = buf[pos + 2]
    if b < 0x80:
        return n | b << 14, pos + 3
    n |= (b & 0x7F) << 14
    b = buf[pos + 3]
    if b < 0x80:
        return n | b << 21, pos + 4
    n |= (b & 0x7F) << 21
    b = buf[pos + 4]
    if b < 0x10:  # the fifth byte holds the top 4 bits of 32
        return n | b << 28, pos + 5
    raise ProtocolDecodeError(f"unsigned varint at offset {pos} is longer than 5 bytes or overflows")


def decode_uvarint(buf: memoryview, pos: int) -> tuple[int, int]:
    """(value, new position) of the unsigned varint at ``pos``; refuses more than 5 bytes or a
    value above 2**32 - 1 (Kafka's limit), and truncated input."""
    try:
        return uvarint_at(buf, pos)
    except IndexError:
        raise truncated("unsigned varint", pos) from None


def _compact_span(buf: memoryview, pos: int, what: str) -> tuple[int, int]:
    """(start, length) of a compact blob/string at pos; length -1 means null."""
    n, start = decode_uvarint(buf, pos)
    n -= 1
    if n > len(buf) - start:
        raise truncated(f"{what} of {n} bytes", pos)
    return start, n


def decode_compact_nullable_string(buf: memoryview, pos: int) -> tuple[str | None, int]:
    start, n = _compact_span(buf, pos, "compact string")
    if n < 0:
        return None, start
    if n > 0x7FFF:
        raise ProtocolDecodeError(f"compact string of {n} bytes at offset {pos} exceeds 32767")
    return _utf8_text(buf, start, start + n, pos), start + n


def decode_compact_string(buf: memoryview, pos: int) -> tuple[str, int]:
    return _not_null(decode_compact_nullable_string(buf, pos), "compact string", pos)


def write_compact_nullable_string(value: str | None, out: bytearray) -> None:
    if value is None:
        out += b"\x00"
        return
    write_compact_string(value, out)


def write_compact_string(value: str, out: bytearray) -> None:
    raw = _utf8_bytes(value, "32767-byte limit")
    write_uvarint(len(raw) + 1, out)
    out += raw


def decode_compact_nullable_bytes(buf: memoryview, pos: int) -> tuple[bytes | None, int]:
    start, n = _compact_span(buf, pos, "compact bytes")
    if n < 0:
        return None, start
    return bytes(buf[start:start + n]), start + n


def decode_compact_bytes(buf: memoryview, pos: int) -> tuple[bytes, int]:
    return _not_null(decode_compact_nullable_bytes(buf, pos), "compact bytes", pos)


def decode_compact_records(buf: memoryview, pos: int) -> tuple[memoryview | None, int]:
    """Compact records: a zero-copy slice of ``buf`` (None for null)."""
    start, n = _compact_span(buf, pos, "compact records")
    if n < 0:
        return None, start
    return buf[start:start + n], start + n


def write_compact_nullable_bytes(value: Any, out: bytearray) -> None:
    if value is None:
        out += b"\x00"
        return
    write_compact_bytes(value, out)


def write_compact_bytes(value: Any, out: bytearray) -> None:
    if value is None:
        raise ProtocolEncodeError("Bytes: None in a non-nullable field")
    b = _blob(value, "Bytes")
    write_uvarint((b.nbytes if isinstance(b, memoryview) else len(b)) + 1, out)
    out += b


def write_compact_records(value: Any, out: bytearray, parts: list) -> None:
    """write_records with a compact length: large blobs and FileSlices go to ``parts``."""
    if value is None:
        out += b"\x00"
        return
    if isinstance(value, FileSlice):
        write_uvarint(value.length + 1, out)
        parts.append(bytes(out))
        out.clear()
        parts.append(value)
        return
    b = _blob(value, "Records")
    n = b.nbytes if isinstance(b, memoryview) else len(b)
    if n >= 0x7FFFFFFF:
        raise ProtocolEncodeError(f"Records: {n} bytes exceeds the int32 length limit")
    write_uvarint(n + 1, out)
    if n >= RECORDS_INLINE_LIMIT:
        parts.append(bytes(out))
        out.clear()
        parts.append(b)
    else:
        out += b


class _CompactRecordsType(_RecordsType):
    name = "CompactRecords"
    min_size = 1

    def decode(self, buf: memoryview, pos: int) -> tuple[memoryview | None, int]:
        return decode_compact_records(buf, pos)

    def write(self, value: Any, out: bytearray) -> None:
        if isinstance(value, FileSlice):
            raise ProtocolEncodeError("Records: a FileSlice can only be written by a frame encoder")
        parts: list = []
        write_compact_records(value, out, parts)
        if parts:
            parts.append(bytes(out))
            out.clear()
            for p in parts:
                out += p


CompactString, CompactNullableString = _sized_pair(
    "CompactString", 1, "", write_compact_string, decode_compact_string,
    write_compact_nullable_string, decode_compact_nullable_string)
CompactBytes, CompactNullableBytes = _sized_pair(
    "CompactBytes", 1, b"", write_compact_bytes, decode_compact_bytes,
    write_compact_nullable_bytes, decode_compact_nullable_bytes)
CompactRecords = _CompactRecordsType()
# A UUID (topic ids, KIP-516): 16 raw bytes; the zero UUID means "none".
Uuid = FixedType("Uuid", "16s", bytes(16))


class CompactArray(Array):
    """Array in flexible versions: unsigned varint (count + 1), 0 = null; elements compact too."""

    min_size = 1

    def __init__(self, element: Any, nullable: bool = False) -> None:
        super().__init__(element, nullable)
        self.name = "Compact" + self.name

    def as_nullable(self) -> Array:
        return self if self.nullable else CompactArray(self.element, nullable=True)

    _null = b"\x00"

    def _count(self, buf: memoryview, pos: int) -> tuple[int, int]:
        n, start = decode_uvarint(buf, pos)
        n -= 1
        if n < 0:
            if not self.nullable:
                raise ProtocolDecodeError(f"null in non-nullable compact array at offset {pos}")
            return -1, start
        if n * max(self.element.min_size, 1) > len(buf) - start:
            raise ProtocolDecodeError(
                f"array count {n} at offset {pos} needs more bytes than remain ({len(buf) - start})")
        return n, start

    def _write_count(self, n: int, out: bytearray) -> None:
        write_uvarint(n + 1, out)


_COMPACT = {
    id(String): CompactString, id(NullableString): CompactNullableString,
    id(Bytes): CompactBytes, id(NullableBytes): CompactNullableBytes, id(Records): CompactRecords,
}


def compact(t: Any) -> Any:
    """The flexible-version encoding of wire type ``t`` (itself for fixed-size types and
    structs; arrays become compact arrays of compact elements)."""
    if isinstance(t, Array) and not isinstance(t, CompactArray):
        return CompactArray(compact(t.element), t.nullable)
    return _COMPACT.get(id(t), t)


def skip_tagged_fields(buf: memoryview, pos: int) -> int:
    """Skip a tagged-field section (count, then tag/size/data each); the position after it."""
    n, pos = decode_uvarint(buf, pos)
    end = len(buf)
    if n > end - pos:  # each field takes at least 2 bytes: a hostile count cannot loop long
        raise ProtocolDecodeError(f"tagged field count {n} at offset {pos} exceeds the bytes left")
    for _ in range(n):
        _, pos = decode_uvarint(buf, pos)
        size, pos = decode_uvarint(buf, pos)
        if size > end - pos:
            raise truncated(f"tagged field of {size} bytes", pos)
        pos += size
    return pos
