"""The offset index (``.index``): relative offset -> file position, 8-byte entries.

An entry ``(offset - base_offset, position)`` says the batch whose last offset is ``offset``
starts at ``position`` of the segment's log file (Kafka's ``OffsetIndex``). Lookups return the
largest entry not above the target; the caller scans forward from its position.

Thread-safety: none (see :mod:`appliance.storage.index`).
"""

from __future__ import annotations

import numpy as np

from appliance.storage.index import AbstractIndex, IndexError_
from native.index_layout import OFFSET_INDEX_ENTRY
from native.index_search import offset_index_floor

__all__ = ["OffsetIndex"]


class OffsetIndex(AbstractIndex):
    """Sparse map from offsets to log positions of one segment."""

    ENTRY = OFFSET_INDEX_ENTRY
    DTYPE = np.dtype([("rel", ">i4"), ("pos", ">i4")])
    _KEY = 0

    def _floor(self, buf: object, n: int, key: int) -> int:
        return offset_index_floor(buf, n, key)

    @property
    def last_offset(self) -> int:
        """Largest indexed offset, or the base offset when the index is empty."""
        if not self.entries:
            return self.base_offset
        return self.base_offset + self._last_raw()[0]

    def last_entry(self) -> tuple[int, int]:
        """(offset, position) of the last entry, or (base_offset, 0) when empty."""
        if not self.entries:
            return self.base_offset, 0
        rel, pos = self._last_raw()
        return self.base_offset + rel, pos

    def append(self, offset: int, position: int) -> None:
        """Add ``offset -> position``. Raises IndexFullError, or IndexError_ if ``offset`` does
        not grow (Kafka's InvalidOffsetException) or does not fit the relative int32."""
        rel = offset - self.base_offset
        if not 0 <= rel <= 0x7FFFFFFF:
            raise IndexError_(f"offset {offset} does not fit index {self.path} (base {self.base_offset})")
        if self.entries and rel <= self._last_raw()[0]:
            raise IndexError_(
                f"offset {offset} is not larger than the last entry of {self.path}")
        self._append_raw(rel, position)

    def append_many(self, offsets: np.ndarray, positions: np.ndarray) -> int:
        """Append ``offsets[i] -> positions[i]`` (growing offsets) in one copy while slots are
        free (:meth:`append` is the one-entry form). Returns the entries written (a full index
        takes none: the segment rolls before its next append)."""
        k = min(len(offsets), self.max_entries - self.entries)
        if k <= 0:
            return 0
        ent = np.empty(k, dtype=self.DTYPE)
        ent["rel"] = offsets[:k] - self.base_offset
        ent["pos"] = positions[:k]
        self._append_array(ent)
        return k

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """(offset, position) of the largest entry <= ``target_offset``; (base, 0) if none."""
        rel = target_offset - self.base_offset
        if rel < 0:
            return self.base_offset, 0
        slot = self._floor_slot(min(rel, 0x7FFFFFFF))
        if slot < 0:
            return self.base_offset, 0
        r, pos = self.entry(slot)
        return self.base_offset + r, pos

    def truncate_to(self, offset: int) -> None:
        """Drop entries for offsets >= ``offset`` (Kafka's OffsetIndex.truncateTo):

        1. no entry <= offset: drop everything;
        2. an entry equals offset: keep the entries before it;
        3. otherwise keep everything up to and including the floor entry.
        """
        rel = offset - self.base_offset
        slot = -1 if rel < 0 else self._floor_slot(min(rel, 0x7FFFFFFF))
        if slot < 0:
            keep = 0
        elif self.entry(slot)[0] == rel:
            keep = slot
        else:
            keep = slot + 1
        self.truncate_to_entries(keep)

    def _check_entries(self, log_size: int | None) -> str | None:
        """Offsets strictly increasing, positions not going backwards nor past the log."""
        rel, pos = self._columns("rel", "pos")
        if rel[0] < 0 or np.any(np.diff(rel) <= 0):
            return "relative offsets are not strictly increasing"
        if pos[0] < 0 or np.any(np.diff(pos) < 0):
            return "positions go backwards"
        if log_size is not None and pos[-1] >= max(log_size, 1):
            return f"last position {int(pos[-1])} is beyond the log size {log_size}"
        return None
