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
when it is created); a write is durable once appended. Cluster mode is not hosted yet: a request
is answered NOT_COORDINATOR (see docs/architecture.md, "Transactions").

Markers go through :class:`~appliance.broker.disk.txn_markers.MarkerSender` (a thread, started
with the first decided transaction); the jobs it finishes come back through a queue, and the
loop is woken through the disk's own doorbell.
"""

from __future__ import annotations

import logging
import os
import struct
from typing import Any

from appliance.broker.cluster_view import ClusterView
from appliance.broker.disk.coordinator_host import partition_records
from appliance.broker.disk.partitions import Partitions
from appliance.broker.disk.ring_intake import RingIntake
from appliance.broker.disk.txn_markers import MarkerSender, security_of
from appliance.config import BrokerConfig
from appliance.coordinator.routing import TXN_TOPIC
from appliance.coordinator.txn_coordinator import (
    API_INIT_PRODUCER_ID,
    MarkerJob,
    TransactionCoordinator,
)
from appliance.errors import ErrorCode, error_for_code
from appliance.protocol.messages.core import InitProducerId
from appliance.protocol.messages.transactions import AddOffsetsToTxn, AddPartitionsToTxn, EndTxn
from appliance.shm.layout import GROUP_HEADER
from appliance.shm.partition_index import PartitionIndex

__all__ = ["TxnCoordinatorHost", "SPARE_ID", "TXN_API_CLASSES"]

log = logging.getLogger("appliance.coordinator.txn")

_GROUP = GROUP_HEADER.struct  # type: ignore[attr-defined]
SPARE_ID = struct.Struct(">q")  # before a forwarded InitProducerId's body
TXN_API_CLASSES = {c.API_KEY: c for c in (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn)}


class TxnCoordinatorHost:
    def __init__(self, config: BrokerConfig, partitions: Partitions, rings: RingIntake, bell: int) -> None:
        self.config = config
        self.partitions = partitions
        self.rings = rings
        self.bell = bell  # this disk worker's doorbell: the marker thread wakes the loop with it
        self.view = ClusterView(PartitionIndex(partitions.table))
        self.cluster = bool(config["zookeeper.connect"])
        self.coordinator = TransactionCoordinator(
            config, int(config["transaction.state.log.num.partitions"]),
            append=self._append, send_markers=self._send_markers,
            partition_exists=lambda t, p: self.view.has_partition(t, p))
        self.markers: MarkerSender | None = None
        partitions.created_hooks.append(self._partition_created)

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
            total = self.partitions.table.read(slot).num_partitions
            if total > 0:
                self.coordinator.num_partitions = total

    def _partition_created(self, topic: str, partition: int) -> None:
        if topic == TXN_TOPIC and not self.cluster:
            self._count_from(partition)
            self.coordinator.load(partition, ())

    # -- the loop's side ------------------------------------------------------------------
    def poll(self) -> int:
        """Complete the transactions whose markers are written; run the timers. When to run
        next (epoch ms)."""
        if self.markers is not None:
            while True:
                try:
                    job = self.markers.done.get_nowait()
                except Exception:  # queue.Empty
                    break
                self.coordinator.markers_written(job.transactional_id, job.producer_id, job.epoch)
        return self.coordinator.poll()

    def close(self) -> None:
        if self.markers is not None:
            self.markers.close()

    # -- writes and markers ---------------------------------------------------------------
    def _append(self, partition: int, batch: bytes) -> None:
        parts = self.partitions
        slot = parts.slot_of.get((TXN_TOPIC, partition))
        if slot is None or slot not in parts.partitions:
            raise error_for_code(ErrorCode.NOT_COORDINATOR)(f"{TXN_TOPIC}-{partition} is not here")
        p = parts.partitions[slot]
        p.log.append(batch)
        p.advance_alone()
        parts.publish(slot, p.log)

    def _send_markers(self, job: MarkerJob) -> None:
        if self.markers is None:
            self.markers = MarkerSender(self._resolve, lambda t, p: self.view.has_partition(t, p),
                                        self._wake, security_of(self.config),
                                        client_id=f"txn-coordinator-{self.config['broker.id']}")
        self.markers.submit(job)

    def _resolve(self, topic: str, partition: int) -> tuple[str, int] | None:
        """Standalone: every partition's leader is this broker, at its inter-broker listener."""
        inter = self.config.inter_broker_listener
        ep = next((e for e in self.config.listener_endpoints if e.listener == inter), None)
        if ep is None:
            return None
        return (ep.host if ep.host not in ("", "0.0.0.0", "::") else "127.0.0.1"), ep.port

    def _wake(self) -> None:
        try:
            os.eventfd_write(self.bell, 1)
        except OSError:  # the loop looks every IDLE_WAIT_S anyway
            pass

    # -- requests -------------------------------------------------------------------------
    def handle(self, n: int | None, request_id: int, slot: int, body: memoryview,
               acks: int, timeout_ms: int) -> tuple:
        """A transaction API request (a MsgType.GROUP message whose API key is one of them);
        its encoded answer rides after the completion."""
        api_key, api_version, cid_len, host_len = _GROUP.unpack_from(body, 0)
        pos = GROUP_HEADER.size + cid_len + host_len
        spare = -1
        if api_key == API_INIT_PRODUCER_ID:
            spare = SPARE_ID.unpack_from(body, pos)[0]
            pos += SPARE_ID.size
        api = TXN_API_CLASSES[api_key]
        request = api.decode_request(api_version, bytes(body[pos:]))
        if self.cluster:
            raise error_for_code(ErrorCode.NOT_COORDINATOR)("transactions are not hosted in cluster mode yet")
        info = self.partitions.table.read(slot)
        if info.topic != TXN_TOPIC or self.partitions.partitions.get(slot) is None:
            raise error_for_code(ErrorCode.NOT_COORDINATOR)("not a transaction state partition of this disk")
        answer: Any = self.coordinator.handle(api_key, api_version, request, spare)
        return -1, -1, -1, api.encode_response(api_version, answer)
