"""Client-side errors: the wire-code exceptions the client raises that ``appliance.errors`` does
not name, plus the client's own (connection, full queue, bad configuration).

Wire-code classes come from :func:`appliance.errors.error_for_code`, so ``except`` clauses here and
errors decoded anywhere else are the same classes.
"""

from __future__ import annotations

from appliance.client.connection import KafkaConnectionError
from appliance.errors import ErrorCode, InvalidConfigError, KafkaError, error_for_code

__all__ = [
    "KafkaConnectionError", "QueueFull", "InvalidConfigError", "ClientClosedError",
    "LeaderNotAvailableError", "RebalanceInProgressError", "IllegalGenerationError",
    "UnknownMemberIdError", "MemberIdRequiredError", "CoordinatorNotAvailableError",
    "NotCoordinatorError", "NoOffsetForPartitionError", "CommitFailedError",
]

LeaderNotAvailableError = error_for_code(ErrorCode.LEADER_NOT_AVAILABLE)
RebalanceInProgressError = error_for_code(ErrorCode.REBALANCE_IN_PROGRESS)
IllegalGenerationError = error_for_code(ErrorCode.ILLEGAL_GENERATION)
UnknownMemberIdError = error_for_code(ErrorCode.UNKNOWN_MEMBER_ID)
MemberIdRequiredError = error_for_code(ErrorCode.MEMBER_ID_REQUIRED)
CoordinatorNotAvailableError = error_for_code(ErrorCode.COORDINATOR_NOT_AVAILABLE)
NotCoordinatorError = error_for_code(ErrorCode.NOT_COORDINATOR)


class QueueFull(KafkaError):
    """The async producer's queue (queue.buffering.max.messages) stayed full for
    queue.enqueue.timeout.ms."""


class ClientClosedError(KafkaError):
    """The producer/consumer was used after close()."""


class NoOffsetForPartitionError(KafkaError):
    """No committed offset and auto.offset.reset=none."""

    code = ErrorCode.OFFSET_OUT_OF_RANGE


class CommitFailedError(KafkaError):
    """The group rebalanced (or this member was removed) before the offsets were committed."""

    code = ErrorCode.REBALANCE_IN_PROGRESS
