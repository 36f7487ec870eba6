"""The record-walk kernel against its pure-Python twin (appliance.records.batch._walk_records)."""

import random

import pytest

from appliance.errors import InvalidRecordError
from appliance.records.batch import HEADER_SIZE, build_batch, read_header
from appliance.records.batch import _walk_records as python_walk
from appliance.records.record_types import Record
from native.records_walk import walk_records


def _records_of(batch: bytes):
    h = read_header(batch)
    return batch, HEADER_SIZE, len(batch), h.records_count


def _python_ok(data, start, end, count):
    try:
        return True, python_walk(data, start, end, count)
    except InvalidRecordError:
        return False, None


@pytest.mark.parametrize("n", [1, 8, 300])
def test_valid_batches_agree(n):
    rng = random.Random(n)
    recs = []
    for _ in range(n):
        key = None if rng.random() < 0.3 else rng.randbytes(rng.randint(0, 300))
        value = None if rng.random() < 0.1 else rng.randbytes(rng.randint(0, 2000))
        headers = tuple((f"h{j}", None if rng.random() < 0.2 else rng.randbytes(rng.randint(0, 50)))
                        for j in range(rng.randint(0, 3)))
        recs.append((key, value, headers))
    data, start, end, count = _records_of(build_batch(recs))
    status, index, last = walk_records(data, start, end, count)
    assert (status, index) == (0, count)
    assert last == python_walk(data, start, end, count) == n - 1


def test_mutations_agree_with_the_twin():
    rng = random.Random(7)
    base = build_batch([(b"k%d" % i, b"v" * rng.randint(0, 200), (("h", b"x"),)) for i in range(40)])
    data, start, end, count = _records_of(base)
    disagreements = 0
    for _trial in range(3000):
        buf = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            buf[rng.randrange(start, end)] = rng.randrange(256)
        cut = end if rng.random() < 0.8 else rng.randrange(start, end)
        n = count if rng.random() < 0.9 else rng.randint(0, count + 3)
        ok_py, last_py = _python_ok(buf, start, cut, n)
        status, _, last = walk_records(buf, start, cut, n)
        if ok_py != (status == 0) or (ok_py and last_py != last):
            disagreements += 1
    assert disagreements == 0


def test_each_problem_is_reported():
    good = build_batch([(b"k", b"v")] * 10)
    data, start, end, count = _records_of(good)
    assert walk_records(data, start, end, count + 1)[0] == 1          # too few records
    assert walk_records(data, start, end, count - 1)[0] == 11         # trailing bytes
    assert walk_records(data, start, end - 1, count)[0] != 0          # truncated
    with pytest.raises(ValueError):
        walk_records(data, start, len(data) + 1, count)


def _word_path_batch(rng: random.Random) -> bytes:
    """Records whose first fields take 1-6 byte varints: offsetDeltas past 63 and gaps in them,
    timestamp deltas from minus seconds to decades, keys null or of 0-200 bytes (the 8-byte read
    of timestampDelta, offsetDelta and key length, and its fall-back when they do not fit)."""
    recs, offset, ts = [], 0, 1_700_000_000_000
    for _ in range(rng.randint(1, 150)):
        offset += rng.choice([1, 1, 1, 2, 63, 64, 200])
        ts += rng.choice([0, 1, 63, 64, 8191, 8192, 300_000, -5_000, 10**12])  # 10**12: 6 bytes
        key = None if rng.random() < 0.3 else rng.randbytes(rng.choice([0, 1, 63, 64, 200]))
        recs.append(Record(offset, ts, key, rng.randbytes(rng.randint(0, 120))))
    return build_batch(recs, base_offset=0, base_timestamp=1_700_000_000_000)


def _record_starts(data: bytes, start: int, end: int) -> list[int]:
    """Where each record of a valid batch begins (its length varint)."""
    out, pos = [], start
    while pos < end:
        out.append(pos)
        raw, shift = 0, 0
        while True:
            b = data[pos]
            pos += 1
            raw |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                break
        pos += (raw >> 1) ^ -(raw & 1)
    return out


def test_first_fields_read_by_word_agree_with_the_twin():
    """Valid records, then each damaged in its first 10 bytes (where the word read applies):
    the kernel and the twin agree on every one."""
    rng = random.Random(11)
    disagreements = []
    for trial in range(400):
        data, start, end, count = _records_of(_word_path_batch(rng))
        status, _, last = walk_records(data, start, end, count)
        assert status == 0 and last == python_walk(data, start, end, count)
        starts = _record_starts(data, start, end)
        assert len(starts) == count
        for _ in range(10):
            buf = bytearray(data)
            at = rng.choice(starts) + rng.randrange(10)
            for k in range(rng.randint(1, 3)):
                if at + k < end:
                    buf[at + k] = rng.choice([0x00, 0x01, 0x7F, 0x80, 0x81, 0xFF, rng.randrange(256)])
            n = count if rng.random() < 0.9 else rng.randint(0, count + 2)
            if rng.random() < 0.5:  # bytes after the records, which the 8-byte read may see
                buf += bytes(rng.choice([0x00, 0x80, 0xFF]) for _ in range(rng.randint(1, 9)))
            ok_py, last_py = _python_ok(buf, start, end, n)
            status, _, last = walk_records(buf, start, end, n)
            if ok_py != (status == 0) or (ok_py and last_py != last):
                disagreements.append((trial, at))
    assert not disagreements, disagreements[:5]
