"""scan_batches against kafka-python's batch reader and the pure-Python twin."""

from __future__ import annotations

import mmap
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch

from native import ScanResult, ScanStop, scan_batches
from native.batch_layout import (
    ATTRIBUTES_OFFSET,
    BASE_OFFSET_OFFSET,
    CRC_OFFSET,
    HEADER_SIZE,
    LAST_OFFSET_DELTA_OFFSET,
    LENGTH_OFFSET,
    MAGIC_OFFSET,
    RECORDS_COUNT_OFFSET,
)
from native.twins import scan_batches_twin
from tests.native.batches import make_batch, make_log


def assert_same(a: ScanResult, b: ScanResult) -> None:
    assert (a.count, a.stop_position, a.stop_reason) == (b.count, b.stop_position, b.stop_reason)
    for x, y in zip(a[:7], b[:7], strict=True):
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(x, y)


def scan_both(buf, **kw) -> ScanResult:
    """Scan with the kernel, check the twin agrees, return the kernel's result."""
    result = scan_batches(buf, **kw)
    assert_same(result, scan_batches_twin(buf, **kw))
    return result


def test_clean_log_matches_kafka_python() -> None:
    log, batches = make_log(20, records_per_batch=4, value_size=300)
    r = scan_both(log)
    assert (r.count, r.stop_position, r.stop_reason) == (20, len(log), ScanStop.END)
    pos = 0
    for i, raw in enumerate(batches):
        ref = DefaultRecordBatch(raw)
        assert ref.validate_crc()
        assert r.positions[i] == pos
        assert r.base_offsets[i] == ref.base_offset
        assert r.last_offsets[i] == ref.last_offset
        assert r.max_timestamps[i] == ref.max_timestamp
        assert r.sizes[i] == ref.size_in_bytes == len(raw)
        assert r.record_counts[i] == ref.records_count
        pos += len(raw)
    assert r.crc_ok.all()
    assert r.positions.dtype == np.int64 and r.sizes.dtype == np.int32
    assert r.crc_ok.dtype == np.bool_


def test_compressed_batches() -> None:
    b1 = make_batch(0, 10, 200, compression=DefaultRecordBatch.CODEC_GZIP)
    b2 = make_batch(10, 10, 200, compression=DefaultRecordBatch.CODEC_GZIP)
    r = scan_both(b1 + b2)
    assert r.count == 2 and r.stop_reason == ScanStop.END and list(r.last_offsets) == [9, 19]


def test_empty_buffer() -> None:
    r = scan_both(b"")
    assert (r.count, r.stop_position, r.stop_reason) == (0, 0, ScanStop.END)
    assert r.positions.shape == (0,)


@pytest.mark.parametrize("cut", [1, 5, 11, 12, 16, 17, 30, 60, 61, 62])
def test_truncated_inside_last_batch(cut: int) -> None:
    log, batches = make_log(3)
    last_start = len(log) - len(batches[-1])
    r = scan_both(log[:last_start + cut])
    assert (r.count, r.stop_position, r.stop_reason) == (2, last_start, ScanStop.PARTIAL)


def test_truncated_mid_body() -> None:
    log, batches = make_log(3, value_size=500)
    r = scan_both(log[:-100])
    assert r.stop_reason == ScanStop.PARTIAL and r.count == 2


def test_garbage_appended() -> None:
    log, _ = make_log(4)
    garbage = np.random.default_rng(3).integers(0, 256, 1000, dtype=np.uint8).tobytes()
    garbage = b"\x00\x00\x00\x00\x00\x00\x00\x63" + b"\x7f" * 8 + garbage  # magic byte 0x7f
    r = scan_both(log + garbage)
    assert (r.count, r.stop_position, r.stop_reason) == (4, len(log), ScanStop.BAD_HEADER)


def test_zero_filled_tail() -> None:
    log, _ = make_log(4)
    r = scan_both(log + bytes(4096))
    assert (r.count, r.stop_position, r.stop_reason) == (4, len(log), ScanStop.BAD_HEADER)
    # Fewer zeros than the length prefix: we cannot tell it from a partial batch.
    r = scan_both(log + bytes(5))
    assert (r.count, r.stop_position, r.stop_reason) == (4, len(log), ScanStop.PARTIAL)


