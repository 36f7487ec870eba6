"""LogCleanerManager: which compacted log to clean next, and the cleaner checkpoint.

Kafka's LogCleanerManager, for one log dir and one cleaner:

- the ``cleaner-offset-checkpoint`` file of the log dir (Kafka's name and text format, see
  :mod:`appliance.storage.checkpoint`) holds, per partition, the first *dirty* offset: everything
  below it has been cleaned at least once;
- a log's cleanable range ends at the first *uncleanable* offset: the active segment's base (the
  active segment is never cleaned), or earlier, the base of the first segment holding a record
  younger than ``min.compaction.lag.ms``, or earlier still, the first offset of the earliest
  transaction not yet decided (open, or its marker not yet below the high watermark): Kafka's
  bound at the last stable offset, so an open transaction's records are never compacted;
- its dirty ratio is dirty bytes / (clean + dirty bytes), counting whole segments below the
  uncleanable offset; a log is cleaned when it has dirty bytes and its ratio reaches
  ``min.cleanable.dirty.ratio``; the dirtiest such log goes first.

Per-partition state (one cleaner, so at most one partition is IN_PROGRESS), as a table; a
missing entry is a bug and raises:

==============  =========  ==============
state           event      next state
==============  =========  ==============
IDLE            start      IN_PROGRESS
IN_PROGRESS     done       IDLE (checkpoint advanced)
IN_PROGRESS     abort      IDLE (checkpoint unchanged)
==============  =========  ==============

Thread-safety: none; the log dir's disk worker is the only user.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from appliance.storage.checkpoint import read_checkpoint, write_checkpoint
from appliance.storage.log import PartitionLog

__all__ = [
    "LogCleanerManager", "CleanableLog", "CLEANER_OFFSET_CHECKPOINT", "IDLE", "IN_PROGRESS",
    "TRANSITIONS", "is_compacted",
]

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
IDLE = "IDLE"
IN_PROGRESS = "IN_PROGRESS"
TRANSITIONS: dict[tuple[str, str], str] = {
    (IDLE, "start"): IN_PROGRESS,
    (IN_PROGRESS, "done"): IDLE,
    (IN_PROGRESS, "abort"): IDLE,
}


def is_compacted(plog: PartitionLog) -> bool:
    return "compact" in plog.config.cleanup_policy


class CleanableLog(NamedTuple):
    """A compacted log's cleanable range [log start, first_uncleanable) and its dirtiness."""

    key: tuple[str, int]
    log: PartitionLog
    first_dirty: int
    first_uncleanable: int
    clean_bytes: int
    dirty_bytes: int

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


class LogCleanerManager:
    """The cleaner checkpoint and per-partition state of one log dir (see the module doc)."""

    def __init__(self, dir_path: str) -> None:
        self.checkpoint_path = os.path.join(dir_path, CLEANER_OFFSET_CHECKPOINT)
        self.checkpoints: dict[tuple[str, int], int] = read_checkpoint(self.checkpoint_path)
        self.states: dict[tuple[str, int], str] = {}

    def state(self, key: tuple[str, int]) -> str:
        return self.states.get(key, IDLE)

    def _transition(self, key: tuple[str, int], event: str) -> None:
        nxt = TRANSITIONS.get((self.state(key), event))
        if nxt is None:
            raise RuntimeError(f"cleaner state of {key}: no transition {self.state(key)} --{event}-->")
        if nxt == IDLE:
            self.states.pop(key, None)
        else:
            self.states[key] = nxt

    def cleanable(self, key: tuple[str, int], plog: PartitionLog, now_ms: int) -> CleanableLog:
        """The cleanable range and dirtiness of ``plog`` now."""
        segs = plog.segments()
        start = plog.log_start_offset
        uncleanable = segs[-1].base_offset
        lag = int(plog.config.min_compaction_lag_ms)
        if lag > 0:
            for s in segs[:-1]:
                if s.segment.largest_timestamp > now_ms - lag:
                    uncleanable = s.base_offset
                    break
        unstable = plog.producers.first_unstable_offset(plog.high_watermark)
        if unstable is not None:
            # Kafka bounds at the LSO, which is also <= the HW; non-transactional data above
            # the HW was cleanable before transactions and stays so (a truncation aborts a pass)
            uncleanable = max(start, min(uncleanable, unstable))
        first_dirty = self.checkpoints.get(key, start)
        if first_dirty < start or first_dirty > uncleanable:
            # Below the log start (retention moved it) or past what is cleanable (the log was
            # truncated below the checkpoint): Kafka restarts from the log start.
            first_dirty = start
        clean = dirty = 0
        for s in segs[:-1]:
            seg = s.segment
            if s.base_offset >= uncleanable or seg.next_offset <= start:
                continue
            if seg.next_offset <= first_dirty:
                clean += seg.size
            else:
                dirty += seg.size
        return CleanableLog(key, plog, first_dirty, uncleanable, clean, dirty)

    def grab_filthiest(self, partitions: dict[tuple[str, int], PartitionLog],
                       now_ms: int) -> CleanableLog | None:
        """The compacted log with the highest dirty ratio at or above its
        min.cleanable.dirty.ratio, marked IN_PROGRESS; None when no log needs cleaning."""
        best: CleanableLog | None = None
        for key, plog in partitions.items():
            if not is_compacted(plog) or self.state(key) != IDLE:
                continue
            c = self.cleanable(key, plog, now_ms)
            if c.dirty_bytes <= 0 or c.dirty_ratio < float(plog.config.min_cleanable_dirty_ratio):
                continue
            if best is None or c.dirty_ratio > best.dirty_ratio:
                best = c
        if best is not None:
            self._transition(best.key, "start")
        return best

    def done_cleaning(self, key: tuple[str, int], first_dirty: int,
                      partitions: dict[tuple[str, int], PartitionLog]) -> None:
        """Record that everything below ``first_dirty`` is clean and write the checkpoint
        (entries of partitions no longer in ``partitions`` are dropped). Raises
        KafkaStorageError when the checkpoint cannot be written."""
        self._transition(key, "done")
        self.checkpoints[key] = first_dirty
        self.write(partitions)

    def abort(self, key: tuple[str, int]) -> None:
        """The pass on ``key`` was given up; its checkpoint is unchanged."""
        self._transition(key, "abort")

    def write(self, partitions: dict[tuple[str, int], PartitionLog]) -> None:
        self.checkpoints = {k: v for k, v in self.checkpoints.items() if k in partitions}
        write_checkpoint(self.checkpoint_path, self.checkpoints)
