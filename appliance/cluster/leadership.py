"""The receiving side of the controller's requests on every broker (Kafka's
ReplicaManager.becomeLeaderOrFollower / stopReplicas and MetadataCache.updateMetadata):
what this broker leads and follows, and the cluster metadata it answers Metadata with.

The cluster worker feeds it the decoded LeaderAndIsr / StopReplica / UpdateMetadata requests
and publishes the result into the shared partition table; the returned :class:`Changes` say
which partitions must start leading (assign the new leader epoch in the leader epoch cache at
the log end offset, stop fetching) and which must start following (truncate by
OffsetsForLeaderEpoch, then fetch from the new leader).

Fencing (:class:`~appliance.cluster.epoch_fence.ControllerEpochFence`): a request from an older
controller epoch is refused whole with STALE_CONTROLLER_EPOCH; a partition entry with an older
leader epoch than the one held gets FENCED_LEADER_EPOCH; both leave the state unchanged.

Thread-safety: none; the cluster worker's single thread owns it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from appliance.cluster.epoch_fence import ControllerEpochFence
from appliance.cluster.zk_paths import TopicPartition
from appliance.errors import ErrorCode

__all__ = ["PartitionLeadership", "Changes", "LeadershipTable", "LEADER_DURING_DELETE", "partition_states"]

LEADER_DURING_DELETE = -2


@dataclass(frozen=True, slots=True)
class PartitionLeadership:
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    zk_version: int
    controller_epoch: int
    offline: tuple[int, ...] = ()


@dataclass
class Changes:
    became_leader: list[TopicPartition] = field(default_factory=list)
    became_follower: list[TopicPartition] = field(default_factory=list)
    stopped: list[TopicPartition] = field(default_factory=list)
    deleted: list[TopicPartition] = field(default_factory=list)


def partition_states(request: Any, grouped_field: str, ungrouped_field: str):
    """(TopicPartition, state) of a request in either layout (v0-1 ungrouped, v2+ by topic)."""
    for ts in getattr(request, grouped_field, None) or []:
        for ps in ts.partition_states:
            yield TopicPartition(ts.topic_name, ps.partition_index), ps
    for ps in getattr(request, ungrouped_field, None) or []:
        yield TopicPartition(ps.topic_name, ps.partition_index), ps


class LeadershipTable:
    """This broker's view: the partitions it holds a replica of (``local``) and the metadata of
    every partition in the cluster (``metadata``, from UpdateMetadata) with the live brokers."""

    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id
        self.fence = ControllerEpochFence()
        self.local: dict[TopicPartition, PartitionLeadership] = {}
        self.metadata: dict[TopicPartition, PartitionLeadership] = {}
        self.live_brokers: dict[int, tuple[str, int, str | None]] = {}  # id -> (host, port, rack)
        # id -> listener name -> (host, port): every endpoint UpdateMetadata gave (v3+ names them)
        self.endpoints: dict[int, dict[str, tuple[str, int]]] = {}

    def brokers_on(self, listener: str) -> dict[int, tuple[str, int, str | None]]:
        """The live brokers at their address on ``listener`` (Kafka answers a client with the
        endpoints of the listener its request came in on); a broker with no endpoint by that
        name, or an unnamed listener (""), at its first."""
        if not listener:
            return self.live_brokers
        out = {}
        for b, (host, port, rack) in self.live_brokers.items():
            host, port = self.endpoints.get(b, {}).get(listener, (host, port))
            out[b] = (host, port, rack)
        return out

    def leads(self, tp: TopicPartition) -> bool:
        s = self.local.get(tp)
        return s is not None and s.leader == self.broker_id

    # -- LeaderAndIsr ----------------------------------------------------------------------------

    def apply_leader_and_isr(self, request: Any) -> tuple[dict[str, Any], Changes]:
        """Returns the LeaderAndIsr response body and what changed."""
        changes = Changes()
        entries = list(partition_states(request, "topic_states", "ungrouped_partition_states"))
        if self.fence.admit(request.controller_id, request.controller_epoch) != ErrorCode.NONE:
            return self._errors(entries, ErrorCode.STALE_CONTROLLER_EPOCH), changes
        errors = []
        for tp, ps in entries:
            cur = self.local.get(tp)
            code = ErrorCode.NONE
            if self.broker_id not in ps.replicas:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION  # not ours: Kafka ignores it too
            elif cur is not None and self.fence.admit_leader_epoch(cur.leader_epoch, ps.leader_epoch):
                code = ErrorCode.FENCED_LEADER_EPOCH
            else:
                new = PartitionLeadership(ps.leader, ps.leader_epoch, tuple(ps.isr), tuple(ps.replicas),
                                          ps.zk_version, ps.controller_epoch)
                self.local[tp] = new
                # equal epochs are a resend (new controller): a change only if leadership moved
                moved = cur is None or cur.leader_epoch != new.leader_epoch or cur.leader != new.leader
                if moved:
                    (changes.became_leader if new.leader == self.broker_id else changes.became_follower).append(tp)
            errors.append((tp, code))
        return {"error_code": 0, "partition_errors": [
            {"topic_name": tp.topic, "partition_index": tp.partition, "error_code": int(c)} for tp, c in errors]}, changes

    # -- StopReplica -------------------------------------------------------------------------------

    def apply_stop_replica(self, request: Any) -> tuple[dict[str, Any], Changes]:
        changes = Changes()
        tps = [TopicPartition(t.name, p) for t in (getattr(request, "topics", None) or [])
               for p in t.partition_indexes]
        tps += [TopicPartition(u.topic_name, u.partition_index)
                for u in (getattr(request, "ungrouped_partitions", None) or [])]
        if self.fence.admit(request.controller_id, request.controller_epoch) != ErrorCode.NONE:
            body = {"error_code": int(ErrorCode.STALE_CONTROLLER_EPOCH), "partition_errors": []}
            return body, changes
        for tp in tps:
            changes.stopped.append(tp)
            if request.delete_partitions:
                self.local.pop(tp, None)
                changes.deleted.append(tp)
        return {"error_code": 0, "partition_errors": [
            {"topic_name": tp.topic, "partition_index": tp.partition, "error_code": 0} for tp in tps]}, changes

    # -- UpdateMetadata ----------------------------------------------------------------------------

    def apply_update_metadata(self, request: Any) -> dict[str, Any]:
        if self.fence.admit(request.controller_id, request.controller_epoch) != ErrorCode.NONE:
            return {"error_code": int(ErrorCode.STALE_CONTROLLER_EPOCH)}
        live, endpoints = {}, {}
        for b in request.live_brokers:
            eps = getattr(b, "endpoints", None) or []
            host, port = (eps[0].host, eps[0].port) if eps else (b.v0_host, b.v0_port)
            live[b.id] = (host, port, getattr(b, "rack", None))
            endpoints[b.id] = {ep.listener: (ep.host, ep.port) for ep in eps if getattr(ep, "listener", None)}
        self.live_brokers, self.endpoints = live, endpoints
        for tp, ps in partition_states(request, "topic_states", "ungrouped_partition_states"):
            if ps.leader == LEADER_DURING_DELETE:
                self.metadata.pop(tp, None)  # being deleted: no longer served or listed
                continue
            self.metadata[tp] = PartitionLeadership(ps.leader, ps.leader_epoch, tuple(ps.isr),
                                                    tuple(ps.replicas), ps.zk_version, ps.controller_epoch,
                                                    tuple(getattr(ps, "offline_replicas", None) or ()))
        return {"error_code": 0}

    @staticmethod
    def _errors(entries: list, code: int) -> dict[str, Any]:
        return {"error_code": int(code), "partition_errors": [
            {"topic_name": tp.topic, "partition_index": tp.partition, "error_code": int(code)}
            for tp, _ in entries]}