@pytest.mark.parametrize("where", ["attributes", "crc_field", "body", "last_byte"])
def test_flipped_byte_in_last_batch_is_bad_crc(where: str) -> None:
    log, batches = make_log(5)
    last_start = len(log) - len(batches[-1])
    at = {"attributes": ATTRIBUTES_OFFSET, "crc_field": CRC_OFFSET + 3, "body": HEADER_SIZE + 5,
          "last_byte": len(batches[-1]) - 1}[where]
    corrupt = bytearray(log)
    corrupt[last_start + at] ^= 0x01
    r = scan_both(bytes(corrupt))
    assert (r.count, r.stop_position, r.stop_reason) == (5, last_start, ScanStop.BAD_CRC)
    assert list(r.crc_ok) == [True] * 4 + [False]
    assert not DefaultRecordBatch(bytes(corrupt[last_start:])).validate_crc()
    r = scan_both(bytes(corrupt), verify_crc=False)
    assert (r.count, r.stop_reason) == (5, ScanStop.END) and r.crc_ok.all()


def test_bad_crc_in_the_middle_stops_there() -> None:
    log, batches = make_log(5)
    corrupt = bytearray(log)
    second = len(batches[0])
    corrupt[second + HEADER_SIZE + 2] ^= 0xFF
    r = scan_both(bytes(corrupt))
    assert (r.count, r.stop_position, r.stop_reason) == (2, second, ScanStop.BAD_CRC)


@pytest.mark.parametrize(("field", "value"), [
    (MAGIC_OFFSET, b"\x01"),
    (LENGTH_OFFSET, struct.pack(">i", 48)),
    (LENGTH_OFFSET, struct.pack(">i", -5)),
    (LAST_OFFSET_DELTA_OFFSET, struct.pack(">i", -1)),
    (RECORDS_COUNT_OFFSET, struct.pack(">i", -1)),
    (BASE_OFFSET_OFFSET, struct.pack(">q", -3)),
])
def test_bad_header_fields(field: int, value: bytes) -> None:
    log, batches = make_log(3)
    third = len(log) - len(batches[-1])
    corrupt = bytearray(log)
    corrupt[third + field:third + field + len(value)] = value
    r = scan_both(bytes(corrupt))
    assert (r.count, r.stop_position, r.stop_reason) == (2, third, ScanStop.BAD_HEADER)


def test_absurd_length_against_max_batch_size() -> None:
    log, batches = make_log(2, value_size=400)
    r = scan_both(log, max_batch_size=len(batches[0]) - 1)
    assert (r.count, r.stop_reason) == (0, ScanStop.BAD_HEADER)
    r = scan_both(log, max_batch_size=len(batches[0]))
    assert (r.count, r.stop_reason) == (2, ScanStop.END)


def test_offsets_going_backwards() -> None:
    b0 = make_batch(10, 3)  # offsets 10..12
    overlapping = make_batch(12, 3)
    r = scan_both(b0 + overlapping)
    assert (r.count, r.stop_position, r.stop_reason) == (1, len(b0), ScanStop.OFFSET_BACKWARDS)
    r = scan_both(b0 + make_batch(13, 3))  # exactly contiguous is fine
    assert r.count == 2 and r.stop_reason == ScanStop.END
    r = scan_both(b0 + make_batch(20, 3))  # gaps (compaction) are fine
    assert r.count == 2 and r.stop_reason == ScanStop.END


def test_expect_offset() -> None:
    b0 = make_batch(10, 3)
    assert scan_both(b0, expect_offset=10).count == 1
    assert scan_both(b0, expect_offset=0).count == 1
    r = scan_both(b0, expect_offset=11)
    assert (r.count, r.stop_position, r.stop_reason) == (0, 0, ScanStop.OFFSET_BACKWARDS)


