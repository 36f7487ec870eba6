"""ListOffsets: earliest (-2), latest (-1, the high watermark), the record with the largest
timestamp (-3, v7+), the local log start (-4, v8+: no tiered storage, so the log start), or the
first offset at a time; v0 answers 0.8's list of segment offsets (see _old_style)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from appliance.broker.handlers.answer import led_here
from appliance.errors import ErrorCode

if TYPE_CHECKING:
    from appliance.broker.broker_context import BrokerContext
    from appliance.protocol.connection import Request

__all__ = ["handle"]

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL = -1, -2, -3, -4
# the first version that may ask each special timestamp (an older one asking it is refused)
_FIRST_VERSION = {MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8}


def _one(ctx: BrokerContext, topic: str, partition: int, ts: int, version: int) -> dict:
    r = {"partition_index": partition, "error_code": 0, "timestamp": -1, "offset": -1}
    info, r["error_code"] = led_here(ctx, topic, partition)
    if info is None:
        return r
    leo, hw, log_start = ctx.table.offsets(info.slot)
    if ts < 0 and version < _FIRST_VERSION.get(ts, 0):
        r["error_code"] = ErrorCode.INVALID_REQUEST  # a version that cannot ask for it
    elif ts == LATEST:
        r["offset"] = hw
    elif ts in (EARLIEST, EARLIEST_LOCAL):
        r["offset"] = log_start
    elif ts == MAX_TIMESTAMP:
        found = ctx.readers.max_timestamp(info.disk, topic, partition, log_start, hw)
        if found is not None:
            r["offset"], r["timestamp"] = found
    elif ts < 0:
        r["error_code"] = ErrorCode.INVALID_REQUEST
    else:
        found = ctx.readers.offset_for_timestamp(info.disk, topic, partition, ts, log_start, hw)
        if found is not None:
            r["offset"], r["timestamp"] = found
    return r


def _old_style(ctx: BrokerContext, topic: str, partition: int, ts: int, max_num: int) -> dict:
    """v0 (0.8's OffsetRequest): up to ``max_num`` offsets, newest first: the base offsets of
    the segments last written at or before ``ts`` and, for -1 (or a time from now on), the
    high watermark (LogReader.offsets_before)."""
    r = {"partition_index": partition, "error_code": 0, "old_style_offsets": []}
    info, r["error_code"] = led_here(ctx, topic, partition)
    if info is None:
        return r
    if ts < 0 and ts not in (LATEST, EARLIEST):
        r["error_code"] = ErrorCode.INVALID_REQUEST
        return r
    _, hw, log_start = ctx.table.offsets(info.slot)
    r["old_style_offsets"] = ctx.readers.offsets_before(
        info.disk, topic, partition, ts, max(max_num, 0), log_start, hw, int(time.time() * 1000))
    return r


async def handle(ctx: BrokerContext, request: Request) -> dict:
    if request.api_version == 0:
        return {"topics": [
            {"name": t.name, "partitions": [
                _old_style(ctx, t.name, p.partition_index, p.timestamp, p.max_num_offsets)
                for p in t.partitions]}
            for t in request.body.topics]}
    return {"throttle_time_ms": 0, "topics": [
        {"name": t.name, "partitions": [_one(ctx, t.name, p.partition_index, p.timestamp,
                                             request.api_version) for p in t.partitions]}
        for t in request.body.topics]}
