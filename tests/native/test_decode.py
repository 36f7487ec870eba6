"""The record-decode kernel (native.decode) against its pure-Python twin (native.decode_twin).

Batches are real v2 batches from the project's batch builder: every codec (inflated as the
Spark reader inflates them), headers, null keys and values, log-append time, idempotent
producers' batches, a control batch; then random mutations, where both must report the same
first error (status and batch) or the same rows.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from appliance.records import batch_layout as L
from appliance.records.batch import build_batch, read_header
from appliance.records.compression import decompress
from appliance.records.record_types import Compression, Record, TimestampType
from native.decode import DECODE_ERRORS, DECODE_OK, decode_records
from native.decode_twin import decode_records_twin

_FIELDS = ("offsets", "timestamps_us", "timestamp_types", "key_offsets", "key_valid", "key_data",
           "value_offsets", "value_valid", "value_data")
_HEADER_FIELDS = ("header_offsets", "hkey_offsets", "hkey_data", "hvalue_offsets",
                  "hvalue_valid", "hvalue_data")


def _records(rng: random.Random, base: int, n: int) -> list[Record]:
    out = []
    for i in range(n):
        key = None if rng.random() < 0.3 else rng.randbytes(rng.randint(0, 40))
        value = None if rng.random() < 0.1 else rng.randbytes(rng.randint(0, 300))
        headers = tuple((f"h{j}", None if rng.random() < 0.2 else rng.randbytes(rng.randint(0, 9)))
                        for j in range(rng.randint(0, 3)))
        out.append(Record(base + 2 * i, 1_700_000_000_000 + rng.randint(-5, 500), key, value,
                          headers))
    return out


def _batches(seed: int) -> list[bytes]:
    rng = random.Random(seed)
    out, base = [], 0
    for i, codec in enumerate([*Compression, Compression.NONE]):
        recs = _records(rng, base, rng.randint(1, 60))
        kw = {}
        if i % 2:
            kw = {"producer_id": 4000 + i, "producer_epoch": 0, "base_sequence": 10 * i}
        if i == 3:
            kw["timestamp_type"] = TimestampType.LOG_APPEND_TIME
        out.append(build_batch(recs, base_offset=base, compression=codec, **kw))
        base = recs[-1].offset + 1
    # A control batch (commit marker) decodes as a record with a key and a value.
    out.append(build_batch([Record(base, 1_700_000_000_000, b"\x00\x00\x00\x01",
                                   b"\x00\x00\x00\x00\x00\x07")],
                           base_offset=base, producer_id=77, producer_epoch=0,
                           is_transactional=True, is_control=True))
    return out


def _sections(batches: list[bytes]) -> tuple[np.ndarray, list[np.ndarray]]:
    """The kernel's arguments as the Spark reader prepares them (compressed ones inflated)."""
    parts, starts, ends, rows = [], [], [], []
    at = 0
    for b in batches:
        h = read_header(b)
        section = b[L.HEADER_SIZE:]
        codec = h.attributes & L.COMPRESSION_MASK
        if codec:
            section = decompress(codec, section)
        parts.append(section)
        starts.append(at)
        at += len(section)
        ends.append(at)
        rows.append((h.base_offset, h.base_timestamp, h.max_timestamp,
                     1 if h.attributes & L.TIMESTAMP_TYPE_BIT else 0, h.records_count))
    cols = list(zip(*rows, strict=True))
    return np.frombuffer(b"".join(parts), np.uint8), [
        np.array(starts, np.int64), np.array(ends, np.int64), np.array(cols[0], np.int64),
        np.array(cols[1], np.int64), np.array(cols[2], np.int64), np.array(cols[3], np.uint8),
        np.array(cols[4], np.int32)]


def _same(a, b, headers: bool) -> None:
    assert a.rows == b.rows
    for f in _FIELDS + (_HEADER_FIELDS if headers else ()):
        x, y = getattr(a, f), getattr(b, f)
        assert np.array_equal(np.asarray(x), np.asarray(y)), f