def test_max_batches_and_resume() -> None:
    log, _ = make_log(10)
    r = scan_both(log, max_batches=4)
    assert (r.count, r.stop_reason) == (4, ScanStop.LIMIT)
    rest = scan_both(log, start=r.stop_position, expect_offset=int(r.last_offsets[-1]) + 1)
    assert rest.count == 6 and rest.stop_reason == ScanStop.END
    full = scan_batches(log)
    np.testing.assert_array_equal(np.concatenate([r.positions, rest.positions]), full.positions)
    r = scan_both(log, max_batches=0)
    assert (r.count, r.stop_position, r.stop_reason) == (0, 0, ScanStop.LIMIT)
    r = scan_both(log, max_batches=10)  # exactly all: a clean end is reported
    assert (r.count, r.stop_reason) == (10, ScanStop.END)


def test_start_and_end_in_the_middle() -> None:
    log, batches = make_log(6)
    sizes = [len(b) for b in batches]
    start = sum(sizes[:2])
    end = sum(sizes[:5])
    r = scan_both(log, start=start, end=end)
    assert (r.count, r.stop_position, r.stop_reason) == (3, end, ScanStop.END)
    assert r.positions[0] == start  # positions are absolute
    r = scan_both(log, start=start, end=end - 1)
    assert (r.count, r.stop_position, r.stop_reason) == (2, sum(sizes[:4]), ScanStop.PARTIAL)
    r = scan_both(log, start=start + 1)  # not on a batch boundary
    assert (r.count, r.stop_position) == (0, start + 1)
    assert r.stop_reason in (ScanStop.BAD_HEADER, ScanStop.PARTIAL)


def test_arrays_grow_past_the_initial_guess() -> None:
    # ~90-byte batches: far more per 4 KiB than the wrapper's first allocation assumes.
    log, _ = make_log(500, records_per_batch=1, value_size=5)
    r = scan_both(log)
    assert (r.count, r.stop_reason) == (500, ScanStop.END)
    assert list(r.base_offsets) == list(range(500))
    r = scan_both(log, max_batches=300)
    assert (r.count, r.stop_reason) == (300, ScanStop.LIMIT)


def test_mmap_of_a_real_file(tmp_path: Path) -> None:
    log, batches = make_log(50, records_per_batch=5, value_size=200)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(log + bytes(10_000))  # preallocated-looking zero tail
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        r = scan_batches(mm)
        assert_same(r, scan_batches_twin(mm))
    # The results own their memory: the mmap closed fine and they are still readable.
    assert (r.count, r.stop_position, r.stop_reason) == (50, len(log), ScanStop.BAD_HEADER)
    assert list(r.base_offsets) == list(range(0, 250, 5))


def test_bad_arguments() -> None:
    log, _ = make_log(1)
    with pytest.raises(ValueError):
        scan_batches(log, start=5, end=4)
    with pytest.raises(ValueError):
        scan_batches(log, max_batches=-2)
    with pytest.raises(ValueError):
        scan_batches(log, expect_offset=-7)
    with pytest.raises(ValueError):
        scan_batches(log, max_batch_size=10)
    with pytest.raises(TypeError):
        scan_batches([1, 2, 3])  # type: ignore[arg-type]


_LOG, _BATCHES = make_log(6, records_per_batch=2, value_size=40)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_random_damage_matches_twin(data: st.DataObject) -> None:
    buf = bytearray(_LOG)
    for _ in range(data.draw(st.integers(0, 3))):
        i = data.draw(st.integers(0, len(buf) - 1))
        buf[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(buf)))
    start = data.draw(st.sampled_from([0, len(_BATCHES[0]), 1]))
    start = min(start, cut)
    kw = dict(
        start=start, end=cut, verify_crc=data.draw(st.booleans()),
        max_batches=data.draw(st.integers(-1, 7)), expect_offset=data.draw(st.integers(-1, 5)),
    )
    scan_both(bytes(buf), **kw)


@settings(max_examples=100, deadline=None)
@given(st.binary(min_size=0, max_size=300))
def test_random_bytes_after_valid_log_match_twin(tail: bytes) -> None:
    r = scan_both(_LOG + tail)
    # Whatever follows, the valid prefix is reported unchanged.
    assert r.count >= len(_BATCHES)
    np.testing.assert_array_equal(r.positions[:len(_BATCHES)], scan_batches(_LOG).positions)


# -- legacy entries (magic 0/1, scan_batches(legacy=True)) -----------------------------------

