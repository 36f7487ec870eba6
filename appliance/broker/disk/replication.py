"""Cluster mode in the disk worker: the ring-message handlers of the leader's and the
follower's side of a partition. The rules are the slot's :class:`Partition`'s
(``partition.py``: the high watermark, the epoch cache, what is held); this module reads the
leadership area, calls them, and answers the rings.

Leader: produce only while the leadership area says this broker leads; acks=all refused with
NOT_ENOUGH_REPLICAS when the ISR is below min.insync.replicas; the high watermark moves with
appends and with the followers' fetch positions (FOLLOWER_FETCH, sent by the network worker
that serves the fetch); an acks=all produce is held until the high watermark passes its last
offset, its timeout passes (REQUEST_TIMED_OUT), or the ISR shrinks below the minimum
(NOT_ENOUGH_REPLICAS_AFTER_APPEND). DeleteRecords (Kafka's DelayedDeleteRecords) moves the
leader's log start offset at once, then its answer is held until the low watermark (the minimum
log start offset over the leader and the followers in the ISR, as each last sent it in its
Fetch) reaches the requested offset, or its timeout passes (REQUEST_TIMED_OUT): once answered,
any replica that can be elected leader has deleted too. Kafka counts every assigned replica on
a live broker; the disk worker knows the ISR, not liveness, and a follower out of the ISR takes
the leader's log start with the fetches that bring it back in.

Follower: REPLICA_APPEND appends the leader's batches with their offsets, takes the high
watermark min(leader's, own LEO) and the log start offset min(leader's, own HW); TRUNCATE cuts
the log; TRUNCATE_FULLY empties it and starts at the leader's log start offset (a follower that
fell below it: Kafka's truncateFullyAndStartAt).

Leader epochs (KIP-101): a new leadership's epoch is stamped in the leader-epoch cache at the
log end offset when it begins (BECOME_LEADER, sent by the cluster worker), before any append,
so OffsetsForLeaderEpoch answers for it at once; produce and EPOCH_END stamp it too when they
get here first.

Single-threaded, like the rest of the disk worker.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from appliance.broker.disk.partition import HeldDelete, HeldProduce, Partition
from appliance.broker.disk.partitions import WAKE_ALL, Partitions, unpack_marker
from appliance.broker.disk.requests import NOTHING, NotHere
from appliance.errors import ErrorCode, KafkaError
from appliance.shm.layout import (
    COMPLETION,
    EPOCH_BODY,
    EPOCH_RESULT,
    FOLLOWER_FETCH_BODY,
    REPLICA_APPEND_HEADER,
    TRUNCATE_BODY,
    TRUNCATE_FULLY_BODY,
    DataWanted,
    Role,
)
from appliance.shm.leadership_area import Leadership, LeadershipArea

if TYPE_CHECKING:
    from appliance.broker.disk.log_admin import LogAdmin

__all__ = ["Replication"]

log = logging.getLogger("appliance.disk")

_COMP = COMPLETION.struct  # type: ignore[attr-defined]
_RA = REPLICA_APPEND_HEADER.struct  # type: ignore[attr-defined]
_FF = FOLLOWER_FETCH_BODY.struct  # type: ignore[attr-defined]
_TRUNCATE = TRUNCATE_BODY.struct  # type: ignore[attr-defined]
_TRUNCATE_FULLY = TRUNCATE_FULLY_BODY.struct  # type: ignore[attr-defined]
_EPOCH = EPOCH_BODY.struct  # type: ignore[attr-defined]
_EPOCH_RESULT = EPOCH_RESULT.struct  # type: ignore[attr-defined]
# The held produces' timeouts and ISR are checked at most this often, not at every pass of the
# disk worker's loop (a leadership-area read and a high watermark computation per partition
# with held produces, ~12 % of the leader's disk worker under acks=all at 10k records/s). The
# HW moves with the followers' fetches, not here; an ISR changes at most every
# replica.lag.time.max.ms / 2, so 5 ms more before its answer, or a timeout's, changes nothing.
POLL_INTERVAL_S = 0.005


class _NotEnoughReplicas(KafkaError):
    code = ErrorCode.NOT_ENOUGH_REPLICAS


class Replication:
    def __init__(self, partitions: Partitions, area: LeadershipArea,
                 complete: Callable[[int, bytes], None], broker_id: int, log_admin: LogAdmin) -> None:
        self.parts = partitions
        self.area = area
        self.complete = complete  # complete(n, completion bytes): a held answer goes out
        self.broker_id = broker_id
        self.log_admin = log_admin  # DeleteRecords moves the log start as standalone does
        # the slots whose Partition holds produces / DeleteRecords (poll looks at these only)
        # the Partitions holding produces / DeleteRecords (poll looks at these only; one gone
        # from its slot meanwhile, deleted or moved away, still answers what it held)
        self.holding_produces: set[Partition] = set()
        self.holding_deletes: set[Partition] = set()
        self._next_poll = 0.0

    def _partition(self, slot: int) -> Partition:
        p = self.parts.partitions.get(slot)
        if p is None:
            raise NotHere()
        return p

    def _leader(self, slot: int) -> tuple[Partition, Leadership]:
        """The slot's Partition and leadership, or NotHere when this broker does not lead it."""
        p = self._partition(slot)
        lead = self.area.read(slot)
        if lead.role != Role.LEADER:
            raise NotHere()
        return p, lead

    # -- leader ---------------------------------------------------------------------------
    def produce(self, n: int | None, request_id: int, slot: int, body: memoryview,
            acks: int, timeout_ms: int) -> tuple | None:
        p, lead = self._leader(slot)
        p.check_client_produce()
        min_isr = int(p.log.config.min_insync_replicas)
        if acks == -1 and len(lead.isr) < min_isr:
            raise _NotEnoughReplicas(f"ISR {lead.isr} is smaller than min.insync.replicas {min_isr}")
        info = p.append_as_leader(body, lead.leader_epoch)
        self._appended(p, lead.isr)
        log_start = p.log.log_start_offset
        answer = (info.first_offset, info.log_append_time, log_start, b"")
        if acks != -1 or n is None or p.high_watermark > info.last_offset:
            return answer
        p.hold_produce(HeldProduce(info.last_offset + 1, time.monotonic() + max(timeout_ms, 0) / 1000,
                                   n, request_id, info.first_offset, info.log_append_time))
        self.holding_produces.add(p)
        return None

    def write_txn_marker(self, n: int | None, request_id: int, slot: int, body: memoryview,
                         acks: int, timeout_ms: int) -> tuple | None:
        """WriteTxnMarkers on the leader: the marker appended at the leader's epoch (Kafka
        appends it with acks=-1), answered once the high watermark passes it, as an acks=all
        produce is (held until then, or its timeout)."""
        p, lead = self._leader(slot)
        min_isr = int(p.log.config.min_insync_replicas)
        if len(lead.isr) < min_isr:
            raise _NotEnoughReplicas(f"ISR {lead.isr} is smaller than min.insync.replicas {min_isr}")
        pid, coordinator_epoch, epoch, commit = unpack_marker(body)
        info = p.write_marker(pid, epoch, commit, coordinator_epoch, lead.leader_epoch)
        self._appended(p, lead.isr)
        self.parts.marker_written(p, pid, commit)
        answer = (info.first_offset, -1, p.log.log_start_offset, b"")
        if n is None or p.high_watermark > info.last_offset:
            return answer
        p.hold_produce(HeldProduce(info.last_offset + 1, time.monotonic() + max(timeout_ms, 0) / 1000,
                                   n, request_id, info.first_offset, -1))
        self.holding_produces.add(p)
        return None

    def leader_append(self, slot: int, records: bytes) -> int:
        """A write of this disk worker's own as the partition's leader (the group coordinator's
        offset commits and group metadata, which Kafka writes with acks=-1): the acks=all checks,
        the leader epoch stamped, appended. Returns the offset the high watermark must reach
        before the write may be acknowledged; the caller holds its answer until then.

        Raises NotHere (not the leader) or KafkaError (NOT_ENOUGH_REPLICAS, the append's own)."""
        p, lead = self._leader(slot)
        min_isr = int(p.log.config.min_insync_replicas)
        if len(lead.isr) < min_isr:
            raise _NotEnoughReplicas(f"ISR {lead.isr} is smaller than min.insync.replicas {min_isr}")
        info = p.append_as_leader(memoryview(bytearray(records)), lead.leader_epoch)
        self._appended(p, lead.isr)
        return info.last_offset + 1

    def _appended(self, p: Partition, isr: tuple[int, ...]) -> None:
        """After a leader's append: the HW may move (an ISR of the leader alone); the new log
        end offset is published either way (followers fetch up to it)."""
        if not self.maybe_increment_hw(p, isr, WAKE_ALL):
            self.parts.publish(p.slot, p.log)

    def become_leader(self, n: int | None, request_id: int, slot: int, body: memoryview,
            acks: int, timeout_ms: int) -> tuple:
        p = self._partition(slot)
        (epoch,) = _EPOCH.unpack_from(body, 0)
        lead = self.area.read(slot)
        if lead.role != Role.LEADER or lead.leader_epoch != epoch:
            raise NotHere()  # superseded by a newer LeaderAndIsr meanwhile
        p.become_leader(epoch)
        # KIP-207: clients' ListOffsets wait (OFFSET_NOT_AVAILABLE) until the HW reaches this
        self.area.set_epoch_start(slot, epoch, p.epochs.start_offset_of(epoch))
        # Kafka's makeLeader: an ISR of the leader alone has its HW at the LEO now, not at the
        # next append (a ListOffsets would otherwise wait on it, above)
        self.maybe_increment_hw(p, lead.isr)
        return -1, -1, p.log.log_start_offset, b""

    def isr_changed(self, n: int | None, request_id: int, slot: int, body: memoryview,
            acks: int, timeout_ms: int) -> tuple:
        """The ISR of a partition this broker leads changed (its own shrink, or the
        controller's): Kafka's maybeIncrementLeaderHW after an ISR update. A shrink to the
        followers that have caught up moves the HW with no fetch or append to prompt it."""
        p, lead = self._leader(slot)
        self.maybe_increment_hw(p, lead.isr)
        if p.held_deletes:
            self._answer_deletes(p, lead.isr)
        return -1, -1, p.log.log_start_offset, b""

    def follower_fetch(self, n: int | None, request_id: int, slot: int, body: memoryview,
            acks: int, timeout_ms: int) -> tuple:
        p, lead = self._leader(slot)
        offset, replica, start = _FF.unpack_from(body, 0)
        p.update_follower(replica, offset, start)
        if start >= 0 and p.held_deletes:
            self._answer_deletes(p, lead.isr)
        if replica in lead.replicas:  # for the cluster worker's ISR decisions
            caught_up = offset >= p.log.log_end_offset
            self.area.set_position(slot, lead.replicas.index(replica), offset,
                                   int(time.monotonic() * 1000) if caught_up else None)
        self.maybe_increment_hw(p, lead.isr)
        return NOTHING

    def maybe_increment_hw(self, p: Partition, isr: tuple[int, ...], wake: int = DataWanted.ANY) -> bool:
        """The Partition's HW rule, then answer the produces it covers. True if it moved (and
        the slot's offsets were published, waking the long polls in ``wake``: consumers' only,
        unless the caller has just appended)."""
        if not p.maybe_increment_hw(isr):
            return False
        self.parts.publish(p.slot, p.log, wake)
        if p.held_produces:
            covered = p.covered_produces()
            if covered:
                # Kafka's checkEnoughReplicasReachOffset: replicated, but by fewer than the minimum
                short = len(self.area.read(p.slot).isr) < int(p.log.config.min_insync_replicas)
                error = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND if short else ErrorCode.NONE
                for h in covered:
                    self._answer_produce(p, h, error)
        return True

    def _answer_produce(self, p: Partition, h: HeldProduce, error: int) -> None:
        base, lat = (-1, -1) if error else (h.base_offset, h.log_append_time)
        self.complete(h.ring, _COMP.pack(h.request_id, base, lat, p.log.log_start_offset, p.slot, int(error)))

    # -- DeleteRecords ----------------------------------------------------------------------
    def delete_records(self, n: int | None, request_id: int, slot: int, body: memoryview,
            acks: int, timeout_ms: int) -> tuple | None:
        """Move the leader's log start offset, answer once the low watermark has reached the
        requested offset (held until then, or its timeout)."""
        p, lead = self._leader(slot)
        wanted = self.log_admin.move_log_start(slot, body)
        low = p.low_watermark(lead.isr)
        if low >= wanted or n is None:  # n None: a local caller, nobody to answer later
            return -1, -1, low, b""
        p.hold_delete(HeldDelete(wanted, time.monotonic() + max(timeout_ms, 0) / 1000,
                                 n, request_id))
        self.holding_deletes.add(p)
        return None

    def _answer_deletes(self, p: Partition, isr: tuple[int, ...]) -> None:
        low, reached = p.reached_deletes(isr)
        for h in reached:
            self.complete(h.ring, _COMP.pack(h.request_id, -1, -1, low, p.slot, int(ErrorCode.NONE)))

    def _expire_deletes(self, now: float) -> None:
        """Held DeleteRecords whose ISR shrank to ones that have followed (answered), past
        their timeout (REQUEST_TIMED_OUT), or whose leadership went (NOT_LEADER_OR_FOLLOWER)."""
        for p in list(self.holding_deletes):
            slot = p.slot
            lead = self.area.read(slot)
            if lead.role == Role.LEADER and self.parts.partitions.get(slot) is p:
                self._answer_deletes(p, lead.isr)
                gone, error = p.expired_deletes(now), ErrorCode.REQUEST_TIMED_OUT
            else:
                gone, error = p.take_deletes(), ErrorCode.NOT_LEADER_OR_FOLLOWER
            for h in gone:
                self.complete(h.ring, _COMP.pack(h.request_id, -1, -1, -1, slot, int(error)))
            if not p.held_deletes:
                self.holding_deletes.discard(p)

    def poll(self) -> None:
        """Held produces past their timeout, or whose ISR fell below the minimum; held
        DeleteRecords likewise (at most every POLL_INTERVAL_S)."""
        if not self.holding_produces and not self.holding_deletes:
            return
        now = time.monotonic()
        if now < self._next_poll:
            return
        self._next_poll = now + POLL_INTERVAL_S
        if self.holding_deletes:
            self._expire_deletes(now)
        for p in list(self.holding_produces):
            slot = p.slot
            lead = self.area.read(slot)
            leading = lead.role == Role.LEADER and self.parts.partitions.get(slot) is p
            if leading:
                self.maybe_increment_hw(p, lead.isr)  # the ISR may have shrunk
            if not leading or len(lead.isr) < int(p.log.config.min_insync_replicas):
                gone, error = p.take_produces(), ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
            else:
                gone, error = p.expired_produces(now), ErrorCode.REQUEST_TIMED_OUT
            for h in gone:
                self._answer_produce(p, h, error)
            if not p.held_produces:
                self.holding_produces.discard(p)

    # -- follower -------------------------------------------------------------------------
    def replica_append(self, n: int | None, request_id: int, slot: int, body: memoryview,
            acks: int, timeout_ms: int) -> tuple:
        p = self._partition(slot)
        leader_hw, leader_start = _RA.unpack_from(body, 0)
        start = p.append_as_follower(body[_RA.size:], leader_hw, leader_start)
        if start > p.log.log_start_offset:
            self.parts.advance_log_start(p, start, "the leader's")
        # consumers may fetch from this follower (KIP-392): its HW moving answers their long polls
        self.parts.publish(slot, p.log, wake=DataWanted.ANY)
        return -1, -1, p.log.log_start_offset, b""

    def truncate(self, n: int | None, request_id: int, slot: int, body: memoryview,
            acks: int, timeout_ms: int) -> tuple:
        """A follower cuts its log where the leader's OffsetsForLeaderEpoch answer and its own
        epochs say (the rule: ``Partition.truncation_offset``)."""
        p = self._partition(slot)
        asked, leader_epoch, leader_end = _TRUNCATE.unpack_from(body, 0)
        before = p.log.log_end_offset
        leo = p.truncate_by_epoch(asked, leader_epoch, leader_end)
        if leo < before:
            log.info("%s: truncated from %d to %d (leader epoch %d)", p.log.path, before, leo, asked)
        self.parts.publish(slot, p.log)
        return -1, -1, p.log.log_start_offset, b""

    def truncate_fully(self, n: int | None, request_id: int, slot: int, body: memoryview,
            acks: int, timeout_ms: int) -> tuple:
        """Drop the whole log and start empty at the leader's log start offset: a follower
        whose log end is below it can never fetch what lies between."""
        p = self._partition(slot)
        (offset,) = _TRUNCATE_FULLY.unpack_from(body, 0)
        if self.area.read(slot).role == Role.LEADER:
            raise NotHere()  # only a follower's log is cut to its leader's
        p.truncate_fully_and_start_at(offset)
        self.parts.publish(slot, p.log)
        log.info("%s: truncated fully, starting at the leader's log start offset %d", p.log.path, offset)
        return -1, -1, p.log.log_start_offset, b""

    def epoch_end(self, n: int | None, request_id: int, slot: int, body: memoryview,
            acks: int, timeout_ms: int) -> tuple:
        """The leader's OffsetsForLeaderEpoch answer for one partition (an EPOCH_RESULT)."""
        p = self._partition(slot)
        (requested,) = _EPOCH.unpack_from(body, 0)
        lead = self.area.read(slot)
        if lead.role == Role.LEADER:  # asked before BECOME_LEADER got here
            p.stamp_leadership(lead.leader_epoch)
        epoch, end = p.end_offset_for(requested)
        return -1, -1, p.log.log_start_offset, _EPOCH_RESULT.pack(epoch, end)

    def latest_epoch(self, n: int | None, request_id: int, slot: int, body: memoryview,
            acks: int, timeout_ms: int) -> tuple:
        """A follower's latest epoch and log end (an EPOCH_RESULT), asked before it truncates."""
        p = self._partition(slot)
        epoch, end = p.latest_epoch()
        return -1, -1, p.log.log_start_offset, _EPOCH_RESULT.pack(epoch, end)
