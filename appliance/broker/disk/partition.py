"""One partition slot in its disk worker (Kafka's ``Partition``): the log, its leader-epoch
cache, what the followers last told the leader, the high watermark rule, and the produces and
DeleteRecords held until the ISR has followed.

Everything here is the partition's own state and rules; nothing reads shared memory or answers
a ring. The worker's handlers (``partitions.py`` standalone, ``replication.py`` in a cluster)
read the leadership, call these methods, and answer from what they return. So the rules can be
tested with a log on a temporary directory and no process (``tests/broker/unit/test_partition.py``).

Single-threaded, like the rest of the disk worker.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from appliance.coordinator.routing import OFFSETS_TOPIC, TXN_TOPIC
from appliance.errors import InvalidTopicError
from appliance.records.batch_layout import (
    BASE_OFFSET_OFFSET,
    BATCH_LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    PARTITION_LEADER_EPOCH_OFFSET,
)
from appliance.storage.leader_epoch import (
    LEADER_EPOCH_CHECKPOINT,
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    LeaderEpochCache,
)
from appliance.storage.retention import delete_below_log_start

if TYPE_CHECKING:
    from appliance.storage.log import AppendInfo, PartitionLog

__all__ = ["ALONE", "HeldDelete", "HeldProduce", "Partition", "stamp_epoch", "batch_epochs"]

_H = TypeVar("_H", "HeldProduce", "HeldDelete")

# The in-sync followers of a partition on a broker with no cluster: none (the leader is its ISR)
ALONE: tuple[int, ...] = ()

# a batch's partitionLeaderEpoch is outside its CRC (which starts at attributes): written in place
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


def stamp_epoch(buf: memoryview, epoch: int) -> None:
    """Write the leader epoch into every batch's header, in place."""
    pos, end = 0, len(buf)
    while pos + LOG_OVERHEAD <= end:
        _INT32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)
        pos += LOG_OVERHEAD + _INT32.unpack_from(buf, pos + BATCH_LENGTH_OFFSET)[0]


def batch_epochs(buf: memoryview) -> list[tuple[int, int]]:
    """(partitionLeaderEpoch, baseOffset) of each v2 batch. Legacy (magic 0/1) entries carry
    no epoch (bytes 12-15 are their CRC): Kafka assigns no epoch entry for them."""
    out, pos, end = [], 0, len(buf)
    while pos + LOG_OVERHEAD + 4 <= end:
        if pos + MAGIC_OFFSET < end and buf[pos + MAGIC_OFFSET] == 2:
            out.append((_INT32.unpack_from(buf, pos + PARTITION_LEADER_EPOCH_OFFSET)[0],
                        _INT64.unpack_from(buf, pos + BASE_OFFSET_OFFSET)[0]))
        pos += LOG_OVERHEAD + _INT32.unpack_from(buf, pos + BATCH_LENGTH_OFFSET)[0]
    return out


@dataclass(slots=True)
class HeldProduce:
    """An acks=all produce appended by the leader, answered once the high watermark passes it."""
    needed: int           # the high watermark that acknowledges it: its last offset + 1
    deadline: float       # time.monotonic() past which it answers REQUEST_TIMED_OUT
    ring: int             # the network worker whose completion ring gets the answer
    request_id: int
    base_offset: int      # the answer's, once acknowledged
    log_append_time: int


@dataclass(slots=True)
class HeldDelete:
    """A DeleteRecords done on the leader, answered once the low watermark reaches it."""
    offset: int           # the log start offset asked for
    deadline: float
    ring: int
    request_id: int


