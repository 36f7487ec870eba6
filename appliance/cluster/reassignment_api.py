"""AlterPartitionReassignments (API 45) and ListPartitionReassignments (API 46) in the cluster
worker: a forwarded request becomes the controller's event, and its reply becomes the answer
(Kafka's KafkaApis.handleAlterPartitionReassignmentsRequest / handleListPartitionReassignments
in ZooKeeper mode). A broker that is not the active controller answers NOT_CONTROLLER at the
top level, so clients ask the controller named in Metadata.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from appliance.cluster import events as ev
from appliance.cluster.zk_paths import TopicPartition
from appliance.errors import ErrorCode

__all__ = ["answer_alter_reassignments", "answer_list_reassignments", "TIMEOUT_S"]

# the longest a forwarded request waits for the controller thread (a network worker's
# connection waits on it); both answers come once the change has started, not finished
TIMEOUT_S = 60.0


async def _ask(member: Any, make: Callable[[Callable[[Any], None]], ev.ControllerEvent],
               timeout_ms: int) -> tuple[Any, ErrorCode]:
    """Put the event made by ``make(reply)`` on the controller's queue and wait for the reply:
    (reply, NONE), or (None, the top-level error)."""
    controller = member.controller
    if controller is None or not controller.active:
        return None, ErrorCode.NOT_CONTROLLER
    loop = asyncio.get_running_loop()
    fut = loop.create_future()

    def reply(body: Any) -> None:
        loop.call_soon_threadsafe(lambda: fut.done() or fut.set_result(body))

    controller.put(make(reply))
    try:
        got = await asyncio.wait_for(fut, min(max(timeout_ms, 1000) / 1000, TIMEOUT_S))
    except TimeoutError:
        return None, ErrorCode.REQUEST_TIMED_OUT
    return got, ErrorCode.NONE if got is not None else ErrorCode.NOT_CONTROLLER


def _top_level(code: ErrorCode) -> str:
    return ("this broker is not the controller" if code == ErrorCode.NOT_CONTROLLER
            else "the controller did not answer in time")


async def answer_alter_reassignments(member: Any, request: Any) -> dict:
    """The response body: one result per asked partition, or a top-level error (and every
    partition with it). A partition asked twice in one request is refused
    (INVALID_REPLICA_ASSIGNMENT), nothing else of it is done."""
    asked: list[TopicPartition] = [TopicPartition(t.name, p.partition_index)
                                   for t in request.topics for p in t.partitions]
    moves: dict[TopicPartition, tuple[int, ...] | None] = {}
    for t in request.topics:
        for p in t.partitions:
            moves[TopicPartition(t.name, p.partition_index)] = (
                None if p.replicas is None else tuple(p.replicas))
    twice = {tp for tp in asked if asked.count(tp) > 1}
    for tp in twice:
        del moves[tp]
    allow = getattr(request, "allow_replication_factor_change", True)
    results: dict[TopicPartition, tuple[int, str | None]] = {}
    top = ErrorCode.NONE
    if moves:
        got, top = await _ask(member, lambda reply: ev.AlterPartitionReassignments(
            moves, reply, same_replication_factor=not allow), request.timeout_ms)
        results = got or {}
    for tp in twice:
        results[tp] = (ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"partition {tp} is listed more than once")
    by_topic: dict[str, list[dict]] = {}
    for tp in dict.fromkeys(asked):
        code, message = results.get(tp, (top, _top_level(top) if top else None))
        by_topic.setdefault(tp.topic, []).append(
            {"partition_index": tp.partition, "error_code": int(code), "error_message": message})
    return {"throttle_time_ms": 0, "allow_replication_factor_change": allow, "error_code": int(top),
            "error_message": _top_level(top) if top else None,
            "responses": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}


async def answer_list_reassignments(member: Any, request: Any) -> dict:
    """The reassignments in progress among the asked partitions (all when topics is null);
    partitions not being reassigned, or unknown, are simply not listed (as Kafka does)."""
    wanted = None if request.topics is None else {
        TopicPartition(t.name, p) for t in request.topics for p in t.partition_indexes}
    got, top = await _ask(member, lambda reply: ev.ListPartitionReassignments(wanted, reply),
                          request.timeout_ms)
    by_topic: dict[str, list[dict]] = {}
    for tp, (replicas, adding, removing) in sorted((got or {}).items()):
        by_topic.setdefault(tp.topic, []).append({
            "partition_index": tp.partition, "replicas": list(replicas),
            "adding_replicas": list(adding), "removing_replicas": list(removing)})
    return {"throttle_time_ms": 0, "error_code": int(top), "error_message": _top_level(top) if top else None,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}
