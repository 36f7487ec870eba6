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
    "ReplicaDeletionResult", "Barrier",
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
class ReplicaDeletionResult(ControllerEvent):
    """A broker answered a StopReplica(delete) for these partitions (error code per partition)."""

    broker_id: int
    results: dict[TopicPartition, int] = field(default_factory=dict)


@dataclass
class Barrier(ControllerEvent):
    """Does nothing; its ``done`` is set once every event queued before it has been processed."""

    done: Any = None
