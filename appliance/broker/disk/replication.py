"""Cluster mode in the disk worker: the leader's and the follower's side of a partition (Kafka's
``Partition``), as ring-message handlers beside :class:`Partitions`.

Leader: produce only while the leadership area says this broker leads; acks=all refused with
NOT_ENOUGH_REPLICAS when the ISR is below min.insync.replicas; the high watermark is the
minimum log end offset over the ISR (``maybe_increment_hw``), moved by appends and by the
followers' fetch positions (FOLLOWER_FETCH, sent by the network worker that serves the fetch);
an acks=all produce waits here (its completion held) until the high watermark passes its last
offset, its timeout passes (REQUEST_TIMED_OUT), or the ISR shrinks below the minimum
(NOT_ENOUGH_REPLICAS_AFTER_APPEND). DeleteRecords (Kafka's DelayedDeleteRecords) moves the
leader's log start offset at once, then its answer is held until the low watermark (the minimum
log start offset over the leader and the followers in the ISR, as each last sent it in its
Fetch) reaches the requested offset, or its timeout passes (REQUEST_TIMED_OUT): once answered,
any replica that can be elected leader has deleted too. Kafka counts every assigned replica on
a live broker; the disk worker knows the ISR, not liveness, and a follower out of the ISR takes
the leader's log start with the fetches that bring it back in.

Follower: REPLICA_APPEND appends the leader's batches with their offsets, takes the high
watermark min(leader's, own LEO) and the log start offset min(leader's, own HW); TRUNCATE cuts the log; TRUNCATE_FULLY empties it and starts
at the leader's log start offset (a follower that fell below it: Kafka's truncateFullyAndStartAt).

Leader epochs (KIP-101): a new leadership's epoch is stamped in the leader-epoch cache at the
log end offset when it begins (BECOME_LEADER, sent by the cluster worker), before any append,
so OffsetsForLeaderEpoch answers for it at once; produce and EPOCH_END stamp it too when they
get here first.

Single-threaded, like the rest of the disk worker.
"""

from __future__ import annotations

import logging
import os
import struct
import time
from typing import Any

from appliance.broker.disk.partitions import WAKE_ALL, Partitions
from appliance.broker.disk.requests import NOTHING, NotHere, Requests
from appliance.errors import ErrorCode, KafkaError
from appliance.records.batch_layout import MAGIC_OFFSET
from appliance.shm.layout import (
    COMPLETION,
    EPOCH_BODY,
    FOLLOWER_FETCH_BODY,
    REPLICA_APPEND_HEADER,
    TRUNCATE_BODY,
    DataWanted,
    Role,
)
from appliance.shm.leadership_area import LeadershipArea
from appliance.storage.leader_epoch import LEADER_EPOCH_CHECKPOINT, LeaderEpochCache
from appliance.storage.retention import delete_below_log_start

__all__ = ["Replication"]

log = logging.getLogger("appliance.disk")

_COMP = COMPLETION.struct  # type: ignore[attr-defined]
_RA = REPLICA_APPEND_HEADER.struct  # type: ignore[attr-defined]
_FF = FOLLOWER_FETCH_BODY.struct  # type: ignore[attr-defined]
_OFFSET = TRUNCATE_BODY.struct  # type: ignore[attr-defined]
_EPOCH = EPOCH_BODY.struct  # type: ignore[attr-defined]
_BATCH_LENGTH = struct.Struct(">i")  # record batch: baseOffset (8), batchLength (4), partitionLeaderEpoch (4)
_BE64 = struct.Struct(">q")
_LOG_OVERHEAD = 12
_EPOCH_POS = 12  # partitionLeaderEpoch: outside the CRC (which starts at attributes)
_MAGIC_POS = MAGIC_OFFSET  # the magic byte, where v2 and legacy entries both have it
# The held produces' timeouts and ISR are checked at most this often, not at every pass of the
# disk worker's loop (a leadership-area read and a high watermark computation per partition
# with held produces, ~12 % of the leader's disk worker under acks=all at 10k records/s). The
# HW moves with the followers' fetches, not here; an ISR changes at most every
# replica.lag.time.max.ms / 2, so 5 ms more before its answer, or a timeout's, changes nothing.
POLL_INTERVAL_S = 0.005


