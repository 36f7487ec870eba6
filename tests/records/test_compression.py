import gzip
import os
import struct

import cramjam
import lz4.frame
import pytest
import xxhash
import zstandard
from kafka import codec as kp

from appliance.errors import CorruptRecordError, UnsupportedCompressionTypeError
from appliance.records.compression import XERIAL_MAGIC, compress, decompress
from appliance.records.record_types import Compression
from appliance.records.xxh32 import xxh32

DATA = os.urandom(5000) + b"abc" * 40000 + os.urandom(70000)  # several 32 KiB snappy blocks

KP_DECODE = {
    Compression.GZIP: kp.gzip_decode,
    Compression.SNAPPY: kp.snappy_decode,
    Compression.LZ4: kp.lz4_decode,
    Compression.ZSTD: kp.zstd_decode,
}
KP_ENCODE = {
    Compression.GZIP: kp.gzip_encode,
    Compression.SNAPPY: kp.snappy_encode,
    Compression.LZ4: kp.lz4_encode,
    Compression.ZSTD: kp.zstd_encode,
}
REAL = [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]


@pytest.mark.parametrize("codec", list(Compression))
@pytest.mark.parametrize("data", [b"", b"x", DATA])
def test_round_trip(codec, data):
    enc = compress(codec, data)
    assert decompress(codec, enc, len(data)) == data


@pytest.mark.parametrize("codec", REAL)
def test_kafka_python_reads_ours_and_we_read_theirs(codec):
    assert KP_DECODE[codec](compress(codec, DATA)) == DATA
    assert decompress(codec, KP_ENCODE[codec](DATA)) == DATA


def test_snappy_writes_xerial_framing_and_reads_raw():
    enc = compress(Compression.SNAPPY, DATA)
    assert enc.startswith(XERIAL_MAGIC) and struct.unpack(">ii", enc[8:16]) == (1, 1)
    raw = bytes(cramjam.snappy.compress_raw(DATA))  # librdkafka's framing
    assert decompress(Compression.SNAPPY, raw) == DATA
    # redpanda writes version/compat little-endian; they are ignored
    odd = XERIAL_MAGIC + struct.pack("<ii", 1, 1) + enc[16:]
    assert decompress(Compression.SNAPPY, odd) == DATA


def test_gzip_concatenated_members():
    assert decompress(Compression.GZIP, gzip.compress(b"ab") + gzip.compress(b"cd")) == b"abcd"


def test_zstd_without_content_size_and_multiple_frames():
    z = zstandard.ZstdCompressor(write_content_size=False, write_checksum=True).compress(DATA)
    assert decompress(Compression.ZSTD, z + z) == DATA + DATA


def test_lz4_frame_with_content_size_and_linked_blocks():
    frame = lz4.frame.compress(DATA, store_size=True, block_linked=True, content_checksum=True)
    assert decompress(Compression.LZ4, frame) == DATA


def test_legacy_lz4_checksum_both_ways():
    broken = compress(Compression.LZ4, DATA, legacy_lz4_checksum=True)
    # standard LZ4 refuses Kafka 0.8's header checksum; we and kafka-python's old-kafka path accept it
    with pytest.raises(RuntimeError):
        lz4.frame.decompress(broken)
    assert decompress(Compression.LZ4, broken) == DATA
    assert kp.lz4_decode_old_kafka(broken) == DATA
    assert decompress(Compression.LZ4, kp.lz4_encode_old_kafka(DATA)) == DATA


@pytest.mark.parametrize("n", [0, 1, 3, 4, 7, 15, 16, 17, 31, 32, 33, 100])
def test_xxh32_matches_xxhash(n):
    data = os.urandom(n)
    assert xxh32(data) == xxhash.xxh32(data).intdigest()
    assert xxh32(data, 12345) == xxhash.xxh32(data, seed=12345).intdigest()


@pytest.mark.parametrize("codec", REAL)
def test_bomb_refused(codec):
    bomb = compress(codec, bytes(8 << 20))
    assert len(bomb) < 1 << 20
    with pytest.raises(CorruptRecordError, match="limit"):
        decompress(codec, bomb, 1 << 20)
    assert decompress(codec, bomb, 8 << 20) == bytes(8 << 20)  # exactly at the cap is fine


def test_raw_snappy_bomb_refused_before_decompressing():
    raw = bytes(cramjam.snappy.compress_raw(bytes(1 << 20)))
    with pytest.raises(CorruptRecordError, match="limit"):
        decompress(Compression.SNAPPY, raw, 1000)


@pytest.mark.parametrize("codec", REAL)
def test_truncated_and_garbage_refused(codec):
    enc = compress(codec, DATA)
    for cut in (len(enc) // 2, len(enc) - 1):
        with pytest.raises(CorruptRecordError):
            decompress(codec, enc[:cut])
    with pytest.raises(CorruptRecordError):
        decompress(codec, b"\x00garbage that is not compressed at all")


@pytest.mark.parametrize("codec", [5, 6, 7, -1])
def test_unknown_codec(codec):
    with pytest.raises(UnsupportedCompressionTypeError):
        compress(codec, b"x")
    with pytest.raises(UnsupportedCompressionTypeError):
        decompress(codec, b"x")
