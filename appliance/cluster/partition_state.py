"""The partition state machine as a table (Kafka's PartitionStateMachine).

Rules:

- NonExistent: no such partition, or it was deleted.
- New: assigned replicas exist (topic znode written) but no leader has been elected yet.
- Online: a leader is elected and serving.
- Offline: the leader died and no new one could be elected (yet).

A transition not in :data:`VALID_PREVIOUS` is a bug in the controller; :func:`check_transition`
raises :class:`IllegalStateTransition` for it. The side effects of each transition (leader
election, znode writes, requests to brokers) live in one place, the controller's
``partitions_to`` method.
"""

from __future__ import annotations

import enum

__all__ = ["PartitionState", "VALID_PREVIOUS", "IllegalStateTransition", "check_transition"]


class PartitionState(enum.Enum):
    NON_EXISTENT = "NonExistentPartition"
    NEW = "NewPartition"
    ONLINE = "OnlinePartition"
    OFFLINE = "OfflinePartition"


class IllegalStateTransition(RuntimeError):
    """A state change the table does not allow (names the object and both states)."""


P = PartitionState
# target state -> the states it may be entered from
VALID_PREVIOUS: dict[PartitionState, frozenset[PartitionState]] = {
    P.NEW: frozenset({P.NON_EXISTENT}),
    P.ONLINE: frozenset({P.NEW, P.ONLINE, P.OFFLINE}),
    P.OFFLINE: frozenset({P.NEW, P.ONLINE, P.OFFLINE}),
    P.NON_EXISTENT: frozenset({P.OFFLINE}),
}


def check_transition(what: object, current: PartitionState, target: PartitionState) -> None:
    """Raises IllegalStateTransition unless ``current -> target`` is in the table."""
    if current not in VALID_PREVIOUS[target]:
        raise IllegalStateTransition(f"partition {what}: {current.value} -> {target.value} is not allowed")
