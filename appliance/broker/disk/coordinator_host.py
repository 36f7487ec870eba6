"""The group coordinator inside a disk worker: it coordinates every group whose
``__consumer_offsets`` partition this disk holds (cluster mode: holds *and leads*), appends its
records there, and answers the group requests the network workers route to it through the rings.

Cluster mode (Kafka's rule: the coordinator of a group is the leader of its offsets partition):

- leadership is read from the leadership area, which the cluster worker writes when it applies
  LeaderAndIsr: on every group request for a slot, and every ``LEADERSHIP_CHECK_S`` for all the
  offsets partitions of this disk. A partition this broker now leads (or leads in a new epoch)
  is loaded from its log in steps of ``offsets.load.buffer.size`` bytes between rounds, so the other partitions
  of the disk keep being served; its groups answer COORDINATOR_LOAD_IN_PROGRESS meanwhile. A
  partition it stopped leading is unloaded; its groups answer NOT_COORDINATOR.
- every write is a leader append (``Replication.leader_append``: acks=all's checks, the leader
  epoch) and every answer given in the same step as a write is held until the high watermark
  passes that write, as Kafka writes the offsets topic with acks=-1: a commit that was answered
  is on every ISR member. Past ``offsets.commit.timeout.ms``, or with the ISR below
  min.insync.replicas, the held answers become COORDINATOR_NOT_AVAILABLE; if the leadership is
  lost meanwhile, NOT_COORDINATOR (Kafka's mapping of the append errors for commits).

Standalone: every offsets partition of the disk is loaded at start and a write is acknowledged
once appended, as before.
"""

from __future__ import annotations

import logging
import struct
import time
from typing import Any

from appliance.broker.cluster_view import ClusterView
from appliance.broker.disk.coordinator_append import coordinator_append
from appliance.broker.disk.partitions import Partitions
from appliance.broker.disk.ring_intake import RingIntake
from appliance.config import BrokerConfig
from appliance.coordinator.coordinator import GroupCoordinator
from appliance.coordinator.routing import OFFSETS_TOPIC
from appliance.errors import ErrorCode, KafkaError, error_for_code
from appliance.protocol.registry import API_BY_KEY
from appliance.records.batch import decode_batch, decode_records, iter_batches
from appliance.records.batch_layout import (
    BASE_OFFSET_OFFSET,
    BATCH_LENGTH_OFFSET,
    LAST_OFFSET_DELTA_OFFSET,
    LOG_OVERHEAD,
)
from appliance.records.control import marker_of_record
from appliance.shm.layout import COMPLETION, GROUP_HEADER, Role
from appliance.shm.partition_index import PartitionIndex

__all__ = ["CoordinatorHost", "LEADERSHIP_CHECK_S", "check_answerable", "partition_records", "next_offset"]

log = logging.getLogger("appliance.coordinator")

_COMP = COMPLETION.struct  # type: ignore[attr-defined]
_GROUP = GROUP_HEADER.struct  # type: ignore[attr-defined]
# record batch v2: baseOffset, batchLength, then at 23 lastOffsetDelta (after partitionLeaderEpoch,
# magic, crc, attributes)
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

LEADERSHIP_CHECK_S = 0.1  # how late a leadership change may be noticed with no group request


class _Held:
    """An answer waiting for the high watermark to pass the writes made with it."""

    __slots__ = ("waits", "deadline", "n", "request_id", "data", "on_success")

    def __init__(self, waits: list[tuple[int, int, int]], deadline: float, n: int,
                 request_id: int, data: bytes, on_success: list) -> None:
        self.waits = waits  # (slot, offset the HW must reach, leader epoch of the write)
        self.deadline, self.n, self.request_id, self.data = deadline, n, request_id, data
        self.on_success = on_success  # the coordinator's cache updates (committed offsets)


