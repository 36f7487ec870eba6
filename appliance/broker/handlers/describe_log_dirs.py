"""DescribeLogDirs: each log dir with its error (NONE, or KAFKA_STORAGE_ERROR for a dir that
failed: KIP-112) and the size of every partition it holds (the bytes of its segment files, as
Kafka's ``Log.size``). One broker: the offset lag is 0 and there are no future replicas."""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING

from appliance.errors import ErrorCode
from appliance.shm.layout import SlotState

if TYPE_CHECKING:
    from appliance.broker.broker_context import BrokerContext
    from appliance.protocol.connection import Request

__all__ = ["handle", "partition_size", "dir_failed"]


def partition_size(log_dir: str, topic: str, partition: int) -> int:
    """Bytes of the partition's segment files (.log), 0 when it has none yet."""
    total = 0
    with os.scandir(os.path.join(log_dir, f"{topic}-{partition}")) as it:
        for e in it:
            if e.name.endswith(".log"):
                total += e.stat().st_size
    return total


def dir_failed(ctx: BrokerContext, disk: int) -> bool:
    """The disk worker took the dir offline (its slots say STORAGE_ERROR) or it cannot be read."""
    for parts in ctx.index.topics().values():
        for info in parts:
            if info.disk == disk and ctx.table.state(info.slot) == SlotState.STORAGE_ERROR:
                return True
    try:
        os.stat(ctx.log_dirs[disk])
    except OSError:
        return True
    return False


def _plan(ctx: BrokerContext, wanted: dict[str, set[int]] | None) -> list[tuple[str, bool, dict[str, list[int]]]]:
    """Per log dir (path, failed, {topic: partitions}) from the shared table (event-loop thread)."""
    plan = []
    topics = ctx.index.topics()
    for disk, path in enumerate(ctx.log_dirs):
        held: dict[str, list[int]] = {}
        for name, parts in sorted(topics.items()):
            if wanted is not None and name not in wanted:
                continue
            ps = [i.partition for i in parts
                  if i.disk == disk and (wanted is None or i.partition in wanted[name])]
            if ps:
                held[name] = ps
        plan.append((path, dir_failed(ctx, disk), held))
    return plan


def _sizes(plan: list[tuple[str, bool, dict[str, list[int]]]]) -> list[dict]:
    """The response's results: the segment sizes read from the dirs (an executor thread)."""
    results = []
    for path, failed, held in plan:
        if failed:  # Kafka lists no partitions for an offline dir
            results.append({"error_code": ErrorCode.KAFKA_STORAGE_ERROR, "log_dir": path, "topics": []})
            continue
        topics = []
        for name, ps in held.items():
            rows = []
            for p in ps:
                try:
                    size = partition_size(path, name, p)
                except OSError:  # deleted, or not yet created on disk
                    continue
                rows.append({"partition_index": p, "partition_size": size,
                             "offset_lag": 0, "is_future_key": False})
            if rows:
                topics.append({"name": name, "partitions": rows})
        entry = {"error_code": ErrorCode.NONE, "log_dir": path, "topics": topics}
        try:  # v4 (KIP-827): the dir's file system capacity and free space
            st = os.statvfs(path)
            entry["total_bytes"], entry["usable_bytes"] = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
        except OSError:
            pass
        results.append(entry)
    return results


async def handle(ctx: BrokerContext, request: Request) -> dict:
    body = request.body
    wanted = None
    if body.topics is not None:
        wanted = {}
        for t in body.topics:
            wanted.setdefault(t.topic, set()).update(t.partitions)
    plan = _plan(ctx, wanted)
    # directory scans touch the disks: off the event loop, which serves every other client
    results = await asyncio.get_running_loop().run_in_executor(None, _sizes, plan)
    return {"throttle_time_ms": 0, "results": results}
