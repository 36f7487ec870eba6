"""Kafka's record compression codecs: gzip, snappy (raw and xerial framing), LZ4 frame, zstd.

Decompression is size-capped (a bomb guard) and turns every codec failure into
CorruptRecordError. Everything here is stateless and thread-safe.

Snappy framing: Kafka's Java client (xerial SnappyOutputStream) and kafka-python write the xerial
block framing (``\\x82SNAPPY\\x00`` + version + compat, then big-endian int32 length + raw snappy
block, repeated); librdkafka writes one raw snappy block. We decode both and encode xerial, which
every client (Java, kafka-python, librdkafka) reads.

LZ4: magic 2 and magic 1 use the standard LZ4 frame. Kafka 0.8-0.9 (magic 0) computed the frame
header checksum over the magic number too; :func:`compress` can write that broken checksum
(``legacy_lz4_checksum=True``) for magic 0, and :func:`decompress` accepts either checksum.
"""

from __future__ import annotations

import struct
import zlib

import cramjam
import lz4.frame
import zstandard

from appliance.errors import CorruptRecordError, UnsupportedCompressionTypeError
from appliance.records.record_types import Compression
from appliance.records.varint import decode_unsigned
from appliance.records.xxh32 import xxh32

__all__ = ["compress", "decompress", "DEFAULT_MAX_DECOMPRESSED", "XERIAL_MAGIC", "codec_of"]

DEFAULT_MAX_DECOMPRESSED = 64 << 20

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")  # magic, version, compatible version
_XERIAL_BLOCK_LEN = struct.Struct(">i")
_XERIAL_BLOCK_SIZE = 32 * 1024  # xerial's default uncompressed block size

_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_GZIP_LEVEL = 6
_ZSTD_LEVEL = 3
_ZSTD_CHUNK = 256 * 1024


def codec_of(codec: int) -> Compression:
    """The Compression for a codec id; UnsupportedCompressionTypeError for 5-7 (or anything else)."""
    try:
        return Compression(codec)
    except ValueError:
        raise UnsupportedCompressionTypeError(f"unknown compression codec {codec}") from None


def compress(codec: int, data: bytes | bytearray | memoryview, *,
             legacy_lz4_checksum: bool = False) -> bytes:
    """Compress ``data`` with ``codec``; NONE returns the bytes unchanged.

    Raises UnsupportedCompressionTypeError for an unknown codec.
    """
    c = codec_of(codec)
    if c is Compression.NONE:
        return bytes(data)
    if c is Compression.GZIP:
        z = zlib.compressobj(_GZIP_LEVEL, zlib.DEFLATED, 31)
        return z.compress(data) + z.flush()
    if c is Compression.SNAPPY:
        return _xerial_encode(data)
    if c is Compression.LZ4:
        # Independent blocks and no content size: what Kafka's own LZ4 stream writes and reads.
        out = lz4.frame.compress(bytes(data), block_linked=False, store_size=False,
                                 content_checksum=False)
        return _break_lz4_checksum(out) if legacy_lz4_checksum else out
    return zstandard.ZstdCompressor(level=_ZSTD_LEVEL).compress(data)


def decompress(codec: int, data: bytes | bytearray | memoryview,
               max_size: int = DEFAULT_MAX_DECOMPRESSED) -> bytes:
    """Decompress ``data``; at most ``max_size`` bytes of output.

    Raises CorruptRecordError if the input is malformed or truncated, or if the output would exceed
    ``max_size`` (decompression bomb); UnsupportedCompressionTypeError for an unknown codec.
    """
    c = codec_of(codec)
    try:
        if c is Compression.NONE:
            out = bytes(data)
        elif c is Compression.GZIP:
            out = _gzip_decode(data, max_size)
        elif c is Compression.SNAPPY:
            out = _snappy_decode(bytes(data), max_size)
        elif c is Compression.LZ4:
            out = _lz4_decode(bytes(data), max_size)
        else:
            out = _zstd_decode(data, max_size)
    except CorruptRecordError:
        raise
    except Exception as e:  # every codec library has its own error types
        raise CorruptRecordError(f"{c.name} decompression failed: {e}") from e
    if len(out) > max_size:
        raise CorruptRecordError(f"{c.name} data decompresses past the {max_size}-byte limit")
    return out


def _too_big(name: str, max_size: int) -> CorruptRecordError:
    return CorruptRecordError(f"{name} data decompresses past the {max_size}-byte limit")


def _gzip_decode(data, max_size: int) -> bytes:
    parts = []
    total = 0
    rest = bytes(data)
    while True:
        # wbits 47: accept a gzip or zlib header; loop for concatenated gzip members (Java reads them).
        d = zlib.decompressobj(47)
        chunk = d.decompress(rest, max_size - total + 1)
        total += len(chunk)
        if total > max_size or d.unconsumed_tail:
            raise _too_big("GZIP", max_size)
        parts.append(chunk)
        if not d.eof:
            raise CorruptRecordError("GZIP data is truncated")
        rest = d.unused_data
        if not rest:
            return b"".join(parts)


def _snappy_raw(block: bytes, budget: int, max_size: int) -> bytes:
    # A raw snappy block starts with its uncompressed length: check it before allocating.
    n, _ = decode_unsigned(block, 0, 5)
    if n > budget:
        raise _too_big("SNAPPY", max_size)
    return bytes(cramjam.snappy.decompress_raw(block))


