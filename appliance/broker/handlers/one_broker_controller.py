"""The controller's admin APIs on a standalone broker: ElectLeaders (43),
AlterPartitionReassignments (45) and ListPartitionReassignments (46), answered as a one-broker
Kafka cluster's controller answers them. This broker is the one replica, and so the preferred
and only possible leader, of every partition: no election is ever needed, the only replica list
a reassignment may name is this broker alone (already in place), and nothing is ever being
reassigned. (In a cluster the same APIs go to the controller: ``inter_broker.forward``.)"""

from __future__ import annotations

from typing import TYPE_CHECKING

from appliance.errors import ErrorCode
from appliance.shm.layout import SlotState

if TYPE_CHECKING:
    from appliance.broker.broker_context import BrokerContext
    from appliance.protocol.connection import Request

__all__ = ["elect_leaders", "alter_reassignments", "list_reassignments"]

PREFERRED, UNCLEAN = 0, 1  # ElectLeaders election types (KIP-460)


async def elect_leaders(ctx: BrokerContext, request: Request) -> dict:
    body = request.body
    election_type = body.election_type if request.api_version >= 1 else PREFERRED
    if election_type not in (PREFERRED, UNCLEAN):
        return {"throttle_time_ms": 0, "error_code": int(ErrorCode.INVALID_REQUEST),
                "replica_election_results": [
                    {"topic": t.topic, "partition_result": [
                        {"partition_id": p, "error_code": int(ErrorCode.INVALID_REQUEST),
                         "error_message": f"unknown election type {election_type}"}
                        for p in t.partitions]} for t in body.topic_partitions or []]}
    results = []
    # null: every partition whose leader is not its preferred replica, which here is none
    for t in body.topic_partitions or []:
        parts = []
        for p in t.partitions:
            info = ctx.index.lookup(t.topic, p)
            if info is None:
                code, msg = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist."
            elif ctx.table.state(info.slot) != SlotState.ONLINE:  # its only replica is offline
                code = (ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE if election_type == PREFERRED
                        else ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE)
                msg = f"the only replica of {t.topic}-{p} is offline"
            else:
                code, msg = ErrorCode.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition."
            parts.append({"partition_id": p, "error_code": int(code), "error_message": msg})
        results.append({"topic": t.topic, "partition_result": parts})
    return {"throttle_time_ms": 0, "error_code": 0, "replica_election_results": results}


def _reassignment_problem(ctx: BrokerContext, topic: str, partition: int, replicas: list[int] | None,
                          asked_twice: bool) -> tuple[int, str | None]:
    if asked_twice:
        return ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"partition {topic}-{partition} is listed more than once"
    if ctx.index.lookup(topic, partition) is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist."
    if replicas is None:  # a cancel: nothing is ever moving here
        return ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "No reassignment in progress for this partition."
    if not replicas:
        return ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Empty replica list specified in partition reassignment."
    if len(set(replicas)) != len(replicas):
        return (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Duplicate replica ids in partition reassignment replica list: {replicas}")
    if any(b < 0 for b in replicas):
        return ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Invalid broker id in replica list: {replicas}"
    missing = [b for b in replicas if b != ctx.broker_id]
    if missing:
        return (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Some brokers specified for partition reassignment are not alive: {missing}")
    return ErrorCode.NONE, None  # [this broker]: the assignment it has


async def alter_reassignments(ctx: BrokerContext, request: Request) -> dict:
    body = request.body
    asked = [(t.name, p.partition_index) for t in body.topics for p in t.partitions]
    by_topic: dict[str, list[dict]] = {}
    seen: set[tuple[str, int]] = set()
    for t in body.topics:
        for p in t.partitions:
            key = (t.name, p.partition_index)
            if key in seen:
                continue
            seen.add(key)
            replicas = None if p.replicas is None else list(p.replicas)
            code, msg = _reassignment_problem(ctx, t.name, p.partition_index, replicas, asked.count(key) > 1)
            by_topic.setdefault(t.name, []).append(
                {"partition_index": p.partition_index, "error_code": int(code), "error_message": msg})
    return {"throttle_time_ms": 0, "allow_replication_factor_change": getattr(
                body, "allow_replication_factor_change", True),
            "error_code": 0, "error_message": None,
            "responses": [{"name": n, "partitions": ps} for n, ps in by_topic.items()]}


async def list_reassignments(ctx: BrokerContext, request: Request) -> dict:
    """Nothing is ever being reassigned on one broker: an empty list (unknown partitions are
    simply not listed, as Kafka does)."""
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "topics": []}
