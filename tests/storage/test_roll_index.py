"""Rolling (segment.bytes, segment.ms + jitter, full index), index lookups and trimming."""

from __future__ import annotations

import os

from appliance.storage.offset_index import OffsetIndex
from appliance.storage.time_index import TimeIndex

from .conftest import all_records, batch, cfg, open_log


def test_roll_on_segment_bytes(log_path):
    b = batch(n=2, value_size=100)
    lg = open_log(log_path, cfg(segment_bytes=len(b) * 3))
    for _ in range(7):
        lg.append(b)
    segs = lg.segments()
    assert [s.base_offset for s in segs] == [0, 6, 12]
    assert all(s.segment.size <= len(b) * 3 for s in segs)
    assert sorted(os.listdir(log_path)) == sorted(
        f"{o:020d}{suf}" for o in (0, 6, 12) for suf in (".log", ".index", ".timeindex"))
    assert [r.offset for r in all_records(lg)] == list(range(14))


def test_roll_on_segment_ms_with_injected_clock(log_path, clock):
    lg = open_log(log_path, cfg(segment_ms=1000), clock)
    lg.append(batch())
    clock.now += 1000
    lg.append(batch())  # exactly segment.ms: not yet (Kafka: strictly more)
    assert len(lg.segments()) == 1
    clock.now += 1
    lg.append(batch())
    assert [s.base_offset for s in lg.segments()] == [0, 6]


def test_roll_jitter_shortens_the_roll_time(log_path, clock):
    lg = open_log(log_path, cfg(segment_ms=10_000, segment_jitter_ms=5_000), clock)
    jitter = lg.active_segment.roll_jitter_ms
    assert 0 <= jitter < 5_000
    lg.append(batch())
    clock.now += 10_000 - jitter
    lg.append(batch())
    assert len(lg.segments()) == 1
    clock.now += 1
    lg.append(batch())
    assert len(lg.segments()) == 2
    assert 0 <= lg.active_segment.roll_jitter_ms < 5_000


def test_roll_on_full_index_and_indexes_trimmed(log_path):
    # 64-byte index files: 8 offset entries; the time index keeps one slot for the roll entry.
    lg = open_log(log_path, cfg(segment_index_bytes=64, index_interval_bytes=1))
    for i in range(30):
        lg.append(batch(n=1, ts=1000 + i))
    segs = lg.segments()
    assert len(segs) > 2
    for s in segs[:-1]:
        seg = s.segment
        assert os.path.getsize(seg.offset_index.path) == seg.offset_index.entries * 8
        assert os.path.getsize(seg.time_index.path) == seg.time_index.entries * 12
        assert seg.time_index.last_entry()[0] == seg.max_timestamp  # roll entry written
    active = segs[-1].segment
    assert os.path.getsize(active.offset_index.path) == 64  # preallocated
    assert [r.offset for r in all_records(lg)] == list(range(30))


def test_offset_index_lookup_boundaries(tmp_path):
    idx = OffsetIndex(str(tmp_path / "00000000000000000100.index"), 100, 8 * 100)
    assert idx.lookup(150) == (100, 0)  # empty
    for i in range(1, 60):
        idx.append(100 + 3 * i, 1000 * i)
    assert idx.lookup(99) == (100, 0)  # below the base
    assert idx.lookup(102) == (100, 0)  # below the first entry
    assert idx.lookup(103) == (103, 1000)  # first entry exactly
    assert idx.lookup(104) == (103, 1000)  # between entries
    assert idx.lookup(130) == (130, 10_000)
    assert idx.lookup(277) == (277, 59_000)  # last entry
    assert idx.lookup(10**9) == (277, 59_000)  # beyond
    # warm-tail and cold searches agree with a plain scan for every target
    entries = [(100 + 3 * i, 1000 * i) for i in range(1, 60)]
    for t in range(95, 290):
        expect = max((e for e in entries if e[0] <= t), default=(100, 0))
        assert idx.lookup(t) == expect
    idx.close()
    assert os.path.getsize(idx.path) == 59 * 8


def test_offset_index_truncate_three_cases(tmp_path):
    def make():
        idx = OffsetIndex(str(tmp_path / "00000000000000000000.index"), 0, 800)
        idx.reset()
        for i in range(1, 6):
            idx.append(10 * i, 100 * i)
        return idx
    idx = make()
    idx.truncate_to(5)  # no entry <= 5: drop all
    assert idx.entries == 0
    idx.close(trim=False)
    idx = make()
    idx.truncate_to(30)  # exact match: drop it too
    assert idx.entries == 2 and idx.last_entry() == (20, 200)
    idx.close(trim=False)
    idx = make()
    idx.truncate_to(35)  # between: keep the floor
    assert idx.entries == 3 and idx.last_entry() == (30, 300)
    idx.close(trim=False)
    # zeroed tail: a re-open counts 3 entries even though the file is preallocated
    idx2 = OffsetIndex(str(tmp_path / "00000000000000000000.index"), 0, 800)
    assert idx2.entries == 3
    idx2.close()


def test_time_index_lookup_and_reopen(tmp_path):
    path = str(tmp_path / "00000000000000000000.timeindex")
    ti = TimeIndex(path, 0, 12 * 10)
    for i, ts in enumerate([100, 100, 200, 300]):
        ti.maybe_append(ts, i * 10)
    assert ti.entries == 3  # the repeated timestamp is not added
    assert ti.lookup(50) == (-1, 0)
    assert ti.lookup(150) == (100, 0)
    assert ti.lookup(300) == (300, 30)
    ti.close(trim=False)
    ro = TimeIndex(path, 0, writable=False)
    assert ro.entries == 3 and ro.lookup(250) == (200, 20)
    ro.close()


def test_many_batches_per_append_index_like_one_at_a_time(tmp_path):
    """A request of >= 64 batches is indexed with array operations: the offset and time
    indexes must come out byte for byte as when the same batches arrive one per append,
    including after entries already written and with timestamps that go back and forth."""
    import random
    rng = random.Random(7)
    batches, offset = [], 0
    for i in range(330):
        n = rng.randint(1, 4)
        ts = 1_000 + i * 10 + rng.choice([-60, 0, 0, 15])  # sometimes below the running max
        if i in (10, 111):  # a request that starts below the max already indexed
            ts = 500
        batches.append(batch(n=n, ts=ts, value_size=rng.choice([300, 500]), base_offset=offset))
        offset += n
    c = cfg(segment_index_bytes=1 << 20, index_interval_bytes=256)
    one = open_log(str(tmp_path / "one-0"), c)
    for b in batches:
        one.append(b)
    many = open_log(str(tmp_path / "many-0"), c)
    for lo, hi in ((0, 10), (10, 110), (110, 111), (111, 330)):  # loop, arrays, loop, arrays
        many.append(b"".join(batches[lo:hi]))
    for lg in (one, many):
        lg.close()
    for suffix in (".index", ".timeindex", ".log"):
        name = f"{0:020d}{suffix}"
        a = (tmp_path / "one-0" / name).read_bytes()
        b = (tmp_path / "many-0" / name).read_bytes()
        assert a == b, suffix
    assert len((tmp_path / "one-0" / f"{0:020d}.index").read_bytes()) > 8 * 200
