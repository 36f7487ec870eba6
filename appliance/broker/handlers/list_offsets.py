"""ListOffsets: earliest (-2), latest (-1, the high watermark), the record with the largest
timestamp (-3, v7+), the local log start (-4, v8+: no tiered storage, so the log start), or the
first offset at a time; v0 answers 0.8's list of segment offsets (see _old_style).

A new leader whose high watermark has not yet reached the offset its leadership began at
answers a client (v1+) OFFSET_NOT_AVAILABLE, which clients retry (KIP-207): its HW, learnt as a
follower, can lag the one the last leader exposed, and a consumer must not see the end of the
log move back."""

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
FIRST_ISOLATION_VERSION = 2  # isolation_level (KIP-98)
READ_COMMITTED = 1
CONSUMER_REPLICA_ID = -1
# the first version that may ask each special timestamp (an older one asking it is refused)
_FIRST_VERSION = {MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8}


def _hw_behind_epoch_start(ctx: BrokerContext, slot: int, hw: int) -> bool:
    """KIP-207: leading, but the high watermark is still below where this leadership began
    (or the leader's disk worker has not stamped it yet)."""
    if ctx.leaders is None:  # standalone: the leader is its whole ISR, HW = log end
        return False
    lead = ctx.leaders.read(slot)
    start = ctx.leaders.epoch_start(slot, lead.leader_epoch)
    return start < 0 or hw < start


def _one(ctx: BrokerContext, topic: str, partition: int, ts: int, version: int, client: bool,
         committed: bool = False) -> dict:
    """One partition's answer; ``committed``: a read_committed client's (v2+, KIP-98), whose
    fetchable end is the last stable offset, not the high watermark (Kafka's
    lastFetchableOffset): LATEST is the LSO, and time lookups stop there."""
    r = {"partition_index": partition, "error_code": 0, "timestamp": -1, "offset": -1}
    info, r["error_code"] = led_here(ctx, topic, partition)
    if info is None:
        return r
    leo, hw, log_start, lso = ctx.table.stable_offsets(info.slot)
    if client and _hw_behind_epoch_start(ctx, info.slot, hw):
        r["error_code"] = ErrorCode.OFFSET_NOT_AVAILABLE
        return r
    if committed:
        hw = lso
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
    client = request.body.replica_id == CONSUMER_REPLICA_ID  # not a follower or a debugging tool
    committed = (request.api_version >= FIRST_ISOLATION_VERSION
                 and request.body.isolation_level == READ_COMMITTED)
    return {"throttle_time_ms": 0, "topics": [
        {"name": t.name, "partitions": [_one(ctx, t.name, p.partition_index, p.timestamp,
                                             request.api_version, client, committed)
                                        for p in t.partitions]}
        for t in request.body.topics]}
