"""Cluster mode: the requests a network worker hands to its cluster worker, and the table that
replaces the standalone handlers for them (see :mod:`appliance.broker.cluster_link`)."""

from __future__ import annotations

from typing import Any

from appliance.broker.cluster_link import ClusterUnavailable
from appliance.broker.handlers.answer import CloseConnection, RawBody
from appliance.errors import ErrorCode
from appliance.protocol.messages import CreateTopics, Metadata

__all__ = ["forward", "cluster_handlers", "FORWARDED_KEYS"]

# LeaderAndIsr, StopReplica, UpdateMetadata
FORWARDED_KEYS = (4, 5, 6, Metadata.API_KEY, CreateTopics.API_KEY)


async def forward(ctx: Any, request: Any) -> Any:
    api = request.api if request.api_key in (Metadata.API_KEY, CreateTopics.API_KEY) \
        else ctx.extra_apis[request.api_key]
    body = api.encode_request(request.api_version, request.body)
    try:
        return RawBody(await ctx.cluster_link.call(request.api_key, request.api_version, body))
    except ClusterUnavailable as e:
        if request.api_key == CreateTopics.API_KEY:
            return {"throttle_time_ms": 0, "topics": [
                {"name": t.name, "error_code": int(ErrorCode.NOT_CONTROLLER),
                 "error_message": "this broker has not joined the cluster yet"} for t in request.body.topics]}
        # the controller retries on a closed connection; a client re-resolves its metadata
        raise CloseConnection(f"cluster worker unavailable: {e}") from e


def cluster_handlers(base: dict[int, Any]) -> dict[int, Any]:
    """``base`` (the standalone table) with the forwarded APIs replaced."""
    table = dict(base)
    for key in FORWARDED_KEYS:
        table[key] = forward
    return table
