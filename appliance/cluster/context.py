"""What the active controller knows (Kafka's ControllerContext): live brokers, each partition's
replicas, leader/ISR and state-machine states. Rebuilt from ZooKeeper on every election; only
the controller thread touches it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from appliance.cluster.partition_state import PartitionState
from appliance.cluster.replica_state import ReplicaState
from appliance.cluster.request_batch import PartitionInfo
from appliance.cluster.zk_paths import BrokerInfo, LeaderIsr, TopicPartition

__all__ = ["ControllerContext", "Reassignment"]


@dataclass
class Reassignment:
    """A partition moving from ``original`` to ``target`` replicas."""

    original: tuple[int, ...]
    target: tuple[int, ...]

    @property
    def full(self) -> tuple[int, ...]:
        return tuple(dict.fromkeys(self.target + self.original))

    @property
    def adding(self) -> tuple[int, ...]:
        return tuple(r for r in self.target if r not in self.original)

    @property
    def removing(self) -> tuple[int, ...]:
        return tuple(r for r in self.original if r not in self.target)


@dataclass
class ControllerContext:
    epoch: int = 0
    epoch_zk_version: int = -1
    live: dict[int, BrokerInfo] = field(default_factory=dict)
    shutting_down: set[int] = field(default_factory=set)
    replicas: dict[TopicPartition, tuple[int, ...]] = field(default_factory=dict)
    leader_isr: dict[TopicPartition, LeaderIsr] = field(default_factory=dict)
    partition_states: dict[TopicPartition, PartitionState] = field(default_factory=dict)
    replica_states: dict[tuple[TopicPartition, int], ReplicaState] = field(default_factory=dict)
    topic_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    reassigning: dict[TopicPartition, Reassignment] = field(default_factory=dict)
    topics_deleting: set[str] = field(default_factory=set)
    topic_ids: dict[str, bytes] = field(default_factory=dict)  # KIP-516, as in ZooKeeper

    @property
    def live_ids(self) -> set[int]:
        """Brokers that may lead: registered and not shutting down."""
        return set(self.live) - self.shutting_down

    def topics(self) -> set[str]:
        return {tp.topic for tp in self.replicas}

    def partitions_of(self, topic: str) -> list[TopicPartition]:
        return sorted(tp for tp in self.replicas if tp.topic == topic)

    def partitions_on(self, broker_id: int) -> list[TopicPartition]:
        return sorted(tp for tp, rs in self.replicas.items() if broker_id in rs)

    def partitions_led_by(self, broker_id: int) -> list[TopicPartition]:
        return sorted(tp for tp, s in self.leader_isr.items() if s.leader == broker_id)

    def info(self, tp: TopicPartition) -> PartitionInfo:
        state = self.leader_isr.get(tp) or LeaderIsr(-1, -1, (), self.epoch)
        r = self.reassigning.get(tp)
        replicas = self.replicas[tp]
        return PartitionInfo(state, replicas, r.adding if r else (), r.removing if r else (),
                             tuple(b for b in replicas if b not in self.live))

    def all_infos(self) -> dict[TopicPartition, PartitionInfo]:
        return {tp: self.info(tp) for tp in self.replicas if tp in self.leader_isr}

    def remove_topic(self, topic: str) -> None:
        for tp in self.partitions_of(topic):
            for b in self.replicas.pop(tp):
                self.replica_states.pop((tp, b), None)
            self.leader_isr.pop(tp, None)
            self.partition_states.pop(tp, None)
            self.reassigning.pop(tp, None)
        self.topic_configs.pop(topic, None)
        self.topic_ids.pop(topic, None)
        self.topics_deleting.discard(topic)
