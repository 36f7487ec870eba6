"""DescribeCluster (API 60, KIP-700): the cluster id, the controller and the brokers. A
standalone broker is the whole cluster and its own controller; in cluster mode the cluster
worker answers from its view of the live brokers (``cluster.broker_answers``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from appliance.broker.door import RequestContext
from appliance.errors import ErrorCode
from appliance.protocol.messages.describe_cluster import ENDPOINT_TYPE_BROKERS

if TYPE_CHECKING:
    from appliance.broker.broker_context import BrokerContext
    from appliance.protocol.connection import Request

__all__ = ["handle", "wrong_endpoint_type"]


def wrong_endpoint_type(request: Request) -> dict | None:
    """The answer to a request for controller endpoints (KIP-919: KRaft controllers, which we
    do not have), as Kafka's brokers answer it; None for an ordinary request."""
    if request.api_version >= 1 and request.body.endpoint_type != ENDPOINT_TYPE_BROKERS:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
                "error_message": "The broker only supports the brokers endpoint type",
                "endpoint_type": request.body.endpoint_type, "cluster_id": "",
                "controller_id": -1, "brokers": []}
    return None


async def handle(ctx: BrokerContext, request: Request, rc: RequestContext) -> dict:
    refused = wrong_endpoint_type(request)
    if refused is not None:
        return refused
    host, port = rc.advertised  # this broker on the request's listener
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
            "endpoint_type": ENDPOINT_TYPE_BROKERS, "cluster_id": ctx.cluster_id,
            "controller_id": ctx.broker_id,
            "brokers": [{"broker_id": ctx.broker_id, "host": host, "port": port, "rack": None}]}
