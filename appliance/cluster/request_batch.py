"""Controller -> broker requests: the abstract channel and the per-event batch
(Kafka's ControllerChannelManager and ControllerBrokerRequestBatch).

While one event is processed, every change is *added* to a :class:`RequestBatch`; at the end
of the event :meth:`RequestBatch.send` sends at most one LeaderAndIsr, one UpdateMetadata and
one StopReplica (per delete flag) to each broker. Bodies are dicts shaped exactly as the request
schemas of :mod:`appliance.protocol.messages.cluster` (LeaderAndIsr v3, UpdateMetadata v5,
StopReplica v1), so the wire channel of the integration only has to encode them.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from appliance.cluster.broker_connection import registered_endpoints
from appliance.cluster.zk_paths import BrokerInfo, LeaderIsr, TopicPartition
from appliance.config import SECURITY_PROTOCOLS

__all__ = [
    "BrokerChannel", "RequestBatch", "PartitionInfo", "LEADER_AND_ISR", "STOP_REPLICA",
    "UPDATE_METADATA", "LEADER_AND_ISR_VERSION", "UPDATE_METADATA_VERSION", "STOP_REPLICA_VERSION",
    "LEADER_DURING_DELETE", "NO_LEADER",
]

LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA = 4, 5, 6
# The last non-flexible versions: partitions grouped by topic; LeaderAndIsr v3 carries the
# adding/removing replicas of a reassignment (KIP-455).
LEADER_AND_ISR_VERSION, UPDATE_METADATA_VERSION, STOP_REPLICA_VERSION = 3, 5, 1
NO_LEADER = -1
# Kafka's LeaderAndIsr.LeaderDuringDelete: UpdateMetadata says "being deleted, do not serve".
LEADER_DURING_DELETE = -2

ResponseCallback = Callable[[int, dict[str, Any] | None], None]


class BrokerChannel(abc.ABC):
    """Delivers controller requests to brokers. ``send`` must not block the controller thread:
    queue the request and return. ``on_response(broker_id, body_or_None)`` is called later from
    any thread (None = the broker could not be reached); the controller only enqueues events
    from it. The integration implements this over the wire protocol, one connection per broker."""

    @abc.abstractmethod
    def add_broker(self, broker: BrokerInfo) -> None: ...

    @abc.abstractmethod
    def remove_broker(self, broker_id: int) -> None: ...

    @abc.abstractmethod
    def send(self, broker_id: int, api_key: int, api_version: int, body: dict[str, Any],
             on_response: ResponseCallback | None = None) -> None: ...


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """What the batch needs of a partition when it builds a request."""

    state: LeaderIsr
    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()
    offline: tuple[int, ...] = ()


class RequestBatch:
    """Collects one event's requests; not thread-safe (the controller thread only)."""

    def __init__(self, controller_id: int) -> None:
        self.controller_id = controller_id
        self._lai: dict[int, dict[TopicPartition, tuple[PartitionInfo, bool]]] = {}
        self._um_brokers: set[int] = set()
        self._um_parts: dict[TopicPartition, PartitionInfo] = {}
        self._um_all = False
        self._stop: dict[tuple[int, bool], set[TopicPartition]] = {}

    def empty(self) -> bool:
        return not (self._lai or self._um_brokers or self._stop)

    def add_leader_and_isr(self, brokers: Iterable[int], tp: TopicPartition, info: PartitionInfo,
                           is_new: bool = False) -> None:
        for b in brokers:
            self._lai.setdefault(b, {})[tp] = (info, is_new)
        self._um_parts[tp] = info  # every broker learns a leadership change (Kafka does the same)

    def add_update_metadata(self, brokers: Iterable[int], parts: dict[TopicPartition, PartitionInfo] | None = None,
                            ) -> None:
        """UpdateMetadata to ``brokers`` about ``parts`` (None = every partition: a new broker or
        a new controller sends the whole picture)."""
        self._um_brokers.update(brokers)
        if parts is None:
            self._um_all = True
        else:
            self._um_parts.update(parts)

    def add_stop_replica(self, brokers: Iterable[int], tp: TopicPartition, delete: bool) -> None:
        for b in brokers:
            self._stop.setdefault((b, delete), set()).add(tp)

    def send(self, channel: BrokerChannel, epoch: int, live: dict[int, BrokerInfo],
             all_parts: Callable[[], dict[TopicPartition, PartitionInfo]],
             on_stop_response: Callable[[int, bool], ResponseCallback] | None = None) -> None:
        """Send everything collected to the live brokers, then clear. ``all_parts`` gives the
        whole partition picture for an UpdateMetadata to every partition."""
        try:
            for b, parts in sorted(self._lai.items()):
                if b in live:
                    channel.send(b, LEADER_AND_ISR, LEADER_AND_ISR_VERSION,
                                 self._leader_and_isr(epoch, parts, live, live[b].epoch))
            if self._um_parts and not self._um_brokers:
                self._um_brokers = set(live)
            if self._um_brokers:
                parts = all_parts() if self._um_all else self._um_parts
                body = self._update_metadata(epoch, parts, live)
                for b in sorted(self._um_brokers):
                    if b in live:
                        channel.send(b, UPDATE_METADATA, UPDATE_METADATA_VERSION,
                                     {**body, "broker_epoch": live[b].epoch})
            for (b, delete), tps in sorted(self._stop.items()):
                if b in live:
                    cb = on_stop_response(b, delete) if on_stop_response else None
                    channel.send(b, STOP_REPLICA, STOP_REPLICA_VERSION,
                                 self._stop_replica(epoch, delete, tps, live[b].epoch), cb)
        finally:
            self.__init__(self.controller_id)  # type: ignore[misc]

    # -- bodies ------------------------------------------------------------------------------

    @staticmethod
    def _by_topic(parts: Iterable[TopicPartition]) -> dict[str, list[TopicPartition]]:
        out: dict[str, list[TopicPartition]] = {}
        for tp in sorted(parts):
            out.setdefault(tp.topic, []).append(tp)
        return out

    def _leader_and_isr(self, epoch: int, parts: dict[TopicPartition, tuple[PartitionInfo, bool]],
                        live: dict[int, BrokerInfo], broker_epoch: int) -> dict[str, Any]:
        leaders = {info.state.leader for info, _ in parts.values()}
        return {
            # KIP-380: the registration of the broker this is meant for (its znode's czxid)
            "controller_id": self.controller_id, "controller_epoch": epoch, "broker_epoch": broker_epoch,
            "topic_states": [{"topic_name": t, "partition_states": [
                {"partition_index": tp.partition, "controller_epoch": info.state.controller_epoch,
                 "leader": info.state.leader, "leader_epoch": info.state.leader_epoch,
                 "isr": list(info.state.isr), "zk_version": info.state.zk_version,
                 "replicas": list(info.replicas), "adding_replicas": list(info.adding),
                 "removing_replicas": list(info.removing), "is_new": is_new}
                for tp in tps for info, is_new in (parts[tp],)]}
                for t, tps in self._by_topic(parts).items()],
            "live_leaders": [{"broker_id": b, "host_name": live[b].host, "port": live[b].port}
                             for b in sorted(leaders) if b in live],
        }

    def _update_metadata(self, epoch: int, parts: dict[TopicPartition, PartitionInfo],
                         live: dict[int, BrokerInfo]) -> dict[str, Any]:
        return {
            "controller_id": self.controller_id, "controller_epoch": epoch, "broker_epoch": -1,
            "topic_states": [{"topic_name": t, "partition_states": [
                {"partition_index": tp.partition, "controller_epoch": parts[tp].state.controller_epoch,
                 "leader": parts[tp].state.leader, "leader_epoch": parts[tp].state.leader_epoch,
                 "isr": list(parts[tp].state.isr), "zk_version": parts[tp].state.zk_version,
                 "replicas": list(parts[tp].replicas), "offline_replicas": list(parts[tp].offline)}
                for tp in tps]} for t, tps in self._by_topic(parts).items()],
            # every listener of each broker (Kafka's UpdateMetadata v3+), the registration's order
            "live_brokers": [{"id": b.broker_id, "endpoints": [
                {"port": e.port, "host": e.host, "listener": e.listener,
                 "security_protocol": SECURITY_PROTOCOLS.index(e.security_protocol)}
                for e in registered_endpoints(b)],
                "rack": b.rack} for _, b in sorted(live.items())],
        }

    def _stop_replica(self, epoch: int, delete: bool, tps: set[TopicPartition],
                      broker_epoch: int) -> dict[str, Any]:
        return {
            "controller_id": self.controller_id, "controller_epoch": epoch, "broker_epoch": broker_epoch,
            "delete_partitions": delete,
            "topics": [{"name": t, "partition_indexes": [tp.partition for tp in group]}
                       for t, group in self._by_topic(tps).items()],
        }
