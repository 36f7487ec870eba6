"""Floor lookups in Kafka's offset and time index files (big-endian fixed-width entries).

Like Kafka's ``AbstractIndex.indexSlotRangeFor``, the search first checks whether the target is
in the *warm* tail (the last :data:`~native.index_layout.WARM_SECTION_BYTES` bytes of entries:
the pages appends and tailing consumers keep resident) and binary-searches only there if so,
so the common lookup touches no cold pages.

Equal keys: the offset index has strictly increasing keys in practice; if not, the LAST slot
with the floor key is returned. The time index may repeat timestamps; there the FIRST slot with
the floor key is returned, because Kafka resolves a timestamp to its earliest offset.
"""

from __future__ import annotations

from numba import njit

from native.big_endian import be_i32, be_i64
from native.buffers import as_u8
from native.index_layout import (
    OFFSET_INDEX_ENTRY_SIZE,
    OFFSET_INDEX_KEY_OFFSET,
    TIME_INDEX_ENTRY_SIZE,
    TIME_INDEX_KEY_OFFSET,
    WARM_SECTION_BYTES,
)

__all__ = ["offset_index_floor", "time_index_floor"]

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_OFFSET_WARM_ENTRIES = WARM_SECTION_BYTES // OFFSET_INDEX_ENTRY_SIZE
_TIME_WARM_ENTRIES = WARM_SECTION_BYTES // TIME_INDEX_ENTRY_SIZE


@njit(nogil=True, cache=True, inline="always")
def _offset_key(a, slot):
    return be_i32(a, slot * OFFSET_INDEX_ENTRY_SIZE + OFFSET_INDEX_KEY_OFFSET)


@njit(nogil=True, cache=True, inline="always")
def _time_key(a, slot):
    return be_i64(a, slot * TIME_INDEX_ENTRY_SIZE + TIME_INDEX_KEY_OFFSET)


@njit(nogil=True, cache=True)
def _offset_floor_kernel(a, n, target):
    if n == 0 or _offset_key(a, 0) > target:
        return -1
    first_warm = max(0, n - 1 - _OFFSET_WARM_ENTRIES)
    if _offset_key(a, first_warm) <= target:
        lo, hi = first_warm, n - 1
    else:
        lo, hi = 0, first_warm - 1
    # Invariant: key(lo) <= target; answer in [lo, hi]. Find the last slot with key <= target.
    while lo < hi:
        mid = hi - (hi - lo) // 2  # upper middle, so lo always advances
        if _offset_key(a, mid) <= target:
            lo = mid
        else:
            hi = mid - 1
    return lo


@njit(nogil=True, cache=True)
def _time_floor_kernel(a, n, target):
    if n == 0 or _time_key(a, 0) > target:
        return -1
    first_warm = max(0, n - 1 - _TIME_WARM_ENTRIES)
    warm_key = _time_key(a, first_warm)
    if warm_key <= target:
        lo, hi = first_warm, n - 1
    else:
        lo, hi = 0, first_warm - 1
    while lo < hi:  # last slot with key <= target
        mid = hi - (hi - lo) // 2
        if _time_key(a, mid) <= target:
            lo = mid
        else:
            hi = mid - 1
    key = _time_key(a, lo)
    # Then the first slot holding that key; it is in the warm part unless the warm part starts
    # with the same key (runs of equal timestamps may cross into the cold part).
    hi = lo
    lo = first_warm if warm_key < key else 0
    while lo < hi:  # first slot with key >= `key`
        mid = lo + (hi - lo) // 2
        if _time_key(a, mid) < key:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _checked(buf: object, n_entries: int, entry_size: int):
    a = as_u8(buf)
    if n_entries < 0 or n_entries * entry_size > a.shape[0]:
        raise ValueError(
            f"n_entries={n_entries} does not fit a {a.shape[0]}-byte index of "
            f"{entry_size}-byte entries"
        )
    return a


def _clamp64(x: int) -> int:
    return max(_INT64_MIN, min(_INT64_MAX, int(x)))


def offset_index_floor(buf: object, n_entries: int, target_relative: int) -> int:
    """Slot of the largest offset-index entry whose relativeOffset <= ``target_relative``.

    Returns -1 if there is none (empty index or target below the first entry). Only the first
    ``n_entries`` entries of ``buf`` count (index files are preallocated with zeros).
    Raises ValueError if ``n_entries`` is negative or exceeds the buffer, TypeError for an
    unsupported buffer type. Thread-safe; releases the GIL.
    """
    a = _checked(buf, n_entries, OFFSET_INDEX_ENTRY_SIZE)
    return int(_offset_floor_kernel(a, int(n_entries), _clamp64(target_relative)))


def time_index_floor(buf: object, n_entries: int, target_ts: int) -> int:
    """Slot of the time-index entry with the largest timestamp <= ``target_ts``; among entries
    with that same timestamp, the first one (earliest offset). -1 if there is none.

    Same arguments and errors as :func:`offset_index_floor`.
    """
    a = _checked(buf, n_entries, TIME_INDEX_ENTRY_SIZE)
    return int(_time_floor_kernel(a, int(n_entries), _clamp64(target_ts)))
