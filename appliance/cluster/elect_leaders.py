"""ElectLeaders (API 43) in the cluster worker: a forwarded request becomes the controller's
``ElectLeaders`` event and its reply is the answer (Kafka's KafkaApis.handleElectReplicaLeader).
A broker that is not the active controller answers NOT_CONTROLLER, as Kafka's do; the tool
then asks the controller named in Metadata.
"""

from __future__ import annotations

import asyncio
from typing import Any

from appliance.cluster import events as ev
from appliance.cluster.controller import PREFERRED
from appliance.cluster.zk_paths import TopicPartition
from appliance.errors import ErrorCode

__all__ = ["answer_elect_leaders", "TIMEOUT_S"]

# the longest a forwarded request waits for the controller thread (Kafka: the request's
# timeout_ms, bounded here because a network worker's connection waits on it)
TIMEOUT_S = 60.0


def _error(request: Any, code: ErrorCode) -> dict:
    """Every asked partition with ``code`` (v0 has no top-level error code)."""
    results = [{"topic": t.topic, "partition_result": [
        {"partition_id": p, "error_code": int(code), "error_message": None} for p in t.partitions]}
        for t in (request.topic_partitions or [])]
    return {"throttle_time_ms": 0, "error_code": int(code), "replica_election_results": results}


async def answer_elect_leaders(member: Any, request: Any) -> dict:
    """The controller's answer to a forwarded ElectLeaders request (v0 means preferred)."""
    controller = member.controller
    if controller is None or not controller.active:
        return _error(request, ErrorCode.NOT_CONTROLLER)
    election_type = getattr(request, "election_type", PREFERRED)
    if election_type not in (0, 1):
        return _error(request, ErrorCode.INVALID_REQUEST)
    tps = None if request.topic_partitions is None else {
        TopicPartition(t.topic, p) for t in request.topic_partitions for p in t.partitions}
    loop = asyncio.get_running_loop()
    fut = loop.create_future()

    def reply(body: dict) -> None:
        loop.call_soon_threadsafe(lambda: fut.done() or fut.set_result(body))

    controller.put(ev.ElectLeaders(election_type, tps, reply))
    timeout = min(max(getattr(request, "timeout_ms", 0), 1000) / 1000, TIMEOUT_S)
    try:
        return await asyncio.wait_for(fut, timeout)
    except TimeoutError:
        return _error(request, ErrorCode.REQUEST_TIMED_OUT)
