"""SegmentList: one partition's segments by base offset, and the read loop (Kafka's LogSegments).

Shared by the writer (:class:`~appliance.storage.log.PartitionLog`) and the readers in other
processes (:class:`~appliance.storage.reader.LogReader`): the base offsets, the floor search and
the loop that turns (offset, max bytes, bound) into a :class:`FetchSlice` live here once.

A SegmentList is immutable: a change builds a new one that replaces the old in one assignment,
so a read that holds a list sees a consistent snapshot while the writer rolls or deletes.

Thread-safety: immutable, so any thread may read one; the segments themselves are not
thread-safe (see :mod:`appliance.storage.segment`).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple

from appliance.errors import KafkaStorageError
from appliance.storage.segment import LogSegment

__all__ = ["SegmentList", "FetchSlice", "SegmentVanished"]


class FetchSlice(NamedTuple):
    """A byte range of a segment file holding whole batches.

    ``fd`` stays open at least ``file.delete.delay.ms`` after the segment is deleted and at
    least a minute after the last read of an idle segment; the holder must not close it.
    ``path`` may be renamed (``.deleted``) by then: prefer ``fd``.
    """

    path: str
    fd: int | None
    position: int
    length: int
    first_offset: int
    segment_base: int


class SegmentVanished(KafkaStorageError):
    """A reader's segment was deleted or replaced since it listed the directory."""


class SegmentList:
    """Segments ordered by base offset (oldest first); ``bases`` mirrors them."""

    __slots__ = ("segments", "bases")

    def __init__(self, segments: Iterable[LogSegment] = ()) -> None:
        self.segments: tuple[LogSegment, ...] = tuple(segments)
        self.bases: list[int] = [s.base_offset for s in self.segments]

    def __len__(self) -> int:
        return len(self.segments)

    def __iter__(self) -> Iterator[LogSegment]:
        return iter(self.segments)

    def __getitem__(self, i: int) -> LogSegment:
        return self.segments[i]

    @property
    def active(self) -> LogSegment:
        """The newest segment (the writer's active one)."""
        return self.segments[-1]

    def floor_index(self, offset: int) -> int:
        """Index of the segment that may hold ``offset``: the last with base <= offset (0 when
        ``offset`` is below every base)."""
        return max(0, bisect.bisect_right(self.bases, offset) - 1)

    def read(self, offset: int, max_bytes: int, bound: int, min_one_batch: bool = True,
             prepare: Callable[[LogSegment, bool], bool] | None = None) -> FetchSlice | None:
        """Whole batches from the one holding ``offset``: at most ``max_bytes`` (one batch even
        if larger with ``min_one_batch``), none with a base offset >= ``bound``. None when no
        such batch exists. ``prepare(segment, is_last)`` runs before a segment is read (a
        reader refreshes its view there) and returns False when the segment vanished, which
        raises SegmentVanished."""
        segs = self.segments
        last = len(segs) - 1
        for i in range(self.floor_index(offset), len(segs)):
            seg = segs[i]
            if seg.base_offset >= bound:
                break
            if prepare is not None and not prepare(seg, i == last):
                raise SegmentVanished(f"segment {seg.log_path} vanished")
            r = seg.read(offset, max_bytes, bound, min_one_batch)
            if r is not None:
                return FetchSlice(seg.log_path, seg.fd, r[0], r[1], r[2], seg.base_offset)
        return None

    def __repr__(self) -> str:
        return f"SegmentList({self.bases})"
