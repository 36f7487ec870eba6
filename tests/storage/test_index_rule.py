"""The index-entry rule (index_entry_slots) and the indexes' bulk appends (append_many)."""

from __future__ import annotations

import random

import numpy as np

from appliance.storage.index import index_entry_slots
from appliance.storage.offset_index import OffsetIndex
from appliance.storage.time_index import TimeIndex


def test_rule_every_interval_bytes():
    # an entry once more than `interval` bytes were appended since the last one
    assert index_entry_slots([100, 100, 100, 100], 0, 250) == ([3], 100)
    assert index_entry_slots([100, 100], 251, 250) == ([0], 200)
    assert index_entry_slots([300, 300, 300], 0, 250) == ([1, 2], 300)
    assert index_entry_slots([], 7, 250) == ([], 7)


def test_array_and_list_forms_agree():
    rng = random.Random(3)
    for _ in range(300):
        sizes = [rng.choice([50, 200, 400, 5000]) for _ in range(rng.randint(1, 100))]
        if rng.random() < 0.3:
            sizes = [rng.randint(300, 900) for _ in sizes]  # all over the interval: fast path
        since = rng.randint(0, 600)
        slots, after = index_entry_slots(sizes, since, 256)
        a_slots, a_after = index_entry_slots(np.asarray(sizes, np.int64), since, 256)
        assert list(a_slots) == slots and a_after == after


def test_offset_index_append_many_writes_what_append_does(tmp_path):
    offs, poss = [5, 9, 20, 21], [0, 100, 250, 400]
    a = OffsetIndex(str(tmp_path / "a.index"), 0, 8 * 3)
    b = OffsetIndex(str(tmp_path / "b.index"), 0, 8 * 3)
    for o, p in zip(offs[:3], poss[:3], strict=True):
        a.append(o, p)
    assert b.append_many(np.asarray(offs), np.asarray(poss)) == 3  # stops when full
    assert a.is_full and b.is_full
    assert [a.entry(i) for i in range(3)] == [b.entry(i) for i in range(3)] == [(5, 0), (9, 100), (20, 250)]
    assert b.append_many(np.asarray([30]), np.asarray([500])) == 0
    a.close()
    b.close()


def test_time_index_append_many_keeps_only_growing_known_timestamps(tmp_path):
    ts, offs = [-1, 10, 10, 15, 15, 30], [1, 2, 3, 4, 5, 6]
    a = TimeIndex(str(tmp_path / "a.timeindex"), 0, 12 * 10)
    b = TimeIndex(str(tmp_path / "b.timeindex"), 0, 12 * 10)
    for t, o in zip(ts, offs, strict=True):
        if t >= 0:
            a.maybe_append(t, o)
    assert b.append_many(np.asarray(ts), np.asarray(offs)) == 3
    assert [a.entry(i) for i in range(3)] == [b.entry(i) for i in range(3)] == [(10, 2), (15, 4), (30, 6)]
    # against the last entry too
    assert b.append_many(np.asarray([30, 31]), np.asarray([7, 8])) == 1 and b.last_entry() == (31, 8)
    a.close()
    b.close()
