"""Produce: validate the request, route each partition's batches to its disk worker's ring,
answer when the requested acks are met (acks=-1 on one broker: the leader is the whole ISR)."""

from __future__ import annotations

import asyncio
from typing import Any

from appliance.broker.broker_context import NO_RESPONSE
from appliance.errors import ErrorCode, KafkaError
from appliance.shm.layout import MsgType, SlotState

__all__ = ["handle"]

_MAGIC_POS = 16  # byte of the magic in both v2 batches and legacy messages (after offset+size+crc)


async def _partition(ctx: Any, topic: str, index: int, records: Any, acks: int,
                     timeout_ms: int) -> dict:
    out = {"index": index, "error_code": 0, "base_offset": -1, "log_append_time_ms": -1,
           "log_start_offset": -1}
    info = ctx.index.lookup(topic, index)
    if info is None:
        out["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return out
    if ctx.table.state(info.slot) != SlotState.ONLINE:
        out["error_code"] = ErrorCode.NOT_LEADER_OR_FOLLOWER
        return out
    if records is None or len(records) == 0:
        out["error_code"] = ErrorCode.INVALID_RECORD
        return out
    if len(records) > _MAGIC_POS and records[_MAGIC_POS] in (0, 1):
        try:  # an old-format message set: store it as v2 batches like every other
            from appliance.records.convert import legacy_to_v2
            records = legacy_to_v2(bytes(records))
        except KafkaError as e:
            out["error_code"] = e.code
            return out
    if len(records) > ctx.disks.max_payload():
        out["error_code"] = ErrorCode.RECORD_LIST_TOO_LARGE
        return out
    comp = await ctx.disks.submit(info.disk, MsgType.PRODUCE, info.slot, records, acks, timeout_ms)
    if comp is not None:
        out.update(error_code=comp.error_code, base_offset=comp.base_offset,
                   log_append_time_ms=comp.log_append_time, log_start_offset=comp.log_start_offset)
    return out


async def handle(ctx: Any, request: Any) -> Any:
    body = request.body
    acks = body.acks
    topics = body.topic_data
    if acks not in (-1, 0, 1):
        return {"throttle_time_ms": 0, "responses": [
            {"name": t.name, "partition_responses": [
                {"index": p.index, "error_code": ErrorCode.INVALID_REQUIRED_ACKS, "base_offset": -1}
                for p in t.partition_data]} for t in topics]}
    jobs = []
    for t in topics:
        for p in t.partition_data:
            jobs.append(_partition(ctx, t.name, p.index, p.records, acks, body.timeout_ms))
    if len(jobs) == 1:
        results = [await jobs[0]]
    else:
        results = await asyncio.gather(*jobs)
    if acks == 0:
        return NO_RESPONSE
    it = iter(results)
    return {"throttle_time_ms": 0, "responses": [
        {"name": t.name, "partition_responses": [next(it) for _ in t.partition_data]}
        for t in topics]}
