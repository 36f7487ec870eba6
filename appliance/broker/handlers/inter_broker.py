"""Cluster mode's handlers on the network side: the requests a network worker hands to its
cluster worker (see :mod:`appliance.process.cluster_link`), the leader's OffsetsForLeaderEpoch,
and the cluster variants of ApiVersions, FindCoordinator and DescribeCluster. Which API uses
which is declared in :data:`appliance.broker.handlers.ROUTES`, beside the standalone handler."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from appliance.broker.door import RequestContext
from appliance.broker.handlers import api_versions, describe_cluster
from appliance.broker.handlers.answer import CloseConnection, RawBody
from appliance.coordinator.batched_lookup import FIRST_BATCHED_VERSION
from appliance.errors import ErrorCode
from appliance.process.cluster_link import ClusterUnavailable
from appliance.process.disk_client import epoch_result
from appliance.protocol.messages import (
    CreatePartitions,
    CreateTopics,
    DeleteTopics,
)
from appliance.shm.layout import EPOCH_BODY, MsgType

if TYPE_CHECKING:
    from appliance.broker.broker_context import BrokerContext
    from appliance.protocol.connection import Request

__all__ = ["forward", "offsets_for_leader_epoch", "find_coordinator", "describe_cluster_in_cluster",
           "api_versions_in_cluster", "OFFSETS_FOR_LEADER_EPOCH"]

OFFSETS_FOR_LEADER_EPOCH = 23
_EPOCH = EPOCH_BODY.struct  # type: ignore[attr-defined]
# below the standalone maxima in cluster mode (see api_versions_in_cluster)
CAPPED_IN_CLUSTER = {DeleteTopics.API_KEY: 5}
# the topic APIs answered per topic while this broker has not joined (retriable NOT_CONTROLLER):
# the answer's list field and the request's topic names
_NOT_JOINED = {
    CreateTopics.API_KEY: ("topics", lambda body: [t.name for t in body.topics]),
    CreatePartitions.API_KEY: ("results", lambda body: [t.name for t in body.topics]),
    DeleteTopics.API_KEY: ("responses", lambda body: list(body.topic_names)),
}


async def forward(ctx: BrokerContext, request: Request, rc: RequestContext | None = None) -> Any:
    api = ctx.extra_apis.get(request.api_key) or request.api
    body = api.encode_request(request.api_version, request.body)
    try:
        return RawBody(await ctx.cluster_link.call(request.api_key, request.api_version, body,
                                                   rc.listener if rc is not None else ""))
    except ClusterUnavailable as e:
        per_topic = _NOT_JOINED.get(request.api_key)
        if per_topic is not None:
            field, names = per_topic
            return {"throttle_time_ms": 0, field: [
                {"name": n, "error_code": int(ErrorCode.NOT_CONTROLLER),
                 "error_message": "this broker has not joined the cluster yet"} for n in names(request.body)]}
        # the controller retries on a closed connection; a client re-resolves its metadata
        raise CloseConnection(f"cluster worker unavailable: {e}") from e


async def offsets_for_leader_epoch(ctx: BrokerContext, request: Request) -> RawBody:
    """The leader's answer (KIP-101): where each asked epoch ends in its log, from the
    partition's leader-epoch-checkpoint in its disk worker."""
    body = request.body
    topics = []
    for t in body.topics:
        parts = []
        for p in t.partitions:
            entry = {"partition": p.partition, "error_code": 0, "leader_epoch": -1, "end_offset": -1}
            parts.append(entry)
            info = ctx.index.lookup(t.topic, p.partition)
            if info is None or not ctx.leads(info.slot):
                entry["error_code"] = int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
                continue
            current = getattr(p, "current_leader_epoch", -1)
            mine = ctx.leaders.read(info.slot).leader_epoch
            if current != -1 and current != mine:
                entry["error_code"] = int(ErrorCode.FENCED_LEADER_EPOCH if current < mine
                                          else ErrorCode.UNKNOWN_LEADER_EPOCH)
                continue
            comp = await ctx.disks.submit(info.disk, MsgType.EPOCH_END, info.slot, _EPOCH.pack(p.leader_epoch))
            if comp.error_code:
                entry["error_code"] = int(comp.error_code)
            else:
                entry["leader_epoch"], entry["end_offset"] = epoch_result(comp)
        topics.append({"topic": t.topic, "partitions": parts})
    # encoded here: the schema is not in the standalone registry the connection encodes with
    api = ctx.extra_apis[OFFSETS_FOR_LEADER_EPOCH]
    return RawBody(api.encode_response(request.api_version, {"throttle_time_ms": 0, "topics": topics}))


async def find_coordinator(ctx: BrokerContext, request: Request, rc: RequestContext) -> Any:
    """Cluster mode: the cluster worker names the leader of the group's ``__consumer_offsets``
    partition (creating the topic on the first call), the same answer on every broker; that
    broker's disk worker holding the partition is the coordinator (``groups.route``)."""
    api = request.api
    body = api.encode_request(request.api_version, request.body)
    try:
        return RawBody(await ctx.cluster_link.call(request.api_key, request.api_version, body,
                                                   rc.listener if rc is not None else ""))
    except ClusterUnavailable as e:  # still joining: retriable, the client asks again
        one = {"error_code": int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
               "error_message": f"this broker has not joined the cluster yet: {e}",
               "node_id": -1, "host": "", "port": -1}
        if request.api_version >= FIRST_BATCHED_VERSION:
            return {"throttle_time_ms": 0, "coordinators": [
                {"key": k, **one} for k in request.body.coordinator_keys]}
        return {"throttle_time_ms": 0, **one}


async def describe_cluster_in_cluster(ctx: BrokerContext, request: Request, rc: RequestContext) -> Any:
    """DescribeCluster: every live broker and the controller, from the cluster worker."""
    refused = describe_cluster.wrong_endpoint_type(request)
    if refused is not None:
        return refused
    return await forward(ctx, request, rc)


async def api_versions_in_cluster(ctx: BrokerContext, request: Request) -> dict:
    """ApiVersions with DeleteTopics capped at 5: deletion by id (v6) is not served in cluster
    mode (topic ids are, from ZooKeeper: Metadata v10+ and Fetch v13+ use them)."""
    body = await api_versions.handle(ctx, request)
    for e in body["api_keys"]:
        if e.api_key in CAPPED_IN_CLUSTER:
            e.max_version = CAPPED_IN_CLUSTER[e.api_key]
    return body
