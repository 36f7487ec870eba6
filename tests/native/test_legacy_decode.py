"""The legacy (magic 0/1) read kernels against their twins, and the mixed-entry decode of the
Spark source against the project's Python legacy reader.

Message sets are what a pre-0.11 topic stores: real v2 batches from the batch builder turned
into magic 0/1 messages with their offsets by the down-converter (every legacy codec, null keys
and values, gapped offsets as compaction leaves them, LogAppendTime), alone and mixed with v2
batches as in a segment whose topic changed format. Then random mutations, where the kernels
and the twins must report the same first error or the same rows.
"""

from __future__ import annotations

import random
import struct
import zlib

import numpy as np
import pytest

from appliance.errors import CorruptRecordError
from appliance.records.batch import build_batch, read_header
from appliance.records.compression import compress, decompress
from appliance.records.down_convert import down_convert_batches
from appliance.records.legacy import iter_message_set
from appliance.records.record_types import Compression, Record, TimestampType
from native import legacy_layout as LL
from native.entry_runs import entry_runs
from native.legacy_decode import (
    LEGACY_ERRORS,
    LEGACY_OK,
    LEGACY_PARTIAL,
    decode_legacy,
    scan_legacy,
)
from native.legacy_decode_twin import decode_legacy_twin, entry_runs_twin, scan_legacy_twin
from spark.arrow_reader import decode_entries

_FIELDS = ("offsets", "timestamps_us", "timestamp_types", "key_offsets", "key_valid", "key_data",
           "value_offsets", "value_valid", "value_data", "header_offsets")
_LEGACY = (Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4)


def _records(rng: random.Random, base: int, n: int) -> list[Record]:
    out, off = [], base
    for _ in range(n):
        key = None if rng.random() < 0.3 else rng.randbytes(rng.randint(0, 30))
        value = None if rng.random() < 0.1 else rng.randbytes(rng.randint(0, 200))
        out.append(Record(off, 1_700_000_000_000 + rng.randint(-5, 500), key, value))
        off += rng.choice((1, 1, 1, 3))  # gaps, as compaction leaves them
    return out


def _v2(rng: random.Random, base: int, codecs=_LEGACY, lat_at: int = 2) -> tuple[list[bytes], int]:
    out = []
    for i, codec in enumerate(codecs):
        recs = _records(rng, base, rng.randint(1, 40))
        kw = {"timestamp_type": TimestampType.LOG_APPEND_TIME} if i == lat_at else {}
        out.append(build_batch(recs, base_offset=base, compression=codec, **kw))
        base = recs[-1].offset + 1
    return out, base


def _legacy_set(seed: int, magic: int) -> bytes:
    batches, _ = _v2(random.Random(seed), 0, (*_LEGACY, Compression.NONE, Compression.GZIP))
    return down_convert_batches(b"".join(batches), magic=magic)


def _sections(buf: bytes, scan):
    """decode_legacy's arguments as spark.legacy_entries prepares them, every wrapper inflated."""
    parts, rows, at = [], [], 0
    for i in range(scan.count):
        pos, size = int(scan.positions[i]), int(scan.sizes[i])
        codec = int(scan.attributes[i]) & LL.CODEC_MASK
        raw = buf[pos:pos + size]
        inner = 0
        if codec:
            vs = int(scan.value_starts[i])
            raw = decompress(codec, buf[vs:vs + int(scan.value_sizes[i])])
            inner = 1
        parts.append(raw)
        rows.append((at, at + len(raw), inner, int(scan.offsets[i]), int(scan.magics[i]),
                     int(scan.timestamps[i]),
                     1 if int(scan.attributes[i]) & LL.TIMESTAMP_TYPE_BIT else 0))
        at += len(raw)
    cols = list(zip(*rows, strict=True))
    types = (np.int64, np.int64, np.uint8, np.int64, np.int64, np.int64, np.uint8)
    return (np.frombuffer(b"".join(parts), np.uint8),
            [np.array(c, t) for c, t in zip(cols, types, strict=True)])


def _same(a, b) -> None:
    assert a.rows == b.rows
    for f in _FIELDS:
        assert np.array_equal(np.asarray(getattr(a, f)), np.asarray(getattr(b, f))), f


def _same_scan(a, b) -> None:
    assert (a.count, a.stop_position, a.status) == (b.count, b.stop_position, b.status)
    for x, y in zip(a[:8], b[:8], strict=True):
        assert np.array_equal(x, y)


def _rows(out) -> list[tuple]:
    def col(offs, valid, data, i):
        return bytes(data[offs[i]:offs[i + 1]]) if valid[i] else None

    return [(int(out.offsets[i]), int(out.timestamps_us[i]), int(out.timestamp_types[i]),
             col(out.key_offsets, out.key_valid, out.key_data, i),
             col(out.value_offsets, out.value_valid, out.value_data, i))
            for i in range(out.rows)]


