"""The controller's events. ZooKeeper watches, timers, session changes and broker requests only
*create* one of these and put it on the controller's queue; the controller's single thread
processes them in order (Kafka's ControllerEvent / ControllerEventManager).

An event carrying ``reply`` is answered by calling it from the controller thread with the
response body (a dict shaped as the API's response schema).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from appliance.cluster.zk_paths import TopicPartition

__all__ = [
    "ControllerEvent", "Startup", "Reelect", "SessionExpired", "BrokerChange", "TopicChange",
    "PartitionModifications", "TopicDeletion", "IsrChangeNotification", "ReassignPartitions",
    "PreferredReplicaElection", "ControlledShutdown", "AutoLeaderRebalance", "ElectLeaders",
    "AlterPartitionReassignments", "ListPartitionReassignments", "ReplicaDeletionResult", "Barrier",
]


class ControllerEvent:
    """Base class; the controller dispatches on the class name (``process_<Name>``)."""


@dataclass
class Startup(ControllerEvent):
    pass


@dataclass
class Reelect(ControllerEvent):
    """/controller changed (or the session came back): try to become controller."""


@dataclass
class SessionExpired(ControllerEvent):
    pass


@dataclass
class BrokerChange(ControllerEvent):
    pass


@dataclass
class TopicChange(ControllerEvent):
    pass


@dataclass
class PartitionModifications(ControllerEvent):
    topic: str


@dataclass
class TopicDeletion(ControllerEvent):
    pass


@dataclass
class IsrChangeNotification(ControllerEvent):
    pass


@dataclass
class ReassignPartitions(ControllerEvent):
    pass


@dataclass
class PreferredReplicaElection(ControllerEvent):
    pass


@dataclass
class ControlledShutdown(ControllerEvent):
    broker_id: int
    reply: Callable[[dict[str, Any]], None] | None = None


@dataclass
class AutoLeaderRebalance(ControllerEvent):
    pass


@dataclass
class ElectLeaders(ControllerEvent):
    """ElectLeaders (API 43): election_type 0 = preferred, 1 = unclean; partitions None = all."""

    election_type: int
    partitions: set[TopicPartition] | None
    reply: Callable[[dict[str, Any]], None] | None = None


@dataclass
class AlterPartitionReassignments(ControllerEvent):
    """AlterPartitionReassignments (API 45): partition -> target replicas, None = cancel.
    ``reply`` gets partition -> (error code, message), or None when this controller is not
    active; ``same_replication_factor`` refuses a target of another length (v1's
    allow_replication_factor_change false)."""

    moves: dict[TopicPartition, tuple[int, ...] | None]
    reply: Callable[[dict[TopicPartition, tuple[int, str | None]] | None], None] | None = None
    same_replication_factor: bool = False


@dataclass
class ListPartitionReassignments(ControllerEvent):
    """ListPartitionReassignments (API 46); partitions None = all. ``reply`` gets partition ->
    (replicas, adding, removing) for those being reassigned, or None when not active."""

    partitions: set[TopicPartition] | None
    reply: Callable[[dict[TopicPartition, tuple[tuple[int, ...], ...]] | None], None] | None = None


@dataclass
class ReplicaDeletionResult(ControllerEvent):
    """A broker answered a StopReplica(delete) for these partitions (error code per partition)."""

    broker_id: int
    results: dict[TopicPartition, int] = field(default_factory=dict)


@dataclass
class Barrier(ControllerEvent):
    """Does nothing; its ``done`` is set once every event queued before it has been processed."""

    done: Any = None