def _snappy_decode(data: bytes, max_size: int) -> bytes:
    if not data.startswith(XERIAL_MAGIC):
        return _snappy_raw(data, max_size, max_size)
    if len(data) < _XERIAL_HEADER.size:
        raise CorruptRecordError("xerial snappy header is truncated")
    parts = []
    total = 0
    pos = _XERIAL_HEADER.size  # version/compat are ignored, as every Kafka client does
    end = len(data)
    while pos < end:
        if pos + 4 > end:
            raise CorruptRecordError("xerial snappy block length is truncated")
        (n,) = _XERIAL_BLOCK_LEN.unpack_from(data, pos)
        pos += 4
        if n < 0 or pos + n > end:
            raise CorruptRecordError(f"xerial snappy block of {n} bytes runs past the data")
        block = _snappy_raw(data[pos:pos + n], max_size - total, max_size)
        total += len(block)
        parts.append(block)
        pos += n
    return b"".join(parts)


def _xerial_encode(data) -> bytes:
    mv = memoryview(data).cast("B")
    out = bytearray(_XERIAL_HEADER.pack(XERIAL_MAGIC, 1, 1))
    for i in range(0, len(mv), _XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(bytes(mv[i:i + _XERIAL_BLOCK_SIZE])))
        out += _XERIAL_BLOCK_LEN.pack(len(block))
        out += block
    return bytes(out)


def _lz4_header_len(frame: bytes) -> int:
    """Bytes of frame magic + descriptor before the header checksum byte."""
    if len(frame) < 7 or frame[:4] != _LZ4_MAGIC:
        raise CorruptRecordError("not an LZ4 frame")
    flg = frame[4]
    n = 6  # magic, FLG, BD
    if flg & 0x08:
        n += 8  # content size
    if flg & 0x01:
        n += 4  # dictionary id
    if len(frame) <= n:
        raise CorruptRecordError("LZ4 frame header is truncated")
    return n


def _hc(descriptor: bytes) -> int:
    return (xxh32(descriptor) >> 8) & 0xFF


def _break_lz4_checksum(frame: bytes) -> bytes:
    n = _lz4_header_len(frame)
    return frame[:n] + bytes((_hc(frame[:n]),)) + frame[n + 1:]


def _lz4_decode(data: bytes, max_size: int) -> bytes:
    n = _lz4_header_len(data)
    if data[n] != _hc(data[4:n]) and data[n] == _hc(data[:n]):
        # Kafka 0.8-0.9 checksum (over the magic too): put the correct one back.
        data = data[:n] + bytes((_hc(data[4:n]),)) + data[n + 1:]
    parts = []
    total = 0
    while data:
        d = lz4.frame.LZ4FrameDecompressor()
        chunk = d.decompress(data, max_size - total + 1)
        total += len(chunk)
        if total > max_size:
            raise _too_big("LZ4", max_size)
        parts.append(chunk)
        if not d.eof:
            raise CorruptRecordError("LZ4 frame is truncated")
        data = d.unused_data
    return b"".join(parts)


_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_SKIPPABLE = 0x184D2A50  # ..0x184D2A5F
_ZSTD_DID_SIZES = (0, 1, 2, 4)


def _zstd_check_frames(data: bytes) -> None:
    """Walk the zstd frame and block headers (no decompression): libzstd's streaming API quietly
    returns a short result for a truncated frame, so truncation and trailing junk are caught here."""
    pos = 0
    end = len(data)
    if end == 0:
        raise CorruptRecordError("empty ZSTD data")
    while pos < end:
        if pos + 4 > end:
            raise CorruptRecordError("ZSTD frame magic is truncated")
        magic = int.from_bytes(data[pos:pos + 4], "little")
        pos += 4
        if magic & 0xFFFFFFF0 == _ZSTD_SKIPPABLE:
            if pos + 4 > end:
                raise CorruptRecordError("ZSTD skippable frame is truncated")
            pos += 4 + int.from_bytes(data[pos:pos + 4], "little")
            continue
        if magic != _ZSTD_MAGIC:
            raise CorruptRecordError(f"bad ZSTD frame magic {magic:#010x}")
        if pos >= end:
            raise CorruptRecordError("ZSTD frame header is truncated")
        fhd = data[pos]
        single_segment = (fhd >> 5) & 1
        fcs_flag = fhd >> 6
        fcs = (single_segment, 2, 4, 8)[fcs_flag]
        pos += 1 + (0 if single_segment else 1) + _ZSTD_DID_SIZES[fhd & 3] + fcs
        while True:
            if pos + 3 > end:
                raise CorruptRecordError("ZSTD data is truncated")
            bh = int.from_bytes(data[pos:pos + 3], "little")
            pos += 3
            btype = (bh >> 1) & 3
            if btype == 3:
                raise CorruptRecordError("reserved ZSTD block type")
            pos += 1 if btype == 1 else bh >> 3
            if bh & 1:
                break
        if fhd & 0x04:
            pos += 4  # content checksum
        if pos > end:
            raise CorruptRecordError("ZSTD data is truncated")


def _zstd_decode(data, max_size: int) -> bytes:
    data = bytes(data)
    _zstd_check_frames(data)
    # Streaming: producers may omit the frame content size, so we cannot size the output up front.
    parts = []
    total = 0
    reader = zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True)
    with reader:
        while True:
            chunk = reader.read(_ZSTD_CHUNK)
            if not chunk:
                break
            total += len(chunk)
            if total > max_size:
                raise _too_big("ZSTD", max_size)
            parts.append(chunk)
    return b"".join(parts)