@pytest.mark.parametrize("headers", [False, True])
@pytest.mark.parametrize("seed", [1, 2])
def test_real_batches_agree(seed, headers):
    batches = _batches(seed)
    buf, args = _sections(batches)
    out, status, bad = decode_records(buf, *args, 0, 1 << 62, headers)
    twin, tstatus, tbad = decode_records_twin(buf, *args, 0, 1 << 62, headers)
    assert (status, bad) == (tstatus, tbad) == (DECODE_OK, -1)
    _same(out, twin, headers)
    assert out.rows == sum(read_header(b).records_count for b in batches)
    assert 1 in out.timestamp_types and 0 in out.timestamp_types


def test_offset_window_agrees():
    buf, args = _sections(_batches(3))
    total = int(args[-1].sum())
    for lo, hi in [(0, 1), (5, 40), (17, 18), (30, 10_000), (10_000, 20_000)]:
        out, status, _ = decode_records(buf, *args, lo, hi, True)
        twin, tstatus, _ = decode_records_twin(buf, *args, lo, hi, True)
        assert status == tstatus == DECODE_OK
        _same(out, twin, True)
        assert all(lo <= o < hi for o in out.offsets) and out.rows <= total


def test_many_headers_grow_the_output():
    recs = [Record(i, 1_700_000_000_000, b"k", b"v", tuple((f"h{j}", b"x") for j in range(40)))
            for i in range(10)]
    buf, args = _sections([build_batch(recs)])
    out, status, _ = decode_records(buf, *args, 0, 100, True)
    twin, _, _ = decode_records_twin(buf, *args, 0, 100, True)
    assert status == DECODE_OK and len(out.hkey_offsets) == 401
    _same(out, twin, True)


def test_mutations_give_the_same_first_error():
    buf0, args = _sections(_batches(4)[:4])
    rng = random.Random(11)
    seen = set()
    for _trial in range(1500):
        buf = buf0.copy()
        for _ in range(rng.randint(1, 3)):
            buf[rng.randrange(len(buf))] = rng.randrange(256)
        a = [x.copy() for x in args]
        if rng.random() < 0.1:
            a[-1][rng.randrange(len(a[-1]))] += rng.choice((-1, 1))
        headers = rng.random() < 0.5
        out, status, bad = decode_records(buf, *a, 0, 1 << 62, headers)
        twin, tstatus, tbad = decode_records_twin(buf, *a, 0, 1 << 62, headers)
        assert (status, bad) == (tstatus, tbad)
        if status == DECODE_OK:
            _same(out, twin, headers)
        else:
            assert status in DECODE_ERRORS and out is None and twin is None
        seen.add(status)
    # The mutations reach the OK path and several distinct errors.
    assert DECODE_OK in seen and len(seen) >= 4


def test_sections_outside_the_buffer_are_refused_not_read():
    """The kernel copies keys and values with an unchecked memcpy (native.intrinsics.copy_bytes):
    a section that a caller places past the end of the buffer, or output areas smaller than
    the sections, must stop it with status 9 before any copy, not read or write out of
    bounds."""
    from native.decode import _decode, row_columns

    buf, args = _sections(_batches(5))
    starts, ends = args[0], args[1]
    assert status_of(buf, args) == DECODE_OK
    past = [starts.copy(), ends.copy()] + args[2:]
    past[1][-1] = len(buf) + 4096  # the last section runs past the buffer
    out, status, bad = decode_records(buf, *past, 0, 1 << 62, False)
    assert out is None and status == 9 and bad == len(ends) - 1 and 9 in DECODE_ERRORS
    # Key and value areas smaller than the first section: refused before its first copy.
    rows = int(args[-1].sum())
    cols = row_columns(rows, int(ends[0] - starts[0]) - 1)
    none = np.zeros(1, np.int32)
    n, nh, status, bad = _decode(buf, *args, 0, 1 << 62, False, *cols, none, none,
                                 np.zeros(0, np.uint8), none, np.zeros(0, np.uint8),
                                 np.zeros(0, np.uint8))
    assert (n, status, bad) == (0, 9, 0)


def status_of(buf, args) -> int:
    return decode_records(buf, *args, 0, 1 << 62, False)[1]
