"""DeleteRecords (21): move each partition's log start offset (its low watermark) up to an
offset, so the records below it can no longer be read and their whole segments are deleted.

The owning disk worker does the move (:mod:`appliance.broker.disk.log_admin`); an offset past
the high watermark gets OFFSET_OUT_OF_RANGE there, -1 means the high watermark. In cluster mode
the disk worker holds the answer until every in-sync follower's log start offset has reached
the offset, or ``timeout_ms`` passes: REQUEST_TIMED_OUT
(:mod:`appliance.broker.disk.replication`). This coroutine only awaits the completion.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from appliance.errors import ErrorCode
from appliance.shm.layout import DELETE_RECORDS_BODY, MsgType, SlotState

if TYPE_CHECKING:
    from appliance.broker.broker_context import BrokerContext
    from appliance.protocol.connection import Request

__all__ = ["handle"]

_BODY = DELETE_RECORDS_BODY.struct  # type: ignore[attr-defined]


async def _one(ctx: BrokerContext, topic: str, partition: int, offset: int, timeout_ms: int) -> dict:
    r = {"partition_index": partition, "low_watermark": -1, "error_code": 0}
    info = ctx.index.lookup(topic, partition)
    if info is None:
        r["error_code"] = ctx.view.not_served(topic, partition)
        return r
    if ctx.table.state(info.slot) != SlotState.ONLINE or not ctx.leads(info.slot):
        r["error_code"] = ErrorCode.NOT_LEADER_OR_FOLLOWER  # cluster mode: only the leader moves it
        return r
    comp = await ctx.disks.submit(info.disk, MsgType.DELETE_RECORDS, info.slot,
                                  _BODY.pack(offset), timeout_ms=timeout_ms)
    r["error_code"] = comp.error_code
    if not comp.error_code:
        r["low_watermark"] = comp.log_start_offset
    return r


async def handle(ctx: BrokerContext, request: Request) -> dict:
    body = request.body
    topics = []
    for t in body.topics:
        parts = await asyncio.gather(*(_one(ctx, t.name, p.partition_index, p.offset, body.timeout_ms)
                                       for p in t.partitions))
        topics.append({"name": t.name, "partitions": list(parts)})
    return {"throttle_time_ms": 0, "topics": topics}
