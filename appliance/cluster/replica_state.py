"""The replica state machine as a table (Kafka's ReplicaStateMachine).

Rules (a replica = one partition on one broker):

- NonExistent: never assigned, or deleted.
- New: just assigned (topic creation or reassignment); may only get a LeaderAndIsr as follower.
- Online: part of the assigned replicas on a live broker; gets LeaderAndIsr and UpdateMetadata.
- Offline: its broker died (or the replica's log dir failed); it leaves the ISR.
- DeletionStarted / DeletionSuccessful / DeletionIneligible: topic deletion, StopReplica with
  delete; a replica on a dead broker cannot be deleted now and waits Ineligible.
- NonExistent again after deletion or after reassignment dropped it.

The table is :data:`VALID_PREVIOUS`; :func:`check_transition` raises for anything else.
"""

from __future__ import annotations

import enum

from appliance.cluster.partition_state import IllegalStateTransition

__all__ = ["ReplicaState", "VALID_PREVIOUS", "check_transition"]


class ReplicaState(enum.Enum):
    NEW = "NewReplica"
    ONLINE = "OnlineReplica"
    OFFLINE = "OfflineReplica"
    DELETION_STARTED = "ReplicaDeletionStarted"
    DELETION_SUCCESSFUL = "ReplicaDeletionSuccessful"
    DELETION_INELIGIBLE = "ReplicaDeletionIneligible"
    NON_EXISTENT = "NonExistentReplica"


R = ReplicaState
VALID_PREVIOUS: dict[ReplicaState, frozenset[ReplicaState]] = {
    R.NEW: frozenset({R.NON_EXISTENT}),
    R.ONLINE: frozenset({R.NEW, R.ONLINE, R.OFFLINE, R.DELETION_INELIGIBLE}),
    R.OFFLINE: frozenset({R.NEW, R.ONLINE, R.OFFLINE, R.DELETION_INELIGIBLE}),
    R.DELETION_STARTED: frozenset({R.OFFLINE}),
    R.DELETION_SUCCESSFUL: frozenset({R.DELETION_STARTED}),
    R.DELETION_INELIGIBLE: frozenset({R.DELETION_STARTED, R.OFFLINE}),
    R.NON_EXISTENT: frozenset({R.DELETION_SUCCESSFUL}),
}


def check_transition(what: object, current: ReplicaState, target: ReplicaState) -> None:
    """Raises IllegalStateTransition unless ``current -> target`` is in the table."""
    if current not in VALID_PREVIOUS[target]:
        raise IllegalStateTransition(f"replica {what}: {current.value} -> {target.value} is not allowed")
