"""The receiving side of controller fencing: a broker accepts LeaderAndIsr, UpdateMetadata and
StopReplica only from the newest controller it has seen (Kafka's ``ReplicaManager`` check of
``controllerEpoch``). An older epoch is a controller that lost its session but has not noticed
yet; its requests get STALE_CONTROLLER_EPOCH and change nothing.

Also the per-partition rule: a LeaderAndIsr entry whose leader epoch is older than the one the
broker holds is stale (reordered, or from before a failover); that partition answers
FENCED_LEADER_EPOCH and keeps its state, the rest of the request is applied.

Thread-safety: one instance per broker, used by its cluster worker's single thread.
"""

from __future__ import annotations

from appliance.errors import ErrorCode

__all__ = ["ControllerEpochFence"]

NONE = ErrorCode.NONE
STALE_CONTROLLER_EPOCH = ErrorCode.STALE_CONTROLLER_EPOCH
FENCED_LEADER_EPOCH = ErrorCode.FENCED_LEADER_EPOCH


class ControllerEpochFence:
    """Remembers the newest controller epoch (and its controller id) this broker has obeyed."""

    def __init__(self) -> None:
        self.epoch = 0
        self.controller_id = -1

    def admit(self, controller_id: int, controller_epoch: int) -> int:
        """The error code for a controller request: NONE (and the epoch is remembered) or
        STALE_CONTROLLER_EPOCH when ``controller_epoch`` is older than one already seen."""
        if controller_epoch < self.epoch:
            return STALE_CONTROLLER_EPOCH
        self.epoch = controller_epoch
        self.controller_id = controller_id
        return NONE

    @staticmethod
    def admit_leader_epoch(current: int, requested: int) -> int:
        """Per partition of a LeaderAndIsr: NONE when ``requested`` is not older than the
        ``current`` leader epoch the broker holds (equal = a resend after controller failover),
        else FENCED_LEADER_EPOCH and the partition's state stays as it is."""
        return NONE if requested >= current else FENCED_LEADER_EPOCH
