"""Offset/time index floor lookups against linear-scan twins, at every boundary."""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from native import offset_index_floor, time_index_floor
from native.index_layout import (
    OFFSET_INDEX_ENTRY,
    OFFSET_INDEX_ENTRY_SIZE,
    TIME_INDEX_ENTRY,
    TIME_INDEX_ENTRY_SIZE,
    WARM_SECTION_BYTES,
)
from native.twins import offset_index_floor_twin, time_index_floor_twin

OFFSET_WARM = WARM_SECTION_BYTES // OFFSET_INDEX_ENTRY_SIZE
TIME_WARM = WARM_SECTION_BYTES // TIME_INDEX_ENTRY_SIZE


def offset_index(keys: list[int], spare_entries: int = 0) -> bytes:
    body = b"".join(OFFSET_INDEX_ENTRY.pack(k, 4096 * i) for i, k in enumerate(keys))
    return body + bytes(spare_entries * OFFSET_INDEX_ENTRY_SIZE)  # preallocated zeros


def time_index(keys: list[int], spare_entries: int = 0) -> bytes:
    body = b"".join(TIME_INDEX_ENTRY.pack(k, i) for i, k in enumerate(keys))
    return body + bytes(spare_entries * TIME_INDEX_ENTRY_SIZE)


def check_offset(keys: list[int], target: int, spare: int = 0) -> int:
    buf = offset_index(keys, spare)
    got = offset_index_floor(buf, len(keys), target)
    assert got == offset_index_floor_twin(buf, len(keys), target)
    return got


def check_time(keys: list[int], target: int, spare: int = 0) -> int:
    buf = time_index(keys, spare)
    got = time_index_floor(buf, len(keys), target)
    assert got == time_index_floor_twin(buf, len(keys), target)
    return got


def test_empty_index() -> None:
    assert check_offset([], 0) == -1
    assert check_offset([], 0, spare=10) == -1  # all zeros, but no entries yet
    assert check_time([], 1 << 40, spare=10) == -1


def test_offset_index_boundaries() -> None:
    keys = [3, 10, 20, 30]
    expected = {-5: -1, 2: -1, 3: 0, 4: 0, 9: 0, 10: 1, 15: 1, 20: 2, 29: 2, 30: 3, 31: 3,
                2**31 - 1: 3, 2**40: 3, -(2**70): -1}
    for target, slot in expected.items():
        assert check_offset(keys, target, spare=5) == slot, target


def test_time_index_boundaries() -> None:
    t0 = 1_700_000_000_000
    keys = [t0, t0 + 10, t0 + 20]
    expected = {0: -1, t0 - 1: -1, t0: 0, t0 + 9: 0, t0 + 10: 1, t0 + 20: 2, 2**63 - 1: 2,
                2**80: 2, -(2**63): -1}
    for target, slot in expected.items():
        assert check_time(keys, target, spare=3) == slot, target


def test_time_index_duplicates_give_the_first_slot() -> None:
    keys = [5, 7, 7, 7, 9, 9]
    assert [check_time(keys, t) for t in (4, 5, 6, 7, 8, 9, 10)] == [-1, 0, 0, 1, 1, 4, 4]
    assert check_time([7, 7, 7], 7) == 0


def test_offset_index_duplicates_give_the_last_slot() -> None:
    # Should not occur in a real offset index; documented behaviour: last slot of the floor key.
    assert check_offset([5, 7, 7, 7, 9], 8) == 3


@pytest.mark.parametrize("n", [OFFSET_WARM - 1, OFFSET_WARM, OFFSET_WARM + 1, OFFSET_WARM + 2,
                               3 * OFFSET_WARM + 17])
def test_offset_index_warm_and_cold(n: int) -> None:
    keys = [2 * i + 1 for i in range(n)]  # odd keys: even targets fall between entries
    buf = offset_index(keys)
    first_warm = max(0, n - 1 - OFFSET_WARM)
    for slot in {0, 1, first_warm - 1, first_warm, first_warm + 1, n // 2, n - 2, n - 1}:
        if 0 <= slot < n:
            assert offset_index_floor(buf, n, keys[slot]) == slot
            assert offset_index_floor(buf, n, keys[slot] + 1) == slot
    assert offset_index_floor(buf, n, 0) == -1
    assert offset_index_floor(buf, n, keys[-1] + 100) == n - 1


@pytest.mark.parametrize("n", [TIME_WARM - 1, TIME_WARM + 1, TIME_WARM + 2, 3 * TIME_WARM + 5])
def test_time_index_warm_and_cold(n: int) -> None:
    keys = [1000 + 10 * i for i in range(n)]
    buf = time_index(keys)
    first_warm = max(0, n - 1 - TIME_WARM)
    for slot in {0, first_warm - 1, first_warm, first_warm + 1, n - 1}:
        if 0 <= slot < n:
            assert time_index_floor(buf, n, keys[slot]) == slot
            assert time_index_floor(buf, n, keys[slot] + 9) == slot


def test_time_index_duplicate_run_across_the_warm_boundary() -> None:
    n = 2 * TIME_WARM
    first_warm = n - 1 - TIME_WARM
    # A run of equal timestamps from well inside the cold part into the warm part.
    keys = [i if i < first_warm - 50 else first_warm - 50 for i in range(n - 10)]
    keys += [10**6 + i for i in range(10)]
    assert check_time(keys, first_warm - 50) == first_warm - 50
    assert check_time(keys, 10**6 - 1) == first_warm - 50
    assert check_time(keys, 10**6 + 3) == n - 7


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(-(2**31), 2**31 - 1), max_size=40, unique=True),
       st.integers(-(2**32), 2**32))
def test_offset_index_random_matches_twin(keys: list[int], target: int) -> None:
    check_offset(sorted(keys), target, spare=2)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=40), st.data())
def test_time_index_random_matches_twin(keys: list[int], data: st.DataObject) -> None:
    keys = sorted(keys)
    # Targets on, next to, and away from the keys (and their duplicates).
    target = data.draw(st.one_of(
        st.sampled_from(keys) if keys else st.just(0),
        st.integers(-(2**63), 2**63 - 1),
    ))
    check_time(keys, target)
    check_time(keys, max(target - 1, -(2**63)))


@pytest.mark.parametrize("seed", range(8))
def test_large_time_index_with_runs_matches_twin(seed: int) -> None:
    # Larger than the warm section, with many runs of equal timestamps.
    rng = np.random.default_rng(seed)
    keys = [int(k) for k in np.cumsum(rng.integers(0, 3, 3 * TIME_WARM))]
    for target in (*rng.integers(-1, keys[-1] + 2, 40), *rng.choice(keys, 20)):
        check_time(keys, int(target))


def test_mmap_index_file(tmp_path: Path) -> None:
    keys = list(range(0, 40_000, 4))
    path = tmp_path / "00000000000000000000.index"
    path.write_bytes(offset_index(keys, spare_entries=1000))
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        assert offset_index_floor(mm, len(keys), 12_345) == 12_345 // 4
        assert offset_index_floor(mm, len(keys), 10**9) == len(keys) - 1


def test_bad_arguments() -> None:
    buf = offset_index([1, 2, 3])
    with pytest.raises(ValueError):
        offset_index_floor(buf, 4, 0)
    with pytest.raises(ValueError):
        offset_index_floor(buf, -1, 0)
    with pytest.raises(ValueError):
        time_index_floor(buf, 3, 0)  # 24 bytes hold only two 12-byte entries
    with pytest.raises(TypeError):
        time_index_floor(None, 0, 0)  # type: ignore[arg-type]