class Partition:
    """One slot's log and its replication state."""

    def __init__(self, slot: int, log: PartitionLog, broker_id: int = -1) -> None:
        self.slot = slot
        self.log = log
        self.broker_id = broker_id
        # an internal topic is written by its coordinator only: a client's produce is refused
        self.internal = log.topic in (OFFSETS_TOPIC, TXN_TOPIC)
        self.follower_ends: dict[int, int] = {}    # follower id -> its log end offset (leader)
        self.follower_starts: dict[int, int] = {}  # follower id -> its log start offset (leader)
        self.held_produces: list[HeldProduce] = []  # in append order
        self.held_deletes: list[HeldDelete] = []
        self._epochs: LeaderEpochCache | None = None

    # -- offsets --------------------------------------------------------------------------
    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO: min(the first offset of the earliest transaction not yet decided, the
        high watermark). A transaction is undecided while open, and until the high watermark
        passes its marker (so the LSO never moves back when a new leader takes over);
        read_committed fetches stop here. Never below the log start offset: retention or
        DeleteRecords may delete the start of a transaction still open (Kafka's
        maybeIncrementFirstUnstableOffset takes max(first unstable offset, log start))."""
        hw = self.log.high_watermark
        first = self.log.producers.first_unstable_offset(hw)
        return hw if first is None or first > hw else max(first, self.log.log_start_offset)

    def maybe_increment_hw(self, isr: Collection[int]) -> bool:
        """The high watermark rule: the least log end offset over the leader and its in-sync
        followers (a follower not heard from since this leadership began counts as 0), never
        moved back. True if it moved."""
        hw = self.log.log_end_offset
        ends = self.follower_ends
        for r in isr:
            if r != self.broker_id:
                e = ends.get(r, 0)
                if e < hw:
                    hw = e
        if hw > self.log.high_watermark:
            self.log.high_watermark = hw
            return True
        return False

    def advance_alone(self) -> int:
        """The rule with no followers (one broker: the leader is the whole ISR): the high
        watermark is the log end offset, returned. :meth:`maybe_increment_hw` with an empty ISR
        says the same; this is the one form the standalone broker uses (start, produce, the
        coordinator's own appends)."""
        log = self.log
        leo = log.log_end_offset
        log.high_watermark = leo
        return leo

    def restore_high_watermark(self, checkpointed: int) -> None:
        """At start, in a cluster: what is above the checkpointed HW may never have been
        replicated; a follower truncates to it before fetching, so it must not claim more."""
        self.log.high_watermark = checkpointed

    def low_watermark(self, isr: Collection[int]) -> int:
        """Kafka's lowWatermarkIfLeader over the ISR: the least log start offset of the leader
        and its in-sync followers; -1 while one has not told it since this leadership began."""
        low = self.log.log_start_offset
        starts = self.follower_starts
        for r in isr:
            if r != self.broker_id:
                low = min(low, starts.get(r, -1))
        return low

    def advance_log_start(self, offset: int) -> int | None:
        """Raise the log start offset (DeleteRecords; a follower taking its leader's); the
        segments wholly below it go at once. The number deleted, or None if it did not move.
        The caller writes the log dir's checkpoint before it answers."""
        before = self.log.log_start_offset
        self.log.maybe_increment_log_start_offset(offset)
        if self.log.log_start_offset == before:
            return None
        return delete_below_log_start(self.log)

    # -- leader epochs (KIP-101) ----------------------------------------------------------
    @property
    def epochs(self) -> LeaderEpochCache:
        """The leader-epoch checkpoint beside the log, read at first use."""
        if self._epochs is None:
            self._epochs = LeaderEpochCache(os.path.join(self.log.path, LEADER_EPOCH_CHECKPOINT))
        return self._epochs

    def stamp_leadership(self, epoch: int) -> None:
        """Kafka's makeLeader: the leadership's epoch starts at the log end offset it begins
        with (a no-op once stamped)."""
        cache = self.epochs
        if epoch > cache.latest_epoch:
            cache.assign(epoch, self.log.log_end_offset)

    def become_leader(self, epoch: int) -> None:
        """A new leadership: its epoch stamped, the followers' log starts learnt afresh (one
        from an earlier leadership may predate a replica's log being emptied; Kafka resets its
        replicas' state)."""
        self.stamp_leadership(epoch)
        self.follower_starts.clear()

    def end_offset_for(self, epoch: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch for this log: (largest epoch <= ``epoch``, where it ends)."""
        return self.epochs.end_offset_for(epoch, self.log.log_end_offset)

    def latest_epoch(self) -> tuple[int, int]:
        """(the latest epoch, the log end offset), or (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET):
        what a follower asks its leader about before it fetches."""
        latest = self.epochs.latest_epoch
        if latest == UNDEFINED_EPOCH:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        return latest, self.log.log_end_offset

    def truncation_offset(self, asked_epoch: int, leader_epoch: int, leader_end_offset: int) -> int:
        """Where a follower cuts its log after asking the leader about ``asked_epoch`` (its
        latest) and hearing (``leader_epoch``, ``leader_end_offset``) back (KIP-101/279):

        - the leader knows no such epoch, or was not asked (we know none): the high watermark
          (Kafka's rule for a log without epochs);
        - it answered the epoch we asked: min(its end offset, our log end);
        - it answered an older epoch (it never had ours, KIP-279): where *that* epoch ends on
          both sides, the smaller of the two.
        """
        leo = self.log.log_end_offset
        if leader_epoch == UNDEFINED_EPOCH or leader_end_offset == UNDEFINED_EPOCH_OFFSET:
            return min(self.log.high_watermark, leo)
        if leader_epoch == asked_epoch:
            return min(leader_end_offset, leo)
        _, ours = self.epochs.end_offset_for(leader_epoch, leo)
        if ours == UNDEFINED_EPOCH_OFFSET:
            return min(leader_end_offset, leo)
        return min(leader_end_offset, ours, leo)

    # -- appends --------------------------------------------------------------------------
    def check_client_produce(self) -> None:
        """Kafka refuses a client's writes to an internal topic (INVALID_TOPIC_EXCEPTION)."""
        if self.internal:
            raise InvalidTopicError(f"{self.log.topic} is an internal topic: only its coordinator writes it")

    def append_as_leader(self, records: memoryview, epoch: int) -> AppendInfo:
        """Append a produce's batches as the leader of ``epoch``: the epoch stamped first in
        the cache (at the log end it begins with), then into every batch."""
        self.stamp_leadership(epoch)
        if records.readonly:
            records = memoryview(bytearray(records))
        stamp_epoch(records, epoch)
        return self.log.append(records)

    def write_marker(self, producer_id: int, producer_epoch: int, commit: bool,
                     coordinator_epoch: int, epoch: int) -> AppendInfo:
        """WriteTxnMarkers on the leader of ``epoch``: the marker appended at that epoch and
        the producer's transaction ended (an ABORT indexed). Raises as
        ``PartitionLog.append_marker`` does (a stale producer epoch: INVALID_PRODUCER_EPOCH)."""
        self.stamp_leadership(epoch)
        info, _ = self.log.append_marker(producer_id, producer_epoch, commit, coordinator_epoch,
                                         epoch)
        return info

    def append_as_follower(self, records: memoryview, leader_hw: int, leader_start: int) -> int:
        """Append the leader's batches with their offsets; take the high watermark
        min(leader's, own log end). Returns the log start offset to take: the leader's, bounded
        by the new high watermark (Kafka's follower takes both on every fetch, so DeleteRecords
        and retention on the leader reach every replica)."""
        log = self.log
        start = -1
        if len(records) >= LOG_OVERHEAD:
            base = _INT64.unpack_from(records, BASE_OFFSET_OFFSET)[0]
            if base < log.log_end_offset == log.log_start_offset:
                # just emptied at the leader's log start, which lies inside this batch: the
                # log starts at the batch instead, the start offset stays (Kafka does the same)
                start = log.log_start_offset
                self.truncate_fully_and_start_at(base)
        if len(records):
            log.append(records, assign_offsets=False)
            cache = self.epochs
            for epoch, base in batch_epochs(records):
                if epoch > cache.latest_epoch:
                    cache.assign(epoch, base)
        log.high_watermark = min(leader_hw, log.log_end_offset)
        return min(max(start, leader_start), log.high_watermark)

    # -- truncation: the log and its epochs move together ---------------------------------
    def truncate_by_epoch(self, asked_epoch: int, leader_epoch: int, leader_end_offset: int) -> int:
        """Cut the log where :meth:`truncation_offset` says; the new log end offset."""
        self.truncate_to(self.truncation_offset(asked_epoch, leader_epoch, leader_end_offset))
        return self.log.log_end_offset

    def truncate_to(self, offset: int) -> None:
        """Cut the log at ``offset`` (never below its start) and the epochs that began there."""
        self.log.truncate_to(max(offset, self.log.log_start_offset))
        self.epochs.truncate_from_end(self.log.log_end_offset)
        self.follower_ends.clear()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop the whole log and its epochs; start empty at ``offset``."""
        self.log.truncate_fully_and_start_at(offset)
        self.epochs.clear()
        self.follower_ends.clear()

    # -- what the followers tell the leader -----------------------------------------------
    def update_follower(self, replica: int, log_end: int, log_start: int) -> None:
        """A follower's fetch position (its log end) and its log start (-1: not sent)."""
        self.follower_ends[replica] = log_end
        if log_start >= 0:
            self.follower_starts[replica] = log_start

    # -- held acks=all produces -----------------------------------------------------------
    def hold_produce(self, held: HeldProduce) -> None:
        self.held_produces.append(held)

    def covered_produces(self) -> list[HeldProduce]:
        """The held produces the high watermark now covers, taken out in append order."""
        hw = self.log.high_watermark
        if not self.held_produces or self.held_produces[0].needed > hw:
            return []
        done, self.held_produces = _take(self.held_produces, lambda h: h.needed <= hw)
        return done

    def expired_produces(self, now: float) -> list[HeldProduce]:
        """The held produces past their deadline, taken out in append order."""
        gone, self.held_produces = _take(self.held_produces, lambda h: now > h.deadline)
        return gone

    def take_produces(self) -> list[HeldProduce]:
        """Every held produce, taken out (the leadership or the ISR went)."""
        held, self.held_produces = self.held_produces, []
        return held

    # -- held DeleteRecords ---------------------------------------------------------------
    def hold_delete(self, held: HeldDelete) -> None:
        self.held_deletes.append(held)

    def reached_deletes(self, isr: Collection[int]) -> tuple[int, list[HeldDelete]]:
        """(the low watermark, the held DeleteRecords it has reached, taken out in order)."""
        low = self.low_watermark(isr)
        done, self.held_deletes = _take(self.held_deletes, lambda h: h.offset <= low)
        return low, done

    def expired_deletes(self, now: float) -> list[HeldDelete]:
        """The held DeleteRecords past their deadline, taken out in order."""
        gone, self.held_deletes = _take(self.held_deletes, lambda h: now > h.deadline)
        return gone

    def take_deletes(self) -> list[HeldDelete]:
        """Every held DeleteRecords, taken out (the leadership went)."""
        held, self.held_deletes = self.held_deletes, []
        return held


def _take(held: list[_H], due: Callable[[_H], bool]) -> tuple[list[_H], list[_H]]:
    """(the held items that are due, the rest), each in its order; ``held`` itself when none is."""
    taken = [h for h in held if due(h)]
    return taken, ([h for h in held if not due(h)] if taken else held)