def _stamp_epoch(buf: memoryview, epoch: int) -> None:
    """Write the leader epoch into every batch's header, in place."""
    pos, end = 0, len(buf)
    while pos + _LOG_OVERHEAD <= end:
        _BATCH_LENGTH.pack_into(buf, pos + _EPOCH_POS, epoch)
        pos += _LOG_OVERHEAD + _BATCH_LENGTH.unpack_from(buf, pos + 8)[0]


def _batch_epochs(buf: memoryview) -> list[tuple[int, int]]:
    """(partitionLeaderEpoch, baseOffset) of each v2 batch. Legacy (magic 0/1) entries carry
    no epoch (bytes 12-15 are their CRC): Kafka assigns no epoch entry for them."""
    out, pos, end = [], 0, len(buf)
    while pos + _LOG_OVERHEAD + 4 <= end:
        if pos + _MAGIC_POS < end and buf[pos + _MAGIC_POS] == 2:
            out.append((_BATCH_LENGTH.unpack_from(buf, pos + _EPOCH_POS)[0], _BE64.unpack_from(buf, pos)[0]))
        pos += _LOG_OVERHEAD + _BATCH_LENGTH.unpack_from(buf, pos + 8)[0]
    return out


class _NotEnoughReplicas(KafkaError):
    code = ErrorCode.NOT_ENOUGH_REPLICAS


