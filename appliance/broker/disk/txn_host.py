"""The transaction coordinator inside a disk worker: it coordinates every transactional id whose
``__transaction_state`` partition this disk holds, appends its records there, and answers the
transaction APIs the network workers route to it through the rings (``MsgType.GROUP``, the same
message the group APIs travel in: the API key tells the two coordinators apart).

The body of a forwarded InitProducerId starts with 8 bytes before the encoded request: a
producer id the network worker took from the broker's block (``process/producer_ids.py``), for
a new transactional id or one whose epoch is exhausted. The network worker has the block and
its refill (a blocking fetch from ZooKeeper or an fsync, which a disk worker's loop must not
wait on); an id taken and not used is skipped, as Kafka skips the rest of a block.

Standalone: every ``__transaction_state`` partition of the disk is loaded at start (and a new one
when it is created); a write is durable once appended.

Cluster mode, as the group coordinator (``coordinator_host.py``): a partition is loaded when this
broker leads it (read from the leadership area on each request and every
``LEADERSHIP_CHECK_S``), whole, at once (the topic is compacted and holds one small record per
transactional id), with its leader epoch as the coordinator epoch of its markers; it is unloaded
when the leadership goes. Every write is a leader append, and the answer given with it is held
until the high watermark passes it (the group host's held answers: acks=all, past
offsets.commit.timeout.ms COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR if the leadership moved).
The coordinator's memory moves with the append, before it is replicated (Kafka waits); a lost
leadership unloads it, and the next leader reloads what was replicated. The markers of a decision
wait until the decision itself is replicated (:meth:`TxnCoordinatorHost._release_markers`): a
marker is never written for a decision a new leader might not find.

Markers go through :class:`~appliance.broker.disk.txn_markers.MarkerSender` (a thread, started
with the first decided transaction); the jobs it finishes come back through a queue, and the
loop is woken through the disk's own doorbell.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import queue
import time
from typing import Any

from appliance.broker.cluster_view import ClusterView
from appliance.broker.disk.coordinator_append import coordinator_append
from appliance.broker.disk.coordinator_host import (
    LEADERSHIP_CHECK_S,
    CoordinatorHost,
    check_answerable,
    partition_records,
)
from appliance.broker.disk.partitions import Partitions
from appliance.broker.disk.requests import NotHere
from appliance.broker.disk.txn_markers import MarkerSender, security_of
from appliance.config import BrokerConfig
from appliance.coordinator.routing import TXN_TOPIC
from appliance.coordinator.txn_coordinator import (
    API_INIT_PRODUCER_ID,
    MarkerJob,
    TransactionCoordinator,
)
from appliance.errors import ErrorCode, KafkaError, error_for_code
from appliance.protocol.messages.core import InitProducerId
from appliance.protocol.messages.transactions import (
    AddOffsetsToTxn,
    AddPartitionsToTxn,
    DescribeTransactions,
    EndTxn,
    ListTransactions,
)
from appliance.shm.layout import GROUP_HEADER, SPARE_PRODUCER_ID, TXN_MARKER_BODY, Role
from appliance.shm.partition_index import PartitionIndex

__all__ = ["TxnCoordinatorHost", "TXN_API_CLASSES"]

log = logging.getLogger("appliance.coordinator.txn")

_GROUP = GROUP_HEADER.struct  # type: ignore[attr-defined]
_SPARE = SPARE_PRODUCER_ID.struct  # type: ignore[attr-defined]
_MARKER = TXN_MARKER_BODY.struct  # type: ignore[attr-defined]
TXN_API_CLASSES = {c.API_KEY: c for c in (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
                                           DescribeTransactions, ListTransactions)}
# the read-only ones (KIP-664): answered from memory, nothing written, nothing held
_QUERIES = frozenset({DescribeTransactions.API_KEY, ListTransactions.API_KEY})


class TxnCoordinatorHost:
    def __init__(self, config: BrokerConfig, partitions: Partitions, bell: int) -> None:
        self.config = config
        self.partitions = partitions
        self.bell = bell  # this disk worker's doorbell: the marker thread wakes the loop with it
        self.view = ClusterView(PartitionIndex(partitions.table))
        self.cluster = bool(config["zookeeper.connect"])
        self.coordinator = TransactionCoordinator(
            config, int(config["transaction.state.log.num.partitions"]),
            append=self._append, send_markers=self._send_markers,
            partition_exists=lambda t, p: self.view.has_partition(t, p))
        self.markers: MarkerSender | None = None
        partitions.created_hooks.append(self._partition_created)
        # cluster mode (attach_cluster)
        self.area: Any = None
        self.replication: Any = None
        self.groups: CoordinatorHost | None = None  # whose held answers ours join
        self.epochs: dict[int, int] = {}  # transaction state partition -> leader epoch loaded
        self._next_check = 0.0
        # the last write (slot, offset the HW must reach, leader epoch): a decision's markers
        # wait for it; while a partition loads, its log end
        self._last_write: tuple[int, int, int] | None = None
        self._gated: list[tuple[MarkerJob, tuple[int, int, int]]] = []  # markers waiting for the HW
        self._local: list[MarkerJob] = []  # standalone: written by this loop's next turn

    def attach_cluster(self, area: Any, replication: Any, metadata: Any, groups: CoordinatorHost) -> None:
        """Cluster mode: the leadership area, the leader's append path, the cluster's metadata
        (which partitions exist), and the group host whose held answers ours join."""
        self.view = ClusterView(self.view.index, metadata)
        self.area, self.replication, self.groups = area, replication, groups

    # -- loading --------------------------------------------------------------------------
    def load(self) -> None:
        """Standalone: read the transactions' state back from this disk's partitions."""
        if self.cluster or self.partitions.log_dir is None:
            return
        for (topic, partition), plog in self.partitions.log_dir.partitions.items():
            if topic == TXN_TOPIC:
                self._count_from(partition)
                self.coordinator.load(partition, partition_records(plog))

    def _count_from(self, partition: int) -> None:
        """The topic's own partition count (the table's), should it differ from the config."""
        slot = self.partitions.slot_of.get((TXN_TOPIC, partition))
        if slot is not None:
            total = self.view.partition_count(TXN_TOPIC, self.partitions.table.read(slot).num_partitions)
            if total > 0:
                self.coordinator.num_partitions = total

    def _partition_created(self, topic: str, partition: int) -> None:
        if topic == TXN_TOPIC and not self.cluster:
            self._count_from(partition)
            self.coordinator.load(partition, ())

    # -- the loop's side ------------------------------------------------------------------
    def poll(self) -> int:
        """Follow the leadership (cluster mode); complete the transactions whose markers are
        written; run the timers. When to run next (epoch ms)."""
        if self.area is not None:
            now = time.monotonic()
            if now >= self._next_check:
                self._next_check = now + LEADERSHIP_CHECK_S
                for (topic, partition), slot in list(self.partitions.slot_of.items()):
                    if topic == TXN_TOPIC:
                        self._follow(slot, partition)
                for partition in [p for p in self.epochs if (TXN_TOPIC, p) not in self.partitions.slot_of]:
                    self.coordinator.unload(partition)  # gone from this disk (deleted, dir failed)
                    del self.epochs[partition]
        if self._gated:
            self._release_markers()
        if self._local:
            self._write_local()
        if self.markers is not None:
            while True:
                try:
                    job = self.markers.done.get_nowait()
                except queue.Empty:
                    break
                self.coordinator.markers_written(job.transactional_id, job.producer_id, job.epoch)
        return self.coordinator.poll()

    def close(self) -> None:
        if self.markers is not None:
            self.markers.close()

    def _follow(self, slot: int, partition: int) -> None:
        """Load or unload ``partition`` as the leadership area says (cluster mode)."""
        lead = self.area.read(slot)
        mine = self.epochs.get(partition)
        if lead.role == Role.LEADER and mine == lead.leader_epoch:
            return
        if mine is not None:
            self.coordinator.unload(partition)
            del self.epochs[partition]
        p = self.partitions.partitions.get(slot)
        # loaded once the controller's metadata has come: it holds the partition count the ids
        # are routed by (ClusterView.partition_count); no request is answered before it either
        if lead.role == Role.LEADER and p is not None and self.view.cache.published:
            self.epochs[partition] = lead.leader_epoch
            self._count_from(partition)
            # what is loaded may be above the HW: resumed markers wait until it is replicated
            self._last_write = (slot, p.log.log_end_offset, lead.leader_epoch)
            # the leader's whole log: what is above the HW is the leader's and stays
            self.coordinator.load(partition, partition_records(p.log), coordinator_epoch=lead.leader_epoch)
            log.info("leading %s-%d (epoch %d): its transactions loaded", TXN_TOPIC, partition, lead.leader_epoch)

    # -- writes and markers ---------------------------------------------------------------
    def _append(self, partition: int, batch: bytes) -> None:
        written = coordinator_append(self.partitions, self.area, self.replication, self.epochs,
                                     TXN_TOPIC, partition, batch)
        if written is None:
            return
        slot, needed = written
        self._last_write = (slot, needed, self.epochs[partition])
        if self.partitions.partitions[slot].high_watermark < needed and self.groups is not None:
            self.groups.wait_for(slot, needed)

    def _send_markers(self, job: MarkerJob) -> None:
        """Standalone: to the sender now. Cluster mode: once the decision (the last write) is
        replicated."""
        if self.area is not None and self._last_write is not None:
            self._gated.append((job, self._last_write))
            self._release_markers()
            return
        self._submit(job)

    def _release_markers(self) -> None:
        """Hand the gated markers whose decision the high watermark passed to the sender; drop
        those whose partition is no longer led in that epoch (its next leader resumes them)."""
        keep = []
        for job, (slot, needed, epoch) in self._gated:
            lead = self.area.read(slot)
            p = self.partitions.partitions.get(slot)
            if p is None or lead.role != Role.LEADER or lead.leader_epoch != epoch:
                continue
            if p.high_watermark >= needed:
                self._submit(job)
            else:
                keep.append((job, (slot, needed, epoch)))
        self._gated = keep

    def _submit(self, job: MarkerJob) -> None:
        if self.area is None:
            # standalone: this disk's own partitions get their markers from this loop's next
            # turn (poll), not through the network worker and back. Measured: a transaction's
            # markers took a Metadata and a WriteTxnMarkers round trip through the network
            # worker, and the producer's next AddPartitionsToTxn often came first, was answered
            # CONCURRENT_TRANSACTIONS and backed off 20 ms (librdkafka): a third of the time of
            # 1,000-record transactions (perf/README.md, bench_transactions.py)
            self._local.append(job)
            self._wake()
            return
        self._to_sender(job)

    def _write_local(self) -> None:
        """Write the markers of the jobs handed over whose partitions are on this disk; the
        other partitions' go to the sender (another disk of this broker, or a failure here:
        the sender retries them); a job with no partition left is complete."""
        jobs, self._local = self._local, []
        for job in jobs:
            rest = tuple(tp for tp in job.partitions if not self._write_here(job, tp))
            if rest:
                self._to_sender(dataclasses.replace(job, partitions=rest))
            else:
                self.coordinator.markers_written(job.transactional_id, job.producer_id, job.epoch)

    def _write_here(self, job: MarkerJob, tp: tuple[str, int]) -> bool:
        """True if ``tp`` is a partition of this disk and its marker is written."""
        slot = self.partitions.slot_of.get(tp)
        if slot is None or slot not in self.partitions.partitions:
            return False
        body = _MARKER.pack(job.producer_id, job.coordinator_epoch, job.epoch, 1 if job.commit else 0)
        try:
            self.partitions.write_txn_marker(None, 0, slot, memoryview(body), -1, 0)
        except (KafkaError, NotHere) as e:
            log.info("marker for %s-%d (transactional id %r) not written here: %s; sending it",
                     tp[0], tp[1], job.transactional_id, e)
            return False
        return True

    def _to_sender(self, job: MarkerJob) -> None:
        if self.markers is None:
            self.markers = MarkerSender(self._home(), self._wake, security_of(self.config),
                                        client_id=f"txn-coordinator-{self.config['broker.id']}")
        self.markers.submit(job)

    def _home(self) -> tuple[str, int]:
        """This broker's inter-broker listener: the marker sender asks it for the leaders."""
        inter = self.config.inter_broker_listener
        ep = next(e for e in self.config.listener_endpoints if e.listener == inter)
        return (ep.host if ep.host not in ("", "0.0.0.0", "::") else "127.0.0.1"), ep.port

    def _wake(self) -> None:
        try:
            os.eventfd_write(self.bell, 1)
        except OSError:  # the loop looks every IDLE_WAIT_S anyway
            pass

    # -- requests -------------------------------------------------------------------------
    def handle(self, n: int | None, request_id: int, slot: int, body: memoryview,
               acks: int, timeout_ms: int) -> tuple | None:
        """A transaction API request (a MsgType.GROUP message whose API key is one of them);
        its encoded answer rides after the completion (None: held until replicated)."""
        api_key, api_version, cid_len, host_len = _GROUP.unpack_from(body, 0)
        pos = GROUP_HEADER.size + cid_len + host_len
        spare = -1
        if api_key == API_INIT_PRODUCER_ID:
            spare = _SPARE.unpack_from(body, pos)[0]
            pos += SPARE_PRODUCER_ID.size
        api = TXN_API_CLASSES[api_key]
        request = api.decode_request(api_version, bytes(body[pos:]))
        info = self.partitions.table.read(slot)
        if info.topic != TXN_TOPIC or self.partitions.partitions.get(slot) is None:
            raise error_for_code(ErrorCode.NOT_COORDINATOR)("not a transaction state partition of this disk")
        if api_key in _QUERIES:
            return -1, -1, -1, api.encode_response(api_version, self._query(api_key, request))
        if self.area is None:
            answer: Any = self.coordinator.handle(api_key, api_version, request, spare)
            return -1, -1, -1, api.encode_response(api_version, answer)
        self._follow(slot, info.partition)
        check_answerable(self.view.cache)
        assert self.groups is not None
        self.groups.open_step()
        try:
            answer = self.coordinator.handle(api_key, api_version, request, spare)
            return self.groups.answer_step(n, request_id, api.encode_response(api_version, answer))
        finally:
            self.groups.close_step()

    def _query(self, api_key: int, request: Any) -> dict:
        """DescribeTransactions (of ids this disk coordinates, as the network worker routed
        them) or ListTransactions (every id of this disk's partitions). Cluster mode: the
        leadership of each of the disk's partitions is followed first, so a partition this
        broker has just come to lead is loaded before it is read."""
        if self.area is not None:
            for (topic, partition), slot in list(self.partitions.slot_of.items()):
                if topic == TXN_TOPIC:
                    self._follow(slot, partition)
        if api_key == DescribeTransactions.API_KEY:
            return {"throttle_time_ms": 0,
                    "transaction_states": [self.coordinator.describe(t) for t in request.transactional_ids]}
        return self.coordinator.list_transactions(request.state_filters, request.producer_id_filters,
                                                  getattr(request, "duration_filter", -1))
