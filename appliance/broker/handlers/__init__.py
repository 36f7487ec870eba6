"""Request handlers, one module per API family; ``dispatch`` routes by API key.

A handler is ``async def handler(ctx, request) -> body`` where body is a dict (or object) the
protocol module encodes for the request's version, or ``NO_RESPONSE``. Handlers never touch
sockets: they read the shared table, read segment files, and submit work to disk workers.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import appliance.protocol as proto
from appliance.broker.broker_context import NO_RESPONSE, BrokerContext
from appliance.broker.handlers import (
    api_versions,
    configs,
    fetch,
    groups,
    incremental_alter_configs,
    list_offsets,
    metadata,
    produce,
    producer_id,
    topics,
)

__all__ = ["dispatch", "start", "encode", "HANDLERS"]

HANDLERS = {
    18: api_versions.handle,
    3: metadata.handle,
    1: fetch.handle,
    2: list_offsets.handle,
    19: topics.handle_create,
    20: topics.handle_delete,
    37: topics.handle_create_partitions,
    32: configs.handle_describe,
    33: configs.handle_alter,
    44: incremental_alter_configs.handle,
    22: producer_id.handle,
    10: groups.find_coordinator,
}

# group APIs also need the client's address (DescribeGroups shows it, as Kafka does)
GROUP_HANDLERS = {
    11: groups.route, 14: groups.route, 12: groups.route, 13: groups.route,
    8: groups.route, 9: groups.route,
    16: groups.list_groups, 15: groups.describe_groups, 42: groups.delete_groups,
    47: groups.route,
}


async def dispatch(ctx: BrokerContext, request: Any, client_host: str = "") -> Any:
    """The encoded response chunks for one request, or None when it gets no response."""
    handler = HANDLERS.get(request.api_key)
    if handler is not None:
        body = await handler(ctx, request)
    elif request.api_key in GROUP_HANDLERS:
        body = await GROUP_HANDLERS[request.api_key](ctx, request, client_host)
    else:
        from appliance.broker.network_worker import CloseConnection
        raise CloseConnection(f"no handler for API key {request.api_key}")
    return encode(request, body)


def encode(request: Any, body: Any) -> Any:
    """A handler's body as response chunks (None: the request gets no response)."""
    if body is NO_RESPONSE:
        return None
    if isinstance(body, groups.RawBody):  # encoded by the coordinator: add the frame header
        return [_FRAME_HEAD.pack(len(body) + 4, request.correlation_id) + body]
    return proto.encode_response(request, body)


# requests served without a task (not in HANDLERS): they start now and answer from a doorbell callback
START_HANDLERS = {0: produce.start}


def start(ctx: BrokerContext, request: Any, respond: Callable[[Any], None]) -> None:
    """Start ``request`` (its API is in START_HANDLERS): ``respond(chunks)`` is called with the
    encoded answer, or with the exception, when it is ready; maybe before this returns."""
    starter = START_HANDLERS[request.api_key]

    def done(body: Any) -> None:
        try:
            chunks = encode(request, body)
        except Exception as e:  # an encoding bug: the connection closes, the worker lives
            respond(e)
            return
        respond(chunks)

    try:
        starter(ctx, request, done)
    except Exception as e:
        respond(e)


_FRAME_HEAD = struct.Struct(">ii")  # size, correlation id (response header v0)