def _expected(buf: bytes) -> list[tuple]:
    """Rows from the project's Python reader of legacy sets (magic 0: no timestamp type)."""
    return [(m.offset, m.timestamp * 1000,
             -1 if m.magic == 0 else 1 if m.timestamp_type == TimestampType.LOG_APPEND_TIME else 0,
             m.key, m.value) for m in iter_message_set(buf)]


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("seed", [1, 2])
def test_real_sets_agree_with_the_twins_and_the_reader(seed, magic):
    buf = _legacy_set(seed, magic)
    scan, tscan = scan_legacy(buf), scan_legacy_twin(buf)
    _same_scan(scan, tscan)
    assert scan.status == LEGACY_OK and scan.stop_position == len(buf)
    assert entry_runs(buf) == entry_runs_twin(buf) == [(0, len(buf), True)]
    work, args = _sections(buf, scan)
    out, status, bad = decode_legacy(work, *args, 0, 1 << 62, True)
    twin, tstatus, tbad = decode_legacy_twin(work, *args, 0, 1 << 62, True)
    assert (status, bad) == (tstatus, tbad) == (LEGACY_OK, -1)
    _same(out, twin)
    want = _expected(buf)
    assert _rows(out) == want
    assert {r[2] for r in want} == ({-1} if magic == 0 else {0, 1})
    # A window of offsets keeps exactly the rows inside it.
    lo, hi = want[5][0], want[-5][0]
    out, _, _ = decode_legacy(work, *args, lo, hi, False)
    twin, _, _ = decode_legacy_twin(work, *args, lo, hi, False)
    _same(out, twin)
    assert _rows(out) == [r for r in want if lo <= r[0] < hi]


def test_mixed_segment_decodes_like_its_parts():
    """v2 batches, then magic 1, then magic 0 sets, then v2 again: one buffer, as a segment of
    a topic whose message.format.version changed holds them."""
    rng = random.Random(5)
    first, base = _v2(rng, 0, (Compression.NONE, Compression.ZSTD))
    old1, base = _v2(rng, base)
    old0, base = _v2(rng, base)
    last, _ = _v2(rng, base, (Compression.GZIP,))
    m1 = down_convert_batches(b"".join(old1), magic=1)
    m0 = down_convert_batches(b"".join(old0), magic=0)
    v2a, v2b = b"".join(first), b"".join(last)
    buf = np.frombuffer(v2a + m1 + m0 + v2b, np.uint8)
    cuts = np.cumsum([0, len(v2a), len(m1), len(m0), len(v2b)])
    runs = entry_runs(buf)
    assert runs == entry_runs_twin(buf)
    assert runs == [(int(cuts[0]), int(cuts[1]), False), (int(cuts[1]), int(cuts[3]), True),
                    (int(cuts[3]), int(cuts[4]), False)]
    got = decode_entries(buf, 0, len(buf), "seg.log", 0, 0, 1 << 62, True)
    assert got.stop_why is None and got.next_offset == _last_offset(last) + 1
    assert len(got.outputs) == 3
    assert _rows(got.outputs[1]) == _expected(m1 + m0)
    # The v2 parts decode as they do alone.
    for part, out in ((v2a, got.outputs[0]), (v2b, got.outputs[2])):
        alone = decode_entries(np.frombuffer(part, np.uint8), 0, len(part), "x", 0, 0, 1 << 62,
                               True)
        assert _rows(out) == _rows(alone.outputs[0]) and len(alone.outputs) == 1
    offsets = [r[0] for o in got.outputs for r in _rows(o)]
    assert offsets == sorted(set(offsets))


def _last_offset(batches: list[bytes]) -> int:
    h = read_header(batches[-1])
    return h.base_offset + h.last_offset_delta


def test_runs_of_short_or_garbled_tails():
    v2 = build_batch([Record(0, 1, b"k", b"v")])
    m = down_convert_batches(build_batch([Record(1, 1, b"k", b"v")], base_offset=1), magic=1)
    for buf in (v2 + m[:10], m + v2[:15], m + b"\x00" * 30, v2 + m + v2 + m, m[:5], b""):
        assert entry_runs(buf) == entry_runs_twin(buf), buf


def test_partial_last_message_and_crc_mismatch():
    buf = _legacy_set(3, 1)
    scan = scan_legacy(buf)
    cut = int(scan.positions[-1]) + 20
    got = decode_entries(np.frombuffer(buf[:cut], np.uint8), 0, cut, "answer", 0, 0, 1 << 62,
                         False)
    assert got.partial and got.stop_why == LEGACY_ERRORS[LEGACY_PARTIAL]
    assert got.stop_position == int(scan.positions[-1])
    assert got.next_offset == int(scan.offsets[-2]) + 1
    assert sum(o.rows for o in got.outputs) == len(_expected(buf[:int(scan.positions[-1])]))
    # One flipped byte in a message's value: its CRC32 no longer matches; nothing past it is read.
    bad = bytearray(buf)
    k = int(np.flatnonzero((scan.attributes & LL.CODEC_MASK) == 0)[1])
    bad[int(scan.positions[k]) + int(scan.sizes[k]) - 1] ^= 0x40
    got = decode_entries(np.frombuffer(bytes(bad), np.uint8), 0, len(bad), "seg.log", 100, 0,
                         1 << 62, False)
    assert not got.partial and got.stop_why == "CRC32 mismatch"
    assert got.stop_position == int(scan.positions[k])


