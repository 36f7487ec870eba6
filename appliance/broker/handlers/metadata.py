"""Metadata: this broker, the topics and their partitions (auto-creating topics as configured)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from appliance.broker.door import RequestContext
from appliance.broker.topic_admin import create_topic
from appliance.config import validate_topic_name
from appliance.coordinator.routing import OFFSETS_TOPIC, TXN_TOPIC
from appliance.errors import ErrorCode
from appliance.shm.layout import SlotState

if TYPE_CHECKING:
    from appliance.broker.broker_context import BrokerContext
    from appliance.protocol.connection import Request

__all__ = ["handle", "topic_metadata"]


def _unknown(name: str) -> dict:
    return {"error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "name": name,
            "is_internal": False, "partitions": []}


def topic_metadata(ctx: BrokerContext, name: str) -> dict:
    parts = ctx.index.partitions(name)
    if not parts:
        return _unknown(name)
    states = [ctx.table.state(info.slot) for info in parts]
    # a topic whose deletion has begun is gone, as from Kafka's metadata cache: its disk workers
    # free its partitions one by one, and a list of those left would tell clients it shrank (a
    # slot may be freed, or DELETING, here or in the index's snapshot, which can lag the table)
    if (SlotState.DELETING in states or SlotState.FREE in states
            or any(info.state == SlotState.DELETING for info in parts)):
        return _unknown(name)
    me = [ctx.broker_id]
    out = []
    for info, state in zip(parts, states, strict=True):
        online = state == SlotState.ONLINE
        out.append({
            "error_code": 0 if online else ErrorCode.LEADER_NOT_AVAILABLE,
            "partition_index": info.partition,
            "leader_id": ctx.broker_id if online else -1,
            "replica_nodes": me,
            "isr_nodes": me if online else [],
        })
    return {"error_code": 0, "name": name, "topic_id": ctx.index.topic_id(name),
            "is_internal": name in (OFFSETS_TOPIC, TXN_TOPIC), "partitions": out}


async def handle(ctx: BrokerContext, request: Request, rc: RequestContext) -> dict:
    body = request.body
    by_id: list = []
    every = body.topics is None or (request.api_version == 0 and not body.topics)  # v0: [] = all
    if every:
        names = sorted(ctx.index.topics())
    else:
        # v12+ may name a topic by id alone (KIP-516): answered under its name, or unknown
        names = []
        for t in body.topics:
            if t.name is not None:
                names.append(t.name)
            elif (found := ctx.index.topic_name(t.topic_id)) is not None:
                names.append(found)
            else:
                by_id.append(t)
        auto = bool(ctx.config["auto.create.topics.enable"]) and (
            request.api_version < 4 or body.allow_auto_topic_creation)
        for name in names:
            if auto and not ctx.index.partitions(name) and name not in (OFFSETS_TOPIC, TXN_TOPIC):
                await create_topic(ctx, name)  # errors (bad names) show below as per-topic codes
    topics = []
    for name in names:
        md = topic_metadata(ctx, name)
        if md["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            if every:  # being deleted: not listed at all
                continue
            try:
                validate_topic_name(name)
            except Exception:
                md["error_code"] = ErrorCode.INVALID_TOPIC_EXCEPTION
        topics.append(md)
    if by_id:
        topics += [{"error_code": ErrorCode.UNKNOWN_TOPIC_ID,
                    "name": None if request.api_version >= 12 else "",
                    "topic_id": t.topic_id, "partitions": []} for t in by_id]
    host, port = rc.advertised  # Kafka: this broker's endpoint on the request's listener
    return {
        "throttle_time_ms": 0,
        "brokers": [{"node_id": ctx.broker_id, "host": host, "port": port, "rack": None}],
        "cluster_id": ctx.cluster_id,
        "controller_id": ctx.broker_id,
        "topics": topics,
    }