def _legacy_log() -> tuple[bytes, list[tuple[int, int]]]:
    """A mixed segment as a topic switched formats mid-life writes it: magic 0 plain and gzip,
    magic 1 plain and snappy, then a v2 batch. Returns it and (first, last) offset per entry."""
    from appliance.records.legacy import build_message_set
    from appliance.records.record_types import Compression, Record

    parts, spans, off = [], [], 0
    for magic, codec, n in ((0, Compression.NONE, 2), (0, Compression.GZIP, 3),
                            (1, Compression.NONE, 2), (1, Compression.SNAPPY, 4)):
        recs = [Record(off + i, 1_700_000_000_000 + off + i, b"k%d" % (off + i), b"v" * 30)
                for i in range(n)]
        parts.append(build_message_set(recs, magic=magic, compression=codec))
        if codec == Compression.NONE:
            spans += [(off + i, off + i) for i in range(n)]
        else:
            spans.append((off, off + n - 1))
        off += n
    parts.append(make_batch(off, n_records=2, value_size=30))
    spans.append((off, off + 1))
    return b"".join(parts), spans


_LEGACY_LOG, _LEGACY_SPANS = _legacy_log()


def test_legacy_entries_walked_only_when_asked() -> None:
    r = scan_both(_LEGACY_LOG, legacy=True, expect_offset=0)
    assert r.stop_reason == ScanStop.END and r.count == len(_LEGACY_SPANS)
    assert list(zip(r.base_offsets.tolist(), r.last_offsets.tolist(), strict=True)) == _LEGACY_SPANS
    assert r.crc_ok.all()
    # magic 0 has no timestamp; magic 1 entries carry theirs (a wrapper: its largest)
    assert r.max_timestamps[0] == -1 and r.max_timestamps[3] == 1_700_000_000_000 + 5
    assert r.max_timestamps[5] == 1_700_000_000_000 + 10
    assert r.record_counts.tolist() == [hi - lo + 1 for lo, hi in _LEGACY_SPANS]
    plain = scan_both(_LEGACY_LOG)
    assert (plain.count, plain.stop_reason) == (0, ScanStop.BAD_HEADER)


def test_legacy_bad_crc_is_crc32_and_stops_there() -> None:
    buf = bytearray(_LEGACY_LOG)
    r0 = scan_batches(_LEGACY_LOG, legacy=True)
    p = int(r0.positions[2])  # the magic 0 gzip wrapper's compressed value
    buf[p + int(r0.sizes[2]) - 3] ^= 0x40
    r = scan_both(bytes(buf), legacy=True)
    assert (r.count, r.stop_reason, r.stop_position) == (3, ScanStop.BAD_CRC, p)
    assert not r.crc_ok[2]


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_legacy_random_damage_matches_twin(data: st.DataObject) -> None:
    buf = bytearray(_LEGACY_LOG)
    for _ in range(data.draw(st.integers(0, 3))):
        i = data.draw(st.integers(0, len(buf) - 1))
        buf[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(buf)))
    start = min(data.draw(st.sampled_from([0, 1, int(scan_batches(_LEGACY_LOG, legacy=True).positions[2])])), cut)
    scan_both(bytes(buf), start=start, end=cut, verify_crc=data.draw(st.booleans()),
              max_batches=data.draw(st.integers(-1, 9)), expect_offset=data.draw(st.integers(-1, 4)),
              legacy=True)


def test_legacy_wrapper_after_a_huge_offset_gap_caps_its_estimated_count() -> None:
    """A compacted legacy log can jump from offset 0 to 2^56: the wrapper's count, estimated
    from the gap, is capped at int32's maximum in the kernel and the twin alike."""
    from appliance.records.legacy import build_message_set
    from appliance.records.record_types import Compression, Record

    far = 1 << 56
    buf = (build_message_set([Record(0, 1, b"a", b"x")], magic=1, compression=Compression.NONE)
           + build_message_set([Record(far, 2, b"b", b"y")], magic=1, compression=Compression.GZIP))
    r = scan_both(buf, legacy=True)
    assert r.stop_reason == ScanStop.END and r.count == 2
    assert r.last_offsets.tolist() == [0, far] and r.record_counts.tolist() == [1, (1 << 31) - 1]
