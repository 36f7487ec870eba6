"""SegmentList: floor search and the one read loop shared by PartitionLog and LogReader."""

from __future__ import annotations

import os

import pytest

from appliance.records.batch import decode_records
from appliance.storage.segment import LogSegment
from appliance.storage.segment_list import SegmentList, SegmentVanished
from tests.storage.conftest import batch, cfg


def _segments(tmp_path, bases_and_counts):
    """Real segments: each base gets ``count`` single-record batches."""
    d = str(tmp_path / "t-0")
    os.makedirs(d, exist_ok=True)
    segs = []
    for base, count in bases_and_counts:
        seg = LogSegment.open(d, base, cfg(), create=True)
        for off in range(base, base + count):
            b = batch(n=1, base_offset=off)
            seg.append(memoryview(b), [0], [len(b)], [off], [1_000], 0)
        segs.append(seg)
    return segs


def test_floor_index():
    class S:
        def __init__(self, b):
            self.base_offset = b
    sl = SegmentList([S(0), S(10), S(25)])
    assert sl.bases == [0, 10, 25]
    assert [sl.floor_index(o) for o in (0, 9, 10, 24, 25, 10**9)] == [0, 0, 1, 1, 2, 2]
    assert sl.floor_index(-5) == 0  # below every base: the first segment
    assert SegmentList().bases == [] and len(SegmentList()) == 0


def test_read_walks_into_the_next_segment_and_respects_the_bound(tmp_path):
    segs = _segments(tmp_path, [(0, 3), (3, 3), (6, 2)])
    sl = SegmentList(segs)
    s = sl.read(1, 1 << 20, bound=8)
    assert (s.segment_base, s.first_offset) == (0, 1)
    assert [r.offset for r in decode_records(os.pread(s.fd, s.length, s.position))] == [1, 2]
    s = sl.read(4, 1 << 20, bound=5)  # batches at or past the bound are not returned
    assert [r.offset for r in decode_records(os.pread(s.fd, s.length, s.position))] == [4]
    assert sl.read(6, 1 << 20, bound=6) is None
    assert sl.read(8, 1 << 20, bound=100) is None  # past the end
    one = sl.read(0, 1, bound=8)  # smaller than a batch: one batch anyway
    assert one.length == segs[0].size // 3
    assert sl.read(0, 1, bound=8, min_one_batch=False) is None
    for seg in segs:
        seg.close()


def test_prepare_sees_each_segment_and_can_report_it_vanished(tmp_path):
    segs = _segments(tmp_path, [(0, 2), (2, 2)])
    sl = SegmentList(segs)
    seen = []
    sl.read(0, 1 << 20, bound=4, prepare=lambda seg, last: seen.append((seg.base_offset, last)) or True)
    assert seen == [(0, False)]
    seen.clear()
    sl.read(2, 1 << 20, bound=4, prepare=lambda seg, last: seen.append((seg.base_offset, last)) or True)
    assert seen == [(2, True)]
    with pytest.raises(SegmentVanished, match="vanished"):
        sl.read(0, 1 << 20, bound=4, prepare=lambda seg, last: False)
    for seg in segs:
        seg.close()
