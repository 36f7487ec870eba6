"""CreateTopics, DeleteTopics, CreatePartitions."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from appliance.broker.topic_admin import add_partitions, create_topic, delete_topic
from appliance.errors import ErrorCode

if TYPE_CHECKING:
    from appliance.broker.broker_context import BrokerContext
    from appliance.protocol.connection import Request

__all__ = ["handle_create", "handle_delete", "handle_create_partitions"]

FIRST_DELETE_BY_ID_VERSION = 6


async def handle_create(ctx: BrokerContext, request: Request) -> dict:
    body = request.body
    seen: dict[str, int] = {}
    for t in body.topics:
        seen[t.name] = seen.get(t.name, 0) + 1

    async def one(t: Any) -> dict:
        if seen[t.name] > 1:
            return {"name": t.name, "error_code": 42,  # INVALID_REQUEST, as Kafka for duplicates
                    "error_message": f"Create topics request from client contains topic {t.name} more than once"}
        code, msg = await create_topic(
            ctx, t.name, t.num_partitions, t.replication_factor,
            {c.name: c.value for c in t.configs}, t.assignments, body.validate_only, body.timeout_ms)
        answer = {"name": t.name, "error_code": code, "error_message": msg}
        if code == 0 and not body.validate_only:  # v7+: the new topic's id (KIP-516)
            answer["topic_id"] = ctx.index.topic_id(t.name)
        if code == 0:  # v5+ (KIP-525): what was created, the broker defaults filled in
            answer["num_partitions"] = (t.num_partitions if t.num_partitions > 0 else
                                        len(t.assignments) or int(ctx.config["num.partitions"]))
            answer["replication_factor"] = (t.replication_factor if t.replication_factor > 0 else
                                            len(t.assignments[0].broker_ids) if t.assignments else
                                            int(ctx.config["default.replication.factor"]))
        return answer

    return {"throttle_time_ms": 0, "topics": list(await asyncio.gather(*(one(t) for t in body.topics)))}


async def handle_delete(ctx: BrokerContext, request: Request) -> dict:
    body = request.body
    if request.api_version < FIRST_DELETE_BY_ID_VERSION:
        results = await asyncio.gather(*(delete_topic(ctx, n, body.timeout_ms) for n in body.topic_names))
        return {"throttle_time_ms": 0, "responses": [
            {"name": n, "error_code": r[0], "error_message": r[1]}
            for n, r in zip(body.topic_names, results, strict=True)]}

    async def one(t: Any) -> dict:
        # v6: by name or by id (KIP-516), never both (Kafka's rule)
        if t.name is not None and t.topic_id != bytes(16):
            return {"name": t.name, "topic_id": t.topic_id, "error_code": ErrorCode.INVALID_REQUEST,
                    "error_message": "You may not specify both topic name and topic id."}
        name = t.name if t.name is not None else ctx.index.topic_name(t.topic_id)
        if name is None:
            return {"name": None, "topic_id": t.topic_id, "error_code": ErrorCode.UNKNOWN_TOPIC_ID,
                    "error_message": "This server does not host this topic ID."}
        topic_id = ctx.index.topic_id(name)
        code, msg = await delete_topic(ctx, name, body.timeout_ms)
        return {"name": name, "topic_id": topic_id, "error_code": code, "error_message": msg}

    return {"throttle_time_ms": 0, "responses": list(await asyncio.gather(*(one(t) for t in body.topics)))}


async def handle_create_partitions(ctx: BrokerContext, request: Request) -> dict:
    body = request.body
    results = await asyncio.gather(*(
        add_partitions(ctx, t.name, t.count, t.assignments, body.validate_only, body.timeout_ms)
        for t in body.topics))
    return {"throttle_time_ms": 0, "results": [
        {"name": t.name, "error_code": r[0], "error_message": r[1]}
        for t, r in zip(body.topics, results, strict=True)]}