def _wrapper(magic: int, codec: int, offset: int, inner: bytes) -> bytes:
    header = LL.HEADER_V1 if magic else LL.HEADER_V0
    payload = compress(codec, inner, legacy_lz4_checksum=magic == 0)
    body = struct.pack(">ii", -1, len(payload)) + payload
    fields = [offset, header.size - LL.LOG_OVERHEAD + len(body), 0, magic, codec]
    msg = bytearray(header.pack(*fields, *([1_700_000_000_000] if magic else [])) + body)
    struct.pack_into(">I", msg, LL.CRC_OFFSET, zlib.crc32(msg[LL.MAGIC_OFFSET:]))
    return bytes(msg)


@pytest.mark.parametrize("magic", [0, 1])
def test_inner_crc_mismatch_inside_a_valid_wrapper(magic):
    """The wrapper's CRC32 is right but an inner message's is not: the decode names it."""
    plain = down_convert_batches(build_batch([Record(i, 1_700_000_000_000, b"k", b"v%d" % i)
                                              for i in range(4)]), magic=magic)
    if magic:  # inner offsets relative to the first
        plain = b"".join(struct.pack(">q", i) + m[8:] for i, m in enumerate(_split(plain)))
    inner = bytearray(plain)
    inner[-1] ^= 0x01
    good = _wrapper(magic, 1, 3, plain)
    assert _expected(good) == [(i, (1_700_000_000_000 if magic else -1) * 1000,
                                0 if magic else -1, b"k", b"v%d" % i) for i in range(4)]
    buf = np.frombuffer(_wrapper(magic, 1, 3, bytes(inner)), np.uint8)
    with pytest.raises(CorruptRecordError, match=r"seg\.log: message at byte 7 \(offset 3\): "
                       "CRC32 mismatch"):
        decode_entries(buf, 0, len(buf), "seg.log", 7, 0, 1 << 62, False)


def _split(message_set: bytes) -> list[bytes]:
    out, p = [], 0
    while p < len(message_set):
        (size,) = struct.unpack_from(">i", message_set, 8 + p)
        out.append(message_set[p:p + LL.LOG_OVERHEAD + size])
        p += LL.LOG_OVERHEAD + size
    return out


def _shifted(message_set: bytes, by: int) -> bytes:
    """The same messages with their top-level offsets raised by ``by`` (CRCs do not cover the
    offset), so they can follow another set."""
    return b"".join(struct.pack(">q", struct.unpack_from(">q", m)[0] + by) + m[8:]
                    for m in _split(message_set))


def test_mutations_give_the_same_first_error():
    rng = random.Random(17)
    m0, m1 = _legacy_set(7, 0), _legacy_set(8, 1)
    # Mixed magics in one run (a topic upgraded from 0.8 to 0.10), and v2 batches around legacy
    # messages (one upgraded to 0.11+): the run split must agree too.
    v2, _ = _v2(random.Random(9), 10_000, (Compression.NONE, Compression.GZIP))
    sets = [m0, m1, m0 + _shifted(m1, 5_000), b"".join(v2) + _shifted(m1, 20_000) + b"".join(v2)]
    seen_scan, seen_decode = set(), set()
    for _trial in range(1200):
        buf = bytearray(rng.choice(sets))
        for _ in range(rng.randint(1, 3)):
            buf[rng.randrange(len(buf))] = rng.randrange(256)
        buf = bytes(buf)
        runs = entry_runs(buf)
        assert runs == entry_runs_twin(buf)
        for start, end, legacy in runs:
            if legacy:
                scan, tscan = scan_legacy(buf, start, end), scan_legacy_twin(buf, start, end)
                _same_scan(scan, tscan)
                seen_scan.add(scan.status)
    for _trial in range(1200):
        # Mutate the inflated sections (the wrappers' CRCs do not cover what the kernel reads).
        buf = rng.choice(sets[:3])
        work0, args = _sections(buf, scan_legacy(buf))
        work = work0.copy()
        for _ in range(rng.randint(1, 3)):
            work[rng.randrange(len(work))] = rng.randrange(256)
        if rng.random() < 0.3:  # unchecked top-level sections as well: the kernel's own checks
            args[2] = np.ones_like(args[2]) if rng.random() < 0.5 else args[2]
        out, status, bad = decode_legacy(work, *args, 0, 1 << 62, True)
        twin, tstatus, tbad = decode_legacy_twin(work, *args, 0, 1 << 62, True)
        assert (status, bad) == (tstatus, tbad)
        if status == LEGACY_OK:
            _same(out, twin)
        else:
            assert status in LEGACY_ERRORS and out is None and twin is None
        seen_decode.add(status)
    assert LEGACY_OK in seen_scan and len(seen_scan) >= 5
    assert LEGACY_OK in seen_decode and len(seen_decode) >= 5
