"""DescribeProducers (API 61, KIP-664): each partition's active producers, as its leader keeps
them for idempotence: producer id, epoch, last sequence, the timestamp of its last batch.

The disk worker that owns the partition lists its producer state (PRODUCER_ENTRY records); the
last batch's timestamp is read here from the segment files, so the owner does no file I/O for
it. No transactions are coordinated here: coordinator epoch and transaction start stay -1.
"""

from __future__ import annotations

import asyncio
import os
import struct
from typing import TYPE_CHECKING, Any

from appliance.broker.handlers.answer import led_here
from appliance.errors import OffsetOutOfRangeError
from appliance.shm.layout import PRODUCER_ENTRY, MsgType
from native.batch_layout import MAX_TIMESTAMP_OFFSET

if TYPE_CHECKING:
    from appliance.broker.broker_context import BrokerContext
    from appliance.protocol.connection import Request

__all__ = ["handle"]

_ENTRY = PRODUCER_ENTRY.struct  # type: ignore[attr-defined]
_TS = struct.Struct(">q")


def _batch_timestamp(ctx: BrokerContext, info: Any, topic: str, partition: int, offset: int,
                     end: int) -> int:
    """The max timestamp of the batch holding ``offset`` (-1: no longer in the log)."""
    if offset < 0:
        return -1
    try:
        sl = ctx.readers.reader(info.disk, topic, partition).read(offset, 1, max_offset=end,
                                                                  min_one_batch=True)
    except OffsetOutOfRangeError:
        return -1
    if sl is None or sl.length == 0:
        return -1
    if sl.fd is not None:
        raw = os.pread(sl.fd, _TS.size, sl.position + MAX_TIMESTAMP_OFFSET)
    else:
        with open(sl.path, "rb") as f:
            raw = os.pread(f.fileno(), _TS.size, sl.position + MAX_TIMESTAMP_OFFSET)
    return _TS.unpack(raw)[0] if len(raw) == _TS.size else -1


async def _one(ctx: BrokerContext, topic: str, partition: int) -> dict:
    r = {"partition_index": partition, "error_code": 0, "error_message": None, "active_producers": []}
    info, r["error_code"] = led_here(ctx, topic, partition)
    if info is None:
        return r
    comp = await ctx.disks.submit(info.disk, MsgType.DESCRIBE_PRODUCERS, info.slot, b"")
    if comp.error_code:
        r["error_code"] = comp.error_code
        return r
    leo = ctx.table.offsets(info.slot)[0]
    body = comp.body
    for pos in range(0, len(body) - len(body) % _ENTRY.size, _ENTRY.size):
        pid, last_offset, epoch, last_seq, txn_start, coordinator_epoch = _ENTRY.unpack_from(body, pos)
        r["active_producers"].append({
            "producer_id": pid, "producer_epoch": epoch, "last_sequence": last_seq,
            "last_timestamp": _batch_timestamp(ctx, info, topic, partition, last_offset, leo),
            "coordinator_epoch": coordinator_epoch, "current_txn_start_offset": txn_start})
    return r


async def handle(ctx: BrokerContext, request: Request) -> dict:
    topics = []
    for t in request.body.topics:
        parts = await asyncio.gather(*(_one(ctx, t.name, p) for p in t.partition_indexes))
        topics.append({"name": t.name, "partitions": list(parts)})
    return {"throttle_time_ms": 0, "topics": topics}
