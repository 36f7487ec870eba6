"""Kafka's rules for a CreateTopics request that names its replicas (``assignments``), pure: the
standalone broker (``broker/topic_admin.py``) and the cluster worker (``cluster/broker_answers.py``)
both read the request through :func:`requested_assignment`.

With assignments, the topic has one partition per entry: current admin clients send
``num_partitions`` and ``replication_factor`` as -1 then, and Kafka refuses either set beside
them (INVALID_REQUEST). The entries must number the partitions 0..n-1 and each list its brokers
once (INVALID_REPLICA_ASSIGNMENT, Kafka's messages). Departure: partitions of one topic may have
different replica counts (Kafka refuses that); the cluster tests rely on one topic holding RF 1,
2 and 3 partitions, and nothing here needs them equal.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from appliance.errors import ErrorCode, error_for_code

__all__ = ["requested_assignment", "broker_ids"]


def broker_ids(entry: Any) -> tuple[int, ...]:
    """One assignment entry's brokers (CreateTopics' and CreatePartitions' alike); a decoded
    request carries objects, internal callers dicts."""
    ids = entry.get("broker_ids") if isinstance(entry, dict) else getattr(entry, "broker_ids", None)
    return tuple(ids or ())


def _index(entry: Any) -> int:
    return entry.get("partition_index") if isinstance(entry, dict) else entry.partition_index


def requested_assignment(num_partitions: int, replication_factor: int,
                         assignments: Iterable[Any] | None) -> dict[int, tuple[int, ...]] | None:
    """partition -> its brokers, in the request's order, or None when the request names no
    replicas (the broker places them). Raises KafkaError with Kafka's code and message."""
    entries = list(assignments or ())
    if not entries:
        return None
    if num_partitions != -1 or replication_factor != -1:
        raise error_for_code(ErrorCode.INVALID_REQUEST)(
            "Both numPartitions or replicationFactor and replicasAssignments were set. Both "
            "cannot be used at the same time.")
    plan = {_index(e): broker_ids(e) for e in entries}
    if sorted(plan) != list(range(len(entries))):
        raise error_for_code(ErrorCode.INVALID_REPLICA_ASSIGNMENT)(
            "partitions should be a consecutive 0-based integer sequence")
    for p, ids in plan.items():
        if not ids:
            raise error_for_code(ErrorCode.INVALID_REPLICA_ASSIGNMENT)(
                f"replica assignment lists no broker for partition {p}")
        if len(set(ids)) != len(ids):
            raise error_for_code(ErrorCode.INVALID_REPLICA_ASSIGNMENT)(
                f"Duplicate replica assignment found: {list(ids)}")
    return plan
