"""The fused validation kernel against its twin, the batch-at-a-time Python validation
(appliance.records.batch.validate_batch): the same headers for valid uncompressed batches, and
"not plain" for everything else, where validate_records still accepts or refuses as before."""

from __future__ import annotations

import random
import struct

import pytest

from appliance.errors import (
    CorruptRecordError,
    InvalidRecordError,
    MessageTooLargeError,
    UnsupportedCompressionTypeError,
)
from appliance.records.batch import build_batch, iter_batches, validate_batch, validate_records
from appliance.records.record_types import Compression
from native.batch_layout import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    CRC_START,
    LAST_OFFSET_DELTA_OFFSET,
    MAGIC_OFFSET,
    RECORDS_COUNT_OFFSET,
)
from native.crc import crc32c
from native.validate import validate_plain_batches
from tests.native.batches import make_batch

NO_LIMIT = 1 << 40


def _python_headers(buf: bytes) -> list[tuple]:
    return [tuple(validate_batch(buf, pos)) for pos, _ in iter_batches(buf)]


def _random_request(rng: random.Random, n_batches: int) -> bytes:
    out, offset = [], rng.randint(0, 1 << 40)
    for _ in range(n_batches):
        recs = []
        for _ in range(rng.choice([1, 2, 7, 8, 40])):
            key = None if rng.random() < 0.3 else rng.randbytes(rng.randint(0, 40))
            value = None if rng.random() < 0.1 else rng.randbytes(rng.randint(0, 700))
            headers = tuple((f"h{j}", None if rng.random() < 0.2 else rng.randbytes(rng.randint(0, 9)))
                            for j in range(rng.randint(0, 2)))
            recs.append((key, value, headers))
        pid = rng.choice([-1, rng.randint(0, 1 << 50)])
        out.append(build_batch(recs, base_offset=offset, producer_id=pid,
                               producer_epoch=-1 if pid < 0 else rng.randint(0, 32767),
                               base_sequence=-1 if pid < 0 else rng.randint(0, 1 << 30),
                               partition_leader_epoch=rng.randint(-1, 9)))
        offset += len(recs) + rng.randint(0, 5)
    return b"".join(out)


@pytest.mark.parametrize("seed", range(12))
def test_valid_requests_agree_with_the_twin(seed):
    rng = random.Random(seed)
    buf = _random_request(rng, rng.randint(1, 30))
    rows = validate_plain_batches(buf, NO_LIMIT)
    assert rows is not None
    assert [tuple(r) for r in rows] == _python_headers(buf)
    assert [tuple(h) for h in validate_records(buf)] == [tuple(r) for r in rows]


def test_kafka_python_batches_are_plain():
    buf = b"".join(make_batch(i * 10, n_records=10) for i in range(5))
    assert [tuple(r) for r in validate_plain_batches(buf, NO_LIMIT)] == _python_headers(buf)


def test_compressed_batches_go_the_slow_way_and_are_accepted():
    buf = build_batch([(b"k", b"v" * 300)] * 20, compression=Compression.GZIP)
    assert validate_plain_batches(buf, NO_LIMIT) is None
    assert [tuple(h) for h in validate_records(buf)] == _python_headers(buf)


def _resealed(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, CRC_OFFSET, crc32c(bytes(batch[CRC_START:])))
    return bytes(batch)


def _flip_crc_byte(b: bytes) -> bytes:
    x = bytearray(b)
    x[-1] ^= 0x40
    return bytes(x)


def _bad_magic(b: bytes) -> bytes:
    x = bytearray(b)
    x[MAGIC_OFFSET] = 1
    return bytes(x)


def _count_too_high(b: bytes) -> bytes:
    x = bytearray(b)
    struct.pack_into(">i", x, RECORDS_COUNT_OFFSET, struct.unpack_from(">i", x, RECORDS_COUNT_OFFSET)[0] + 1)
    return _resealed(x)


def _delta_mismatch(b: bytes) -> bytes:
    x = bytearray(b)
    struct.pack_into(">i", x, LAST_OFFSET_DELTA_OFFSET, 7)
    return _resealed(x)


def _codec_seven(b: bytes) -> bytes:
    x = bytearray(b)
    struct.pack_into(">h", x, ATTRIBUTES_OFFSET, 7)
    return _resealed(x)


BAD = [
    ("flipped byte", _flip_crc_byte, CorruptRecordError),
    ("magic 1", _bad_magic, CorruptRecordError),
    ("truncated", lambda b: b[:-3], CorruptRecordError),
    ("short header", lambda b: b[:40], CorruptRecordError),
    ("recordsCount + 1", _count_too_high, InvalidRecordError),
    ("lastOffsetDelta wrong", _delta_mismatch, InvalidRecordError),
    ("codec 7", _codec_seven, UnsupportedCompressionTypeError),
    ("offsets go backwards", lambda b: b + b, InvalidRecordError),
    ("trailing garbage", lambda b: b + b"\x00" * 70, CorruptRecordError),
]


@pytest.mark.parametrize("name,spoil,error", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_not_plain_and_the_twin_names_it(name, spoil, error):
    good = build_batch([(b"k%d" % i, b"v" * 20) for i in range(9)], base_offset=5)
    bad = spoil(good)
    assert validate_plain_batches(bad, NO_LIMIT) is None
    with pytest.raises(error):
        validate_records(bad)


def test_batch_over_the_limit_is_refused_by_name():
    batch = build_batch([(None, b"x" * 1000)])
    assert validate_plain_batches(batch, len(batch) - 1) is None
    with pytest.raises(MessageTooLargeError):
        validate_records(batch, max_batch_bytes=len(batch) - 1)
    assert validate_plain_batches(batch, len(batch)) is not None
