"""The down-conversion kernel (appliance.records.down_convert over native.down_convert) against its
pure-Python twin (appliance.records.convert.v2_to_legacy): the same bytes for every input the
twin accepts, a refusal for every input it refuses; the output read back by kafka-python."""

from __future__ import annotations

import random
import struct

import numpy as np
import pytest

from appliance.errors import CorruptRecordError, InvalidRecordError, UnsupportedCompressionTypeError
from appliance.records.batch import (
    Compression,
    Record,
    build_batch,
    iter_batches,
    set_log_append_time,
)
from appliance.records.convert import v2_to_legacy
from appliance.records.down_convert import down_convert_batches
from native import batch_layout as B
from native.crc import crc32c
from native.down_convert import DC_OK, DC_OUT_FULL, convert_batches, records_bound
from tests.records.helpers import LEGACY_CODECS, kp_read_legacy

_ERRORS = (CorruptRecordError, InvalidRecordError, UnsupportedCompressionTypeError)


def _random_batches(rng: random.Random, codecs=LEGACY_CODECS) -> bytes:
    """Batches with every shape the converter meets: null and empty keys and values, headers,
    timestamps going back and forth, LogAppendTime, transaction markers between them."""
    out = bytearray()
    offset = rng.randint(0, 1 << 40)
    for _ in range(rng.randint(1, 6)):
        n = rng.randint(1, 40)
        ts = rng.randint(0, 1 << 41)
        recs = []
        for i in range(n):
            key = None if rng.random() < 0.2 else rng.randbytes(rng.randint(0, 40))
            value = None if rng.random() < 0.1 else rng.randbytes(rng.choice((0, 5, 100, 3000)))
            headers = tuple((f"h{j}", None if rng.random() < 0.3 else rng.randbytes(rng.randint(0, 20)))
                            for j in range(rng.choice((0, 0, 1, 3))))
            recs.append(Record(offset + i, ts + rng.randint(-1000, 1000), key, value, headers))
        batch = bytearray(build_batch(recs, base_offset=offset, compression=rng.choice(codecs)))
        if rng.random() < 0.2:
            set_log_append_time(batch, 0, ts + 5)
        out += batch
        offset += n
        if rng.random() < 0.2:
            out += build_batch([(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x05")], base_offset=offset,
                               is_control=True, is_transactional=True, producer_id=3, producer_epoch=0)
            offset += 1
    return bytes(out)


_NOT_UTF8 = "not-utf-8"


def _twin(buf, magic, allow_partial=False):
    try:
        return v2_to_legacy(buf, magic=magic, allow_partial=allow_partial)
    except InvalidRecordError as e:
        # The twin decodes header keys as UTF-8 and refuses bytes that are not; the kernel only
        # checks their lengths and drops them, as Kafka does (it decodes keys leniently).
        return _NOT_UTF8 if "not UTF-8" in str(e) else None
    except _ERRORS:
        return None


def _kernel(buf, magic, allow_partial=False):
    try:
        return down_convert_batches(buf, magic=magic, allow_partial=allow_partial)
    except _ERRORS:
        return None


@pytest.mark.parametrize("magic", [0, 1])
def test_same_bytes_as_the_twin(magic):
    rng = random.Random(magic)
    for _ in range(60):
        buf = _random_batches(rng)
        got = down_convert_batches(buf, magic=magic)
        assert got == v2_to_legacy(buf, magic=magic)
        # every record but the markers' comes out, as a real client reads it
        assert [(o, k, v) for o, _, k, v in kp_read_legacy(got)] == _decoded(buf)


def _decoded(buf):
    from appliance.records.batch import decode_batch
    out = []
    for pos, h in iter_batches(buf):
        if not h.is_control:
            out.extend((r.offset, r.key, r.value) for r in decode_batch(buf, pos)[1])
    return out


@pytest.mark.parametrize("magic", [0, 1])
def test_truncated_last_batch_is_left_out_when_allowed(magic):
    buf = _random_batches(random.Random(5 + magic), codecs=(Compression.NONE,))
    last = list(iter_batches(buf))[-1][0]
    for cut in (last + 1, last + B.HEADER_SIZE - 1, last + B.HEADER_SIZE + 3, len(buf) - 1):
        assert down_convert_batches(buf[:cut], magic=magic, allow_partial=True) == \
            v2_to_legacy(buf[:cut], magic=magic, allow_partial=True)
        with pytest.raises(CorruptRecordError):
            down_convert_batches(buf[:cut], magic=magic)


def test_output_grows_when_records_are_tiny():
    # 2-byte records grow ~4x as messages: more than the first guess of the output size
    buf = build_batch([(None, b"") for _ in range(5000)], base_offset=7)
    src = np.frombuffer(buf, np.uint8)
    small = np.empty(len(buf), np.uint8)
    assert convert_batches(src, 0, 1, False, small, 0)[0] == DC_OUT_FULL
    big = np.empty(records_bound(len(buf)), np.uint8)
    assert convert_batches(src, 0, 1, False, big, 0)[0] == DC_OK
    assert down_convert_batches(buf, magic=1) == v2_to_legacy(buf, magic=1)
    assert len(kp_read_legacy(down_convert_batches(buf, magic=0))) == 5000


def test_zstd_is_refused_and_magic_checked():
    z = build_batch([(b"k", b"v")], compression=Compression.ZSTD)
    plain = build_batch([(b"k", b"v")])
    with pytest.raises(UnsupportedCompressionTypeError, match="ZSTD"):
        down_convert_batches(plain + z, magic=1)
    with pytest.raises(ValueError):
        down_convert_batches(plain, magic=2)


def _recrc(buf: bytearray) -> None:
    """Rewrite every batch's CRC so a mutation reaches the record checks behind it."""
    pos = 0
    while pos + B.HEADER_SIZE <= len(buf):
        (length,) = struct.unpack_from(">i", buf, pos + B.LENGTH_OFFSET)
        end = pos + B.LOG_OVERHEAD + length
        if length < B.MIN_BATCH_LENGTH or end > len(buf):
            return
        struct.pack_into(">I", buf, pos + B.CRC_OFFSET, crc32c(buf, pos + B.CRC_START, end))
        pos = end


@pytest.mark.parametrize("magic", [0, 1])
def test_mutations_agree_with_the_twin(magic):
    rng = random.Random(100 + magic)
    disagreements = []
    for trial in range(1500):
        buf = bytearray(_random_batches(rng, codecs=(Compression.NONE, Compression.NONE,
                                                     Compression.GZIP)))
        for _ in range(rng.randint(1, 3)):
            buf[rng.randrange(len(buf))] = rng.randrange(256)
        if rng.random() < 0.8:
            _recrc(buf)
        partial = rng.random() < 0.3
        if partial:
            buf = buf[:rng.randrange(len(buf) + 1)]
        want, got = _twin(bytes(buf), magic, partial), _kernel(bytes(buf), magic, partial)
        if want == _NOT_UTF8:
            continue  # the kernel serves it or refuses a later fault; see the test below
        if want != got:
            disagreements.append(trial)
    assert disagreements == []


def test_header_key_bytes_are_not_decoded():
    rec = Record(3, 10, b"k", b"v", (("h", b"x"),))
    buf = bytearray(build_batch([rec], base_offset=3))
    pos = buf.index(b"h\x02x")  # the header: key "h", value length 1, "x"
    buf[pos] = 0xFF
    _recrc(buf)
    assert _twin(bytes(buf), 1) == _NOT_UTF8
    assert kp_read_legacy(down_convert_batches(bytes(buf), magic=1)) == [(3, 10, b"k", b"v")]


def test_bad_crc_is_refused():
    buf = bytearray(build_batch([(b"k", b"v" * 50)] * 3))
    buf[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC"):
        down_convert_batches(bytes(buf), magic=0)


@pytest.mark.parametrize("codec", [0, 1])
def test_refuse_headers_for_storing_produce(codec):
    """Storing produce in a legacy format (storage/legacy_append.py) must not lose headers:
    with refuse_headers a batch holding one is refused, a batch without any converts to the
    same bytes as without the flag."""
    plain = build_batch([Record(i, 1_700_000_000_000 + i, b"k%d" % i, b"v" * 30) for i in range(3)],
                        compression=Compression(codec))
    with_header = build_batch([Record(0, 1, b"k", b"v"), Record(1, 2, b"k", b"v", (("h", b"x"),))],
                              compression=Compression(codec))
    for magic in (0, 1):
        assert down_convert_batches(plain, magic=magic, refuse_headers=True) == \
            down_convert_batches(plain, magic=magic)
        assert down_convert_batches(with_header, magic=magic)  # fetch: headers dropped
        with pytest.raises(CorruptRecordError):
            down_convert_batches(plain + with_header, magic=magic, refuse_headers=True)
