"""The time index (``.timeindex``): timestamp -> relative offset, 12-byte entries.

An entry ``(timestamp, offset - base_offset)`` says that the largest timestamp seen up to offset
``offset`` is ``timestamp`` (Kafka's ``TimeIndex``). Entries are added only when the timestamp grows.
One slot is always kept free so that the entry written when the segment rolls fits (Kafka).

Thread-safety: none (see :mod:`appliance.storage.index`).
"""

from __future__ import annotations

import numpy as np

from appliance.storage.index import AbstractIndex, IndexError_, IndexFullError
from native.index_layout import TIME_INDEX_ENTRY
from native.index_search import time_index_floor

__all__ = ["TimeIndex", "NO_TIMESTAMP"]

NO_TIMESTAMP = -1


class TimeIndex(AbstractIndex):
    """Sparse map from timestamps to offsets of one segment."""

    ENTRY = TIME_INDEX_ENTRY
    DTYPE = np.dtype([("ts", ">i8"), ("rel", ">i4")])
    _KEY = 0

    def _floor(self, buf: object, n: int, key: int) -> int:
        return time_index_floor(buf, n, key)

    @property
    def is_full(self) -> bool:
        # Kafka leaves the last slot for the entry appended when the segment rolls.
        return self.entries >= self.max_entries - 1

    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry, or (NO_TIMESTAMP, base_offset) when empty."""
        if not self.entries:
            return NO_TIMESTAMP, self.base_offset
        ts, rel = self._last_raw()
        return ts, self.base_offset + rel

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Append when ``timestamp`` is larger than the last entry's.

        Raises IndexFullError (unless ``skip_full_check`` and a slot is left) or IndexError_
        when the offset or timestamp goes backwards.
        """
        if not skip_full_check and self.is_full:
            raise IndexFullError(f"time index {self.path} is full")
        rel = offset - self.base_offset
        if not 0 <= rel <= 0x7FFFFFFF:
            raise IndexError_(f"offset {offset} does not fit time index {self.path}")
        if self.entries:
            last_ts, last_rel = self._last_raw()
            if rel < last_rel:
                raise IndexError_(f"offset {offset} is before the last entry of {self.path}")
            if timestamp < last_ts:
                raise IndexError_(f"timestamp {timestamp} is before the last entry of {self.path}")
            if timestamp == last_ts:
                return
        self._append_raw(timestamp, rel)

    def append_many(self, timestamps: np.ndarray, offsets: np.ndarray) -> int:
        """:meth:`maybe_append` for many entries in one copy: ``timestamps`` is a running
        maximum; an entry only where it is known (>= 0) and grew past the previous entry; stops
        when full. Returns the entries written."""
        if not len(timestamps):
            return 0
        keep = timestamps >= 0
        grew = np.empty(len(timestamps), dtype=bool)
        grew[0] = not self.entries or timestamps[0] > self.last_entry()[0]
        grew[1:] = timestamps[1:] > timestamps[:-1]
        keep &= grew
        ts, offs = timestamps[keep], offsets[keep]
        k = min(len(ts), self.max_entries - 1 - self.entries)
        if k <= 0:
            return 0
        ent = np.empty(k, dtype=self.DTYPE)
        ent["ts"] = ts[:k]
        ent["rel"] = offs[:k] - self.base_offset
        self._append_array(ent)
        return k

    def lookup(self, target_ts: int) -> tuple[int, int]:
        """(timestamp, offset) of the entry with the largest timestamp <= ``target_ts``;
        (NO_TIMESTAMP, base_offset) if none."""
        slot = self._floor_slot(target_ts)
        if slot < 0:
            return NO_TIMESTAMP, self.base_offset
        ts, rel = self.entry(slot)
        return ts, self.base_offset + rel

    def truncate_to(self, offset: int) -> None:
        """Drop entries for offsets >= ``offset`` (same three cases as the offset index)."""
        rel = offset - self.base_offset
        (rels,) = self._columns("rel")
        slot = int(np.searchsorted(rels, rel, side="right")) - 1
        if slot < 0:
            keep = 0
        elif rels[slot] == rel:
            keep = int(np.searchsorted(rels, rel, side="left"))
        else:
            keep = slot + 1
        self.truncate_to_entries(keep)

    def _check_entries(self, log_size: int | None) -> str | None:
        """Timestamps and offsets not going backwards."""
        ts, rel = self._columns("ts", "rel")
        if np.any(np.diff(ts) < 0):
            return "timestamps go backwards"
        if rel[0] < 0 or np.any(np.diff(rel) < 0):
            return "relative offsets go backwards"
        return None
