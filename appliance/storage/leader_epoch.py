"""The leader epoch cache of a partition and its ``leader-epoch-checkpoint`` file (Kafka's
LeaderEpochFileCache, KIP-101).

Each entry says "from this offset on, records were written by the leader of this epoch". A
follower that restarts or loses leadership asks the leader, with OffsetsForLeaderEpoch, where
its latest epoch ends on the leader (:meth:`LeaderEpochCache.end_offset_for`) and truncates its
log there, instead of to its high watermark, so replicas never diverge and acknowledged records
are never truncated away.

File format (Kafka's, so Kafka's tools read it): a version line ``0``, a count line, then one
``<epoch> <start offset>`` line per entry, ascending. Written atomically (tmp + fsync + rename +
directory fsync) after every change.

Rules:

- entries are strictly ascending in both epoch and start offset;
- :meth:`assign` of an epoch equal to the latest with a start offset not below it changes
  nothing; otherwise every entry with an epoch >= or a start offset >= the new one is removed
  (it can only be a leftover of a diverged log) and the new entry appended;
- :meth:`truncate_from_end` (the log was truncated to ``end``) drops entries starting at or after
  ``end``; :meth:`truncate_from_start` (log start moved to ``start``) drops entries that begin
  before it except the last, which now starts at ``start``.

Thread-safety: none; the disk worker that owns the partition is the only user.
"""

from __future__ import annotations

import bisect

from appliance.storage.checkpoint import malformed, read_checkpoint_lines, write_checkpoint_lines

__all__ = [
    "LeaderEpochCache", "EpochEntry", "LEADER_EPOCH_CHECKPOINT", "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET", "read_leader_epoch_checkpoint", "write_leader_epoch_checkpoint",
]

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
_WHAT = "leader epoch checkpoint"  # names the file in errors
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1

EpochEntry = tuple[int, int]  # (epoch, start offset)


def write_leader_epoch_checkpoint(path: str, entries: list[EpochEntry]) -> None:
    """Atomically replace ``path``. Raises KafkaStorageError on I/O failure."""
    write_checkpoint_lines(path, [f"{e} {o}" for e, o in entries], _WHAT)


def read_leader_epoch_checkpoint(path: str) -> list[EpochEntry]:
    """The entries of ``path``; [] when it does not exist.

    Raises:
        KafkaStorageError: malformed (wrong version, count mismatch, bad or non-ascending line).
    """
    out: list[EpochEntry] = []
    for parts in read_checkpoint_lines(path, _WHAT) or ():
        line = " ".join(parts)
        try:
            if len(parts) != 2:
                raise ValueError
            epoch, offset = int(parts[0]), int(parts[1])
        except ValueError:
            raise malformed(path, _WHAT, f"line {line!r} is not '<epoch> <offset>'") from None
        if epoch < 0 or offset < 0 or (out and (epoch <= out[-1][0] or offset <= out[-1][1])):
            raise malformed(path, _WHAT, f"line {line!r} is negative or not ascending")
        out.append((epoch, offset))
    return out


class LeaderEpochCache:
    """The (epoch, start offset) list of one partition, persisted at ``path`` (None = memory only)."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._entries: list[EpochEntry] = read_leader_epoch_checkpoint(path) if path else []

    @property
    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1][0] if self._entries else UNDEFINED_EPOCH

    def _flush(self) -> None:
        if self.path is not None:
            write_leader_epoch_checkpoint(self.path, self._entries)

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; True if anything changed.

        Raises:
            ValueError: a negative epoch or offset.
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"leader epoch {epoch} / start offset {start_offset} must not be negative")
        if self._entries:
            last_epoch, last_offset = self._entries[-1]
            if epoch == last_epoch and start_offset >= last_offset:
                return False
        # anything at or after the new entry, by epoch or by offset, is from a diverged history
        while self._entries and (self._entries[-1][0] >= epoch or self._entries[-1][1] >= start_offset):
            self._entries.pop()
        self._entries.append((epoch, start_offset))
        self._flush()
        return True

    def start_offset_of(self, epoch: int) -> int:
        """The offset ``epoch`` began at, or UNDEFINED_EPOCH_OFFSET when the cache holds none."""
        for e, start in reversed(self._entries):
            if e == epoch:
                return start
        return UNDEFINED_EPOCH_OFFSET

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch's answer: (the largest epoch <= requested that this log knows,
        the offset where that epoch ends here). The latest epoch ends at the log end offset; an
        earlier one where the next epoch starts; an epoch above the latest, or no epochs at
        all, gives (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)."""
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self.latest_epoch:
            return requested_epoch, log_end_offset
        epochs = [e for e, _ in self._entries]
        i = bisect.bisect_right(epochs, requested_epoch)  # first entry with a higher epoch
        if i == len(epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        higher_start = self._entries[i][1]
        if i == 0:  # older than anything here: it ends where our history begins
            return requested_epoch, higher_start
        return self._entries[i - 1][0], higher_start

    def truncate_from_end(self, end_offset: int) -> None:
        """The log was truncated to ``end_offset``: drop entries starting at or after it."""
        if end_offset < 0 or not self._entries or self._entries[-1][1] < end_offset:
            return
        self._entries = [e for e in self._entries if e[1] < end_offset]
        self._flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log start moved to ``start_offset`` (retention, DeleteRecords): entries starting
        at or before it collapse into the last of them, which now starts at ``start_offset``."""
        before = [e for e in self._entries if e[1] <= start_offset]
        if not before:
            return
        self._entries = [(before[-1][0], start_offset)] + [e for e in self._entries if e[1] > start_offset]
        self._flush()

    def clear(self) -> None:
        self._entries = []
        self._flush()