class CoordinatorHost:
    def __init__(self, config: BrokerConfig, partitions: Partitions, rings: RingIntake) -> None:
        self.partitions = partitions
        self.rings = rings  # where held answers go
        # what exists in the cluster: the partition table standalone, the shared metadata
        # cache in cluster mode (attach_cluster): Kafka checks a commit's partitions against its
        # MetadataCache, not against the replicas on its own disks
        self.view = ClusterView(PartitionIndex(partitions.table))
        self.cluster = bool(config["zookeeper.connect"])
        self.commit_timeout_s = int(config["offsets.commit.timeout.ms"]) / 1000
        self.coordinator = GroupCoordinator(
            config, int(config["offsets.topic.num.partitions"]),
            append=self._append_offsets, respond=self._respond_later,
            partition_exists=lambda t, p: self.view.has_partition(t, p),
            on_durable=self._on_durable)
        partitions.created_hooks.append(self._partition_created)
        # offsets.load.buffer.size: read per loop pass while loading, which bounds how long the
        # other partitions wait for the disk worker meanwhile
        self.load_step_bytes = int(config["offsets.load.buffer.size"])
        # cluster mode (attach_cluster)
        self.area: Any = None
        self.replication: Any = None
        self.epochs: dict[int, int] = {}  # offsets partition -> leader epoch loaded (or loading)
        self.loads: dict[int, int] = {}  # offsets partition being loaded -> next offset to read
        self.held: list[_Held] = []
        self._step: dict[int, int] | None = None  # slot -> offset the HW must reach, this step
        self._durable: list = []  # what the coordinator runs once this step's writes are replicated
        self._next_check = 0.0

    def attach_cluster(self, area: Any, replication: Any, metadata: Any) -> None:
        """Cluster mode: the leadership area to follow, the leader's append path, and the
        cluster's metadata cache (which partitions exist)."""
        self.view = ClusterView(self.view.index, metadata)
        self.area = area
        self.replication = replication

    def load(self) -> None:
        """Standalone: read the groups' state back from the offsets partitions this disk holds.
        (Cluster mode loads a partition when this broker becomes its leader.)"""
        if self.cluster or self.partitions.log_dir is None:  # offline log dir: nothing loads
            return
        for (topic, partition), plog in self.partitions.log_dir.partitions.items():
            if topic == OFFSETS_TOPIC:
                self.coordinator.begin_load(partition)
                for data in partition_chunks(plog):
                    replay(self.coordinator, partition, data)
                self.coordinator.finish_load(partition)

    def poll(self) -> int:
        """Run due timers (session expiry, rebalance deadlines) and, in cluster mode, follow
        the leadership, load a step, release held answers; when to run next (epoch ms)."""
        if self.area is None:
            return self.coordinator.poll()
        now = time.monotonic()
        if now >= self._next_check:
            self._next_check = now + LEADERSHIP_CHECK_S
            for (topic, partition), slot in list(self.partitions.slot_of.items()):
                if topic == OFFSETS_TOPIC:
                    self._follow(slot, partition)
        if self.loads:
            self._load_step()
        if self.held:
            self._release(now)
        self._step = {}
        try:
            nxt = self.coordinator.poll()
        finally:
            self._flush_step()
        if self.loads:
            return 0  # more to load: do not sleep
        if self.held:
            wake_ms = int((time.time() + min(h.deadline for h in self.held) - now) * 1000) + 1
            nxt = min(nxt, wake_ms)
        return nxt

    # -- leadership (cluster mode) --------------------------------------------------------
    def _follow(self, slot: int, partition: int) -> None:
        """Load or unload ``partition`` as the leadership area says."""
        lead = self.area.read(slot)
        mine = self.epochs.get(partition)
        if lead.role == Role.LEADER and mine == lead.leader_epoch:
            return
        if mine is not None:
            self.loads.pop(partition, None)
            self._step = {}
            try:
                self.coordinator.unload(partition)
            finally:
                self._flush_step()
            del self.epochs[partition]
        if lead.role == Role.LEADER:
            p = self.partitions.partitions.get(slot)
            if p is None or not self.view.cache.published:
                return  # loaded once the controller's metadata (the partition count) has come
            self.epochs[partition] = lead.leader_epoch
            # the topic's own partition count (ZooKeeper's), should it differ from the config
            total = self.view.partition_count(p.log.topic, self.partitions.table.read(slot).num_partitions)
            if total > 0:
                self.coordinator.num_partitions = total
            self.coordinator.begin_load(partition)
            self.loads[partition] = p.log.log_start_offset
            log.info("leading __consumer_offsets-%d (epoch %d): loading its groups", partition,
                     lead.leader_epoch)

    def _load_step(self) -> None:
        budget = self.load_step_bytes
        for partition in list(self.loads):
            slot = self.partitions.slot_of.get((OFFSETS_TOPIC, partition))
            p = self.partitions.partitions.get(slot) if slot is not None else None
            if p is None:  # gone meanwhile (deleted, or its log dir failed): not ours now
                self.loads.pop(partition)
                self.epochs.pop(partition, None)
                self.coordinator.unload(partition)
                continue
            offset = self.loads[partition]
            plog = p.log
            while budget > 0 and offset < plog.log_end_offset:
                # the leader's whole log: what is above the HW is the leader's and stays
                data = plog.read_bytes(offset, budget, max_offset=plog.log_end_offset)
                if not data:
                    offset = plog.log_end_offset
                    break
                budget -= len(data)
                replay(self.coordinator, partition, data)
                offset = max(offset + 1, next_offset(data))
            if offset >= plog.log_end_offset:
                del self.loads[partition]
                self.coordinator.finish_load(partition)
            else:
                self.loads[partition] = offset
            if budget <= 0:
                return

    # -- writes ---------------------------------------------------------------------------
    def _partition_created(self, topic: str, partition: int) -> None:
        if topic == OFFSETS_TOPIC and not self.cluster:
            self.coordinator.load(partition, ())

    def _append_offsets(self, partition: int, batch: bytes) -> None:
        written = coordinator_append(self.partitions, self.area, self.replication, self.epochs,
                                     OFFSETS_TOPIC, partition, batch)
        if written is None:
            return
        slot, needed = written
        if self.partitions.partitions[slot].high_watermark < needed and self._step is not None:
            self._step[slot] = max(self._step.get(slot, 0), needed)

    # -- answers --------------------------------------------------------------------------
    def _send(self, n: int, request_id: int, data: bytes, error: int = 0) -> None:
        self.rings.complete(n, _COMP.pack(request_id, -1, -1, -1, -1, error) + data)
        self.rings.ring_bells((n,))

    def _hold_or_send(self, n: int, request_id: int, data: bytes) -> None:
        """Send now, or hold until the writes of this step are replicated."""
        if not self._step:
            self._send(n, request_id, data)
            return
        waits = [(slot, needed, self.area.read(slot).leader_epoch) for slot, needed in self._step.items()]
        self.held.append(_Held(waits, time.monotonic() + self.commit_timeout_s, n, request_id, data,
                               self._durable))
        self._durable = []

    def _on_durable(self, fn: Any) -> None:
        """The coordinator's update to make once the write just made is replicated: it rides with
        the answer held for that write (and is dropped if the write fails)."""
        if self.area is None or not self._step:
            fn()  # standalone, or already below the high watermark
        else:
            self._durable.append(fn)

    def _release(self, now: float) -> None:
        keep = []
        for h in self.held:
            error = self._replicated(h)
            if error is None:
                if now <= h.deadline:
                    keep.append(h)
                    continue
                error = ErrorCode.COORDINATOR_NOT_AVAILABLE  # offsets.commit.timeout.ms
            if error:
                log.warning("a group write was not replicated in time: %s", ErrorCode(error).name)
                self._send(h.n, h.request_id, b"", int(error))
            else:
                for fn in h.on_success:
                    fn()
                self._send(h.n, h.request_id, h.data)
        self.held = keep

    def _replicated(self, h: _Held) -> int | None:
        """NONE when every write of ``h`` is below the HW, an error code, or None (not yet)."""
        for slot, needed, epoch in h.waits:
            p = self.partitions.partitions.get(slot)
            lead = self.area.read(slot)
            if p is None or lead.role != Role.LEADER or lead.leader_epoch != epoch:
                return ErrorCode.NOT_COORDINATOR
            if p.high_watermark < needed:
                return None
            if len(lead.isr) < int(p.log.config.min_insync_replicas):
                return ErrorCode.COORDINATOR_NOT_AVAILABLE  # Kafka: NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return ErrorCode.NONE

    def _flush_step(self) -> None:
        self._step = None
        # an update no answer waited for (none today: every commit has its answer)
        pending, self._durable = self._durable, []
        for fn in pending:
            fn()

    # -- a step of the transaction coordinator beside it (txn_host.py), cluster mode ---------
    def open_step(self) -> None:
        """Collect the writes the answers of this step wait for (as a group request does)."""
        self._step = {}

    def wait_for(self, slot: int, needed: int) -> None:
        """An answer of this step waits until ``slot``'s high watermark reaches ``needed``."""
        if self._step is not None:
            self._step[slot] = max(self._step.get(slot, 0), needed)

    def answer_step(self, n: int | None, request_id: int, data: bytes) -> tuple | None:
        """The completion now (no write to wait for), or None: held until this step's writes
        are replicated (offsets.commit.timeout.ms, the same rule as a group write)."""
        if not self._step:
            return -1, -1, -1, data
        self._hold_or_send(n, request_id, data)  # type: ignore[arg-type]
        return None

    def close_step(self) -> None:
        self._flush_step()

    def on_txn_marker(self, partition: int, producer_id: int, commit: bool) -> None:
        """A transaction marker was written on ``__consumer_offsets``-``partition`` (by the
        leader's WriteTxnMarkers handler): the producer's pending offsets there become the
        groups' committed offsets, or are dropped. Not while the partition is being loaded: the
        load replays the marker from the log."""
        if partition in self.coordinator.owned:
            self.coordinator.on_txn_marker(partition, producer_id, commit)

    def _respond_later(self, token: tuple, body: dict) -> None:
        """Answer a group request the coordinator held (a JoinGroup waiting for a rebalance)."""
        n, request_id, api_key, api_version = token
        data = API_BY_KEY[api_key].encode_response(api_version, body)
        if self.area is None:
            self._send(n, request_id, data)
        else:
            self._hold_or_send(n, request_id, data)

    def handle_group(self, n: int | None, request_id: int, slot: int, body: memoryview,
            acks: int, timeout_ms: int) -> tuple | None:
        """A group request (the handler of MsgType.GROUP): its encoded answer rides after the
        completion; None when the coordinator holds it (answered by _respond_later, or, in
        cluster mode, once what it wrote is replicated)."""
        api_key, api_version, cid_len, host_len = _GROUP.unpack_from(body, 0)
        pos = GROUP_HEADER.size
        client_id = bytes(body[pos:pos + cid_len]).decode(errors="replace")
        pos += cid_len
        client_host = bytes(body[pos:pos + host_len]).decode(errors="replace")
        pos += host_len
        api = API_BY_KEY[api_key]
        request = api.decode_request(api_version, bytes(body[pos:]))
        token = (n, request_id, api_key, api_version)
        if self.area is None:
            answer = self.coordinator.handle(api_key, api_version, request, token, client_id, client_host)
            return None if answer is None else (-1, -1, -1, api.encode_response(api_version, answer))
        info = self.partitions.table.read(slot)
        if info.topic != OFFSETS_TOPIC or self.partitions.partitions.get(slot) is None:
            raise error_for_code(ErrorCode.NOT_COORDINATOR)("not an offsets partition of this disk")
        self._follow(slot, info.partition)
        check_answerable(self.view.cache)
        if info.partition in self.loads:
            self._load_step()  # small partitions load at once; large ones answer "loading"
        self._step = {}
        try:
            answer = self.coordinator.handle(api_key, api_version, request, token, client_id, client_host)
            if answer is None:
                return None
            data = api.encode_response(api_version, answer)
            if not self._step:
                return -1, -1, -1, data
            self._hold_or_send(n, request_id, data)
            return None
        finally:
            self._flush_step()


