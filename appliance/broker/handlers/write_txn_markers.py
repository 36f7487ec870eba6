"""WriteTxnMarkers (27): a transaction coordinator asks this broker, the leader of each named
partition, to write the marker ending a producer's transaction (KIP-98).

Each partition is checked here (unknown: UNKNOWN_TOPIC_OR_PARTITION; not led by this broker, or
not online: NOT_LEADER_OR_FOLLOWER) and sent to its disk worker as a WRITE_TXN_MARKER ring
message; the disk worker appends the control batch at the leader's epoch, ends the producer's
transaction (a stale producer epoch: INVALID_PRODUCER_EPOCH) and, in a cluster, answers once the
high watermark has passed the marker (``broker/disk/replication.py``). The principal must hold
CLUSTER_ACTION on the cluster (``broker/authorization.py``): only brokers send this.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from appliance.errors import ErrorCode
from appliance.shm.layout import TXN_MARKER_BODY, MsgType, SlotState

if TYPE_CHECKING:
    from appliance.broker.broker_context import BrokerContext
    from appliance.protocol.connection import Request

__all__ = ["handle", "MARKER_TIMEOUT_MS"]

_BODY = TXN_MARKER_BODY.struct  # type: ignore[attr-defined]
#: How long a marker may wait for the ISR (Kafka's coordinator sends them with the
#: request.timeout.ms of its channel, 30 s by default).
MARKER_TIMEOUT_MS = 30_000


async def _one(ctx: BrokerContext, topic: str, partition: int, marker) -> dict:
    r = {"partition_index": partition, "error_code": ErrorCode.NONE}
    info = ctx.index.lookup(topic, partition)
    if info is None:  # no replica here: not the leader, or no such partition in the cluster
        r["error_code"] = ctx.view.not_served(topic, partition)
        return r
    if ctx.table.state(info.slot) != SlotState.ONLINE or not ctx.leads(info.slot):
        r["error_code"] = ErrorCode.NOT_LEADER_OR_FOLLOWER
        return r
    body = _BODY.pack(marker.producer_id, marker.coordinator_epoch, marker.producer_epoch,
                      1 if marker.transaction_result else 0)
    comp = await ctx.disks.submit(info.disk, MsgType.WRITE_TXN_MARKER, info.slot, body,
                                  timeout_ms=MARKER_TIMEOUT_MS)
    r["error_code"] = comp.error_code
    return r


async def handle(ctx: BrokerContext, request: Request) -> dict:
    markers = []
    for m in request.body.markers:
        topics = []
        for t in m.topics:
            parts = await asyncio.gather(*(_one(ctx, t.name, p, m) for p in t.partition_indexes))
            topics.append({"name": t.name, "partitions": list(parts)})
        markers.append({"producer_id": m.producer_id, "topics": topics})
    return {"markers": markers}
