"""AlterReplicaLogDirs (34): move partitions to another log dir of this broker, online.

The network worker drives the steps of :mod:`appliance.broker.disk.replica_move` on the source
and destination disk workers, one after the other, and answers when the move is done (Kafka
answers at once and moves in the background; answering at the end lets the caller see the
outcome). Producers and consumers carry on: only between the handoff and the switch (the copy
of the tail appended meanwhile) does the partition answer NOT_LEADER_OR_FOLLOWER, which every
client retries.

The copies run on a helper thread of the destination disk worker (see replica_move); ``copy``
and ``finish`` answer at once and this driver asks ``progress`` every :data:`POLL_S` until done.

Errors: a path that is not one of ``log.dirs`` LOG_DIR_NOT_FOUND; a destination disk worker
that is not running or whose dir is offline, or a failed copy (no space, I/O error)
KAFKA_STORAGE_ERROR, with the partition left where it was. ``__consumer_offsets`` partitions are not moved
(REPLICA_NOT_AVAILABLE): their group coordinator lives in the disk worker that holds them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from typing import TYPE_CHECKING, Any

from appliance.broker.disk.replica_move import COPYING
from appliance.broker.handlers.describe_log_dirs import dir_failed
from appliance.coordinator.routing import OFFSETS_TOPIC
from appliance.errors import ErrorCode
from appliance.shm.layout import HANDOFF_RESULT, MsgType, SlotState, WorkerState

if TYPE_CHECKING:
    from appliance.broker.broker_context import BrokerContext
    from appliance.protocol.connection import Request

__all__ = ["handle"]

log = logging.getLogger("appliance.admin")

_moving: set[tuple[str, int]] = set()  # this network worker's moves under way
# how often a copy's progress is asked: the partition is unavailable during ``finish``, so short
POLL_S = 0.01


def _dest_index(ctx: BrokerContext, path: str) -> int | None:
    want = os.path.realpath(path)
    for i, d in enumerate(ctx.config.log_dirs):
        if os.path.realpath(d) == want:
            return i
    return None


async def _step(ctx: BrokerContext, disk: int, slot: int, op: str, **fields: Any) -> Any:
    return await ctx.disks.submit(disk, MsgType.REPLICA_MOVE, slot, json.dumps({"op": op, **fields}).encode())


async def _copied(ctx: BrokerContext, disk: int, slot: int, op: str, **fields: Any) -> Any:
    """Run ``op`` (copy or finish) and wait for its copy job; the last completion."""
    c = await _step(ctx, disk, slot, op, **fields)
    while not c.error_code and c.base_offset == COPYING[0]:
        await asyncio.sleep(POLL_S)
        c = await _step(ctx, disk, slot, "progress", **fields)
    return c


async def _move(ctx: BrokerContext, topic: str, partition: int, dest: int) -> int:
    info = ctx.index.lookup(topic, partition)
    if info is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if info.disk == dest:
        return 0  # already there (Kafka: nothing to do)
    if topic == OFFSETS_TOPIC:
        return ErrorCode.REPLICA_NOT_AVAILABLE
    if ctx.table.state(info.slot) != SlotState.ONLINE:
        return ErrorCode.KAFKA_STORAGE_ERROR
    if ctx.table.worker(dest)[2] != WorkerState.READY or dir_failed(ctx, dest):  # disk worker slot = disk index
        return ErrorCode.KAFKA_STORAGE_ERROR
    if (topic, partition) in _moving:
        return ErrorCode.REASSIGNMENT_IN_PROGRESS
    _moving.add((topic, partition))
    try:
        return await _run_steps(ctx, topic, partition, info.slot, info.disk, dest)
    finally:
        _moving.discard((topic, partition))


async def _undo(ctx: BrokerContext, slot: int, src: int, dest: int, names: dict) -> None:
    """Undo a move that failed after the handoff: the source takes the partition back first,
    then the destination drops its future replica. In this order a crash between the two
    leaves two copies, and the next start removes the future one (sweep_moves: the partition
    exists elsewhere); the other order could leave the source retired and no copy at all."""
    await _step(ctx, src, slot, "resume", **names)
    await _step(ctx, dest, slot, "abort", **names)


async def _run_steps(ctx: BrokerContext, topic: str, partition: int, slot: int, src: int, dest: int) -> int:
    names = {"topic": topic, "partition": partition}
    src_dir = os.path.join(ctx.config.log_dirs[src], f"{topic}-{partition}")
    c = await _copied(ctx, dest, slot, "copy", src=src_dir, **names)
    if c.error_code:
        await _step(ctx, dest, slot, "abort", **names)  # a future dir left by a failed step
        return c.error_code
    h = await _step(ctx, src, slot, "handoff", **names)
    if h.error_code:
        await _step(ctx, dest, slot, "abort", **names)
        return h.error_code
    for disk, op in ((dest, "finish"), (src, "retire")):
        c = await _copied(ctx, disk, slot, op, dest=dest, **names)
        if c.error_code:
            await _undo(ctx, slot, src, dest, names)
            return c.error_code
    log_end, log_start = HANDOFF_RESULT.struct.unpack_from(h.body, 0)  # type: ignore[attr-defined]
    c = await _step(ctx, dest, slot, "switch", log_start_offset=log_start, log_end_offset=log_end, **names)
    if c.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
        # the destination worker died after the source retired its copy: its successor's
        # start promotes the complete future replica (sweep_moves), so the move finishes there
        log.warning("%s-%d: destination disk worker %d died at the switch; it completes the "
                    "move when it restarts", topic, partition, dest)
        await _step(ctx, src, slot, "delete", **names)
        ctx.readers.forget(topic)
        return ErrorCode.KAFKA_STORAGE_ERROR
    if c.error_code:
        await _undo(ctx, slot, src, dest, names)
        return c.error_code
    await _step(ctx, src, slot, "delete", **names)
    ctx.readers.forget(topic)  # the old files are gone: never serve their cached descriptors
    return 0


async def handle(ctx: BrokerContext, request: Request) -> dict:
    results: dict[str, list[dict]] = {}
    for d in request.body.dirs:
        dest = _dest_index(ctx, d.path)
        for t in d.topics:
            for p in t.partitions:
                code = (ErrorCode.LOG_DIR_NOT_FOUND if dest is None
                        else await _move(ctx, t.name, p, dest))
                results.setdefault(t.name, []).append({"partition_index": p, "error_code": code})
    return {"throttle_time_ms": 0, "results": [
        {"topic_name": name, "partitions": parts} for name, parts in results.items()]}