def check_answerable(cache: Any) -> None:
    """Raise the retriable error a coordinator of this broker answers with while it must not
    answer from memory (cluster mode): the cluster's metadata not yet arrived, or this
    broker's ZooKeeper session in doubt (``cluster/session_fence.py``)."""
    if not cache.published:
        # a broker just started leads before the controller's first UpdateMetadata reaches
        # it: no commit can be judged yet (retriable; every group API takes this code)
        raise error_for_code(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)("the cluster's metadata has not arrived yet")
    if cache.fenced:
        # what it leads may have moved while its session was away: the client finds the
        # coordinator again (every group and transaction API takes this code)
        raise error_for_code(ErrorCode.NOT_COORDINATOR)("this broker's ZooKeeper session is in doubt")


def partition_chunks(plog):
    """A partition's whole batches, oldest first, a few MiB at a time."""
    offset = plog.log_start_offset
    while offset < plog.log_end_offset:
        data = plog.read_bytes(offset, 4 << 20, max_offset=plog.log_end_offset)
        if not data:
            break
        yield data
        offset = max(offset + 1, next_offset(data))


def partition_records(plog):
    """Every record of a partition, oldest first."""
    for data in partition_chunks(plog):
        yield from decode_records(data)


def replay(coordinator: GroupCoordinator, partition: int, data: bytes) -> None:
    """Apply whole batches of ``__consumer_offsets`` to a coordinator loading ``partition``: a
    transactional batch's offsets wait for their marker, a control batch is that marker."""
    for pos, _ in iter_batches(data):
        h, records = decode_batch(data, pos)
        if h.is_control:
            for r in records:
                try:
                    marker = marker_of_record(h, r.key, r.value)
                except KafkaError:  # an unreadable control record: no marker to replay
                    marker = None
                if marker is not None:
                    coordinator.on_txn_marker(partition, h.producer_id, marker.commit)
        elif h.is_transactional:
            coordinator.load_txn_records(partition, h.producer_id, h.producer_epoch, records)
        else:
            coordinator.load_records(partition, records)


def next_offset(data: bytes) -> int:
    """The offset after the last batch of ``data`` (whole batches), from the batch headers:
    a batch the cleaner emptied of records still moves the position on."""
    pos, nxt = 0, -1
    while pos + LAST_OFFSET_DELTA_OFFSET + 4 <= len(data):
        base = _I64.unpack_from(data, pos + BASE_OFFSET_OFFSET)[0]
        nxt = base + _I32.unpack_from(data, pos + LAST_OFFSET_DELTA_OFFSET)[0] + 1
        pos += LOG_OVERHEAD + _I32.unpack_from(data, pos + BATCH_LENGTH_OFFSET)[0]
    return nxt