class Replication:
    def __init__(self, partitions: Partitions, area: LeadershipArea, requests: Requests,
                 complete: Any, broker_id: int, move_log_start: Any) -> None:
        self.parts = partitions
        self.area = area
        self.requests = requests  # for the acks and timeout of the message being handled
        self.complete = complete  # complete(n, completion bytes): a held answer goes out
        self.broker_id = broker_id
        self.positions: dict[int, dict[int, int]] = {}  # slot -> follower id -> its log end offset
        # slot -> [(needed HW, deadline, n, request_id, base_offset, log_append_time)]
        self.waiting: dict[int, list[tuple]] = {}
        self.epochs: dict[int, LeaderEpochCache] = {}  # slot -> its leader-epoch-checkpoint
        # DeleteRecords: LogAdmin.move_log_start(slot, body) -> (log, requested offset)
        self.move_log_start = move_log_start
        self.log_starts: dict[int, dict[int, int]] = {}  # slot -> follower id -> its log start offset
        # slot -> [(requested offset, deadline, n, request_id)]: held DeleteRecords
        self.deleting: dict[int, list[tuple]] = {}
        self._next_poll = 0.0

    def epoch_cache(self, slot: int, plog: Any) -> LeaderEpochCache:
        cache = self.epochs.get(slot)
        if cache is None or cache.path != os.path.join(plog.path, LEADER_EPOCH_CHECKPOINT):
            cache = self.epochs[slot] = LeaderEpochCache(os.path.join(plog.path, LEADER_EPOCH_CHECKPOINT))
        return cache

    def _log(self, slot: int) -> Any:
        plog = self.parts.logs.get(slot)
        if plog is None:
            raise NotHere()
        plog.auto_high_watermark = False
        return plog

    # -- leader ---------------------------------------------------------------------------
    def produce(self, n: int | None, request_id: int, slot: int, body: memoryview) -> tuple | None:
        plog = self._log(slot)
        lead = self.area.read(slot)
        if lead.role != Role.LEADER:
            raise NotHere()
        acks, timeout_ms = self.requests.acks, self.requests.timeout_ms
        min_isr = int(plog.config.min_insync_replicas)
        if acks == -1 and len(lead.isr) < min_isr:
            raise _NotEnoughReplicas(f"ISR {lead.isr} is smaller than min.insync.replicas {min_isr}")
        self._stamp_leadership(slot, plog, lead.leader_epoch)
        if body.readonly:
            body = memoryview(bytearray(body))
        _stamp_epoch(body, lead.leader_epoch)
        info = plog.append(body)
        if not self.maybe_increment_hw(slot, plog, lead.isr, WAKE_ALL):
            self.parts.publish(slot, plog)  # the new log end offset: followers fetch up to it
        answer = (info.first_offset, info.log_append_time, plog.log_start_offset, b"")
        if acks != -1 or n is None or plog.high_watermark > info.last_offset:
            return answer
        self.waiting.setdefault(slot, []).append(
            (info.last_offset + 1, time.monotonic() + max(timeout_ms, 0) / 1000, n, request_id,
             info.first_offset, info.log_append_time))
        return None

    def leader_append(self, slot: int, records: bytes) -> int:
        """A write of this disk worker's own as the partition's leader (the group coordinator's
        offset commits and group metadata, which Kafka writes with acks=-1): the acks=all checks,
        the leader epoch stamped, appended. Returns the offset the high watermark must reach
        before the write may be acknowledged; the caller holds its answer until then.

        Raises NotHere (not the leader) or KafkaError (NOT_ENOUGH_REPLICAS, the append's own)."""
        plog = self._log(slot)
        lead = self.area.read(slot)
        if lead.role != Role.LEADER:
            raise NotHere()
        min_isr = int(plog.config.min_insync_replicas)
        if len(lead.isr) < min_isr:
            raise _NotEnoughReplicas(f"ISR {lead.isr} is smaller than min.insync.replicas {min_isr}")
        self._stamp_leadership(slot, plog, lead.leader_epoch)
        body = memoryview(bytearray(records))
        _stamp_epoch(body, lead.leader_epoch)
        info = plog.append(body)
        if not self.maybe_increment_hw(slot, plog, lead.isr, WAKE_ALL):
            self.parts.publish(slot, plog)
        return info.last_offset + 1

    def _stamp_leadership(self, slot: int, plog: Any, epoch: int) -> None:
        """Kafka's makeLeader: the leadership's epoch starts at the log end offset it begins
        with (a no-op once stamped)."""
        cache = self.epoch_cache(slot, plog)
        if epoch > cache.latest_epoch:
            cache.assign(epoch, plog.log_end_offset)

    def become_leader(self, n: int | None, request_id: int, slot: int, body: memoryview) -> tuple:
        plog = self._log(slot)
        (epoch,) = _EPOCH.unpack_from(body, 0)
        lead = self.area.read(slot)
        if lead.role != Role.LEADER or lead.leader_epoch != epoch:
            raise NotHere()  # superseded by a newer LeaderAndIsr meanwhile
        self._stamp_leadership(slot, plog, epoch)
        # the followers' log starts are learnt afresh (Kafka resets its replicas' state): one
        # from an earlier leadership may predate a replica's log being emptied
        self.log_starts.pop(slot, None)
        return plog.log_end_offset, -1, plog.log_start_offset, b""

    def follower_fetch(self, n: int | None, request_id: int, slot: int, body: memoryview) -> tuple:
        plog = self._log(slot)
        offset, replica, start = _FF.unpack_from(body, 0)
        lead = self.area.read(slot)
        if lead.role != Role.LEADER:
            raise NotHere()
        self.positions.setdefault(slot, {})[replica] = offset
        if start >= 0:
            self.log_starts.setdefault(slot, {})[replica] = start
            if slot in self.deleting:
                self._release_deletes(slot, plog, lead.isr)
        if replica in lead.replicas:  # for the cluster worker's ISR decisions
            caught_up = offset >= plog.log_end_offset
            self.area.set_position(slot, lead.replicas.index(replica), offset,
                                   int(time.monotonic() * 1000) if caught_up else None)
        self.maybe_increment_hw(slot, plog, lead.isr)
        return NOTHING

    def maybe_increment_hw(self, slot: int, plog: Any, isr: tuple[int, ...],
                           wake: int = DataWanted.ANY) -> bool:
        """HW = min LEO over the ISR (never backwards), then answer the produces it covers.
        True if it moved (and the slot's offsets were published, waking the long polls in
        ``wake``: consumers' only, unless the caller has just appended)."""
        pos = self.positions.get(slot, {})
        hw = plog.log_end_offset
        for r in isr:
            if r != self.broker_id:
                hw = min(hw, pos.get(r, 0))
        if hw > plog.high_watermark:
            plog.high_watermark = hw
            self.parts.publish(slot, plog, wake)
            self._release(slot, plog)
            return True
        return False

    def _release(self, slot: int, plog: Any) -> None:
        held = self.waiting.get(slot)
        if not held:
            return
        hw = plog.high_watermark
        # Kafka's checkEnoughReplicasReachOffset: replicated, but by fewer than the minimum
        short = len(self.area.read(slot).isr) < int(plog.config.min_insync_replicas)
        done = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND if short else ErrorCode.NONE
        keep = []
        for w in held:
            if hw >= w[0]:
                self._answer(slot, w, done, plog)
            else:
                keep.append(w)
        self.waiting[slot] = keep

    def _answer(self, slot: int, w: tuple, error: int, plog: Any) -> None:
        _, _, n, request_id, base, lat = w
        if error:
            base, lat = -1, -1
        self.complete(n, _COMP.pack(request_id, base, lat, plog.log_start_offset if plog else -1, slot, int(error)))

    # -- DeleteRecords ----------------------------------------------------------------------
    def delete_records(self, n: int | None, request_id: int, slot: int, body: memoryview) -> tuple | None:
        """Move the leader's log start offset, answer once the low watermark has reached the
        requested offset (held until then, or its timeout)."""
        lead = self.area.read(slot)
        if lead.role != Role.LEADER:
            raise NotHere()
        plog, wanted = self.move_log_start(slot, body)
        low = self.low_watermark(slot, plog, lead.isr)
        if low >= wanted or n is None:  # n None: a local caller, nobody to answer later
            return -1, -1, low, b""
        self.deleting.setdefault(slot, []).append(
            (wanted, time.monotonic() + max(self.requests.timeout_ms, 0) / 1000, n, request_id))
        return None

    def low_watermark(self, slot: int, plog: Any, isr: tuple[int, ...]) -> int:
        """Kafka's lowWatermarkIfLeader over the ISR: the least log start offset of the leader
        and its in-sync followers; -1 while one has not told it since this leadership began."""
        low = plog.log_start_offset
        starts = self.log_starts.get(slot, {})
        for r in isr:
            if r != self.broker_id:
                low = min(low, starts.get(r, -1))
        return low

    def _release_deletes(self, slot: int, plog: Any, isr: tuple[int, ...]) -> None:
        low = self.low_watermark(slot, plog, isr)
        keep = []
        for w in self.deleting[slot]:
            if low >= w[0]:
                self.complete(w[2], _COMP.pack(w[3], -1, -1, low, slot, int(ErrorCode.NONE)))
            else:
                keep.append(w)
        if keep:
            self.deleting[slot] = keep
        else:
            del self.deleting[slot]

    def _expire_deletes(self, now: float) -> None:
        """Held DeleteRecords whose ISR shrank to ones that have followed (answered), past
        their timeout (REQUEST_TIMED_OUT), or whose leadership went (NOT_LEADER_OR_FOLLOWER)."""
        for slot in list(self.deleting):
            plog = self.parts.logs.get(slot)
            lead = self.area.read(slot)
            if plog is not None and lead.role == Role.LEADER:
                self._release_deletes(slot, plog, lead.isr)
            keep = []
            for w in self.deleting.get(slot, []):
                if plog is None or lead.role != Role.LEADER:
                    error = ErrorCode.NOT_LEADER_OR_FOLLOWER
                elif now > w[1]:
                    error = ErrorCode.REQUEST_TIMED_OUT
                else:
                    keep.append(w)
                    continue
                self.complete(w[2], _COMP.pack(w[3], -1, -1, -1, slot, int(error)))
            if keep:
                self.deleting[slot] = keep
            else:
                self.deleting.pop(slot, None)

    def poll(self) -> None:
        """Held produces past their timeout, or whose ISR fell below the minimum; held
        DeleteRecords likewise (at most every POLL_INTERVAL_S)."""
        if not self.waiting and not self.deleting:
            return
        now = time.monotonic()
        if now < self._next_poll:
            return
        self._next_poll = now + POLL_INTERVAL_S
        if self.deleting:
            self._expire_deletes(now)
        for slot, held in list(self.waiting.items()):
            plog = self.parts.logs.get(slot)
            lead = self.area.read(slot)
            if plog is not None and lead.role == Role.LEADER:
                self.maybe_increment_hw(slot, plog, lead.isr)  # the ISR may have shrunk
                held = self.waiting.get(slot, [])
            short = plog is None or lead.role != Role.LEADER or \
                len(lead.isr) < int(plog.config.min_insync_replicas)
            keep = []
            for w in held:
                if short:
                    self._answer(slot, w, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, plog)
                elif now > w[1]:
                    self._answer(slot, w, ErrorCode.REQUEST_TIMED_OUT, plog)
                else:
                    keep.append(w)
            if keep:
                self.waiting[slot] = keep
            else:
                del self.waiting[slot]

    # -- follower -------------------------------------------------------------------------
    def replica_append(self, n: int | None, request_id: int, slot: int, body: memoryview) -> tuple:
        plog = self._log(slot)
        leader_hw, leader_start = _RA.unpack_from(body, 0)
        records = body[_RA.size:]
        start = -1
        if len(records) >= _LOG_OVERHEAD:
            base = _BE64.unpack_from(records, 0)[0]
            if base < plog.log_end_offset == plog.log_start_offset:
                # just emptied at the leader's log start, which lies inside this batch: the
                # log starts at the batch instead, the start offset stays (Kafka does the same)
                start = plog.log_start_offset
                plog.truncate_fully_and_start_at(base)
        if len(records):
            plog.append(records, assign_offsets=False)
            cache = self.epoch_cache(slot, plog)
            for epoch, base in _batch_epochs(records):
                if epoch > cache.latest_epoch:
                    cache.assign(epoch, base)
        plog.high_watermark = min(leader_hw, plog.log_end_offset)
        # Kafka's follower takes the leader's log start offset on every fetch, bounded by its
        # own HW, so DeleteRecords and retention on the leader reach every replica
        start = min(max(start, leader_start), plog.high_watermark)
        if start > plog.log_start_offset:
            self._follow_log_start(plog, start)
        self.parts.publish(slot, plog, wake=0)
        return plog.log_end_offset, -1, plog.log_start_offset, b""

    def _follow_log_start(self, plog: Any, start: int) -> None:
        """Raise the log start offset to the leader's; the segments wholly below go at once, as
        on the leader, and the checkpoint is written so they stay unreadable after a restart."""
        before = plog.log_start_offset
        plog.maybe_increment_log_start_offset(start)
        deleted = delete_below_log_start(plog)
        self.parts.log_dir.write_checkpoints()
        log.info("%s-%d: log start offset %d -> %d (the leader's), %d segments deleted",
                 plog.topic, plog.partition, before, plog.log_start_offset, deleted)

    def truncate(self, n: int | None, request_id: int, slot: int, body: memoryview) -> tuple:
        plog = self._log(slot)
        (offset,) = _OFFSET.unpack_from(body, 0)
        plog.truncate_to(max(offset, plog.log_start_offset))
        self.epoch_cache(slot, plog).truncate_from_end(plog.log_end_offset)
        self.positions.pop(slot, None)
        self.parts.publish(slot, plog)
        return plog.log_end_offset, -1, plog.log_start_offset, b""

    def truncate_fully(self, n: int | None, request_id: int, slot: int, body: memoryview) -> tuple:
        """Drop the whole log and start empty at the leader's log start offset: a follower
        whose log end is below it can never fetch what lies between."""
        plog = self._log(slot)
        (offset,) = _OFFSET.unpack_from(body, 0)
        if self.area.read(slot).role == Role.LEADER:
            raise NotHere()  # only a follower's log is cut to its leader's
        plog.truncate_fully_and_start_at(offset)
        self.epoch_cache(slot, plog).clear()
        self.positions.pop(slot, None)
        self.parts.publish(slot, plog)
        log.info("%s: truncated fully, starting at the leader's log start offset %d", plog.path, offset)
        return plog.log_end_offset, -1, plog.log_start_offset, b""

    def epoch_end(self, n: int | None, request_id: int, slot: int, body: memoryview) -> tuple:
        """The leader's OffsetsForLeaderEpoch answer for one partition: (end offset, epoch)
        in the completion's base_offset and log_append_time."""
        plog = self._log(slot)
        (requested,) = _EPOCH.unpack_from(body, 0)
        lead = self.area.read(slot)
        if lead.role == Role.LEADER:  # asked before BECOME_LEADER got here
            self._stamp_leadership(slot, plog, lead.leader_epoch)
        epoch, end = self.epoch_cache(slot, plog).end_offset_for(requested, plog.log_end_offset)
        return end, epoch, plog.log_start_offset, b""
