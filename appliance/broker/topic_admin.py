"""Creating and deleting topics from a network worker (CreateTopics, DeleteTopics, auto-create).

Placement: each new partition goes to the log.dir (disk worker) that holds the fewest partitions.
Slots are allocated under the table lock, so two network workers creating the same topic at
once cannot both succeed; then each disk worker is asked to create its partitions and the call
returns when every one is ONLINE.
"""

from __future__ import annotations

import asyncio
import json
import resource
from typing import TYPE_CHECKING, Any

from appliance.config import ConfigError, TopicConfig, validate_topic_name
from appliance.errors import ErrorCode, KafkaError
from appliance.protocol.replica_assignment import broker_ids, requested_assignment
from appliance.shm.layout import MsgType, SlotState
from appliance.storage.partition_metadata import new_topic_id

if TYPE_CHECKING:
    from appliance.broker.broker_context import BrokerContext

__all__ = ["create_topic", "delete_topic", "add_partitions", "TopicResult"]

FDS_PER_PARTITION = 5  # measured: 4-4.6 per partition in a disk worker (10,000 partitions, 3 dirs)
FD_RESERVE = 512  # sockets, rings, eventfds, segments being read, cleaned or recovered


class TopicResult(tuple):
    """(error_code, error_message)."""

    def __new__(cls, code: int = 0, message: str | None = None) -> TopicResult:
        return super().__new__(cls, (int(code), message))


def _check_replication(ctx: BrokerContext, rf: int, plan: dict[int, tuple[int, ...]] | None) -> None:
    if rf not in (-1, 1):
        raise _Refused(ErrorCode.INVALID_REPLICATION_FACTOR,
                       f"Replication factor {rf} is larger than the 1 available broker")
    for ids in (plan or {}).values():
        if ids != (ctx.broker_id,):
            raise _Refused(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           f"replica assignment {list(ids)} names brokers other than {ctx.broker_id}")


class _Refused(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


async def create_topic(ctx: BrokerContext, name: str, num_partitions: int = -1, replication_factor: int = -1,
                       configs: dict[str, str | None] | None = None, assignments: Any = None,
                       validate_only: bool = False, timeout_ms: int = 60000) -> TopicResult:
    try:
        try:
            validate_topic_name(name)
        except KafkaError as e:
            raise _Refused(ErrorCode.INVALID_TOPIC_EXCEPTION, str(e)) from e
        try:
            plan = requested_assignment(num_partitions, replication_factor, assignments)
        except KafkaError as e:
            raise _Refused(e.code, str(e)) from e
        if plan is not None:
            num_partitions = len(plan)  # one partition per entry of the assignment
        elif num_partitions == -1:
            num_partitions = int(ctx.config["num.partitions"])
        if num_partitions <= 0:
            raise _Refused(ErrorCode.INVALID_PARTITIONS,
                           f"Number of partitions must be larger than 0 (got {num_partitions})")
        _check_replication(ctx, replication_factor, plan)
        overrides = {k: v for k, v in (configs or {}).items() if v is not None}
        try:
            TopicConfig.from_overrides(ctx.config, overrides)
        except ConfigError as e:
            raise _Refused(ErrorCode.INVALID_CONFIG, str(e)) from e
        if validate_only:
            if ctx.index.partitions(name):
                raise _Refused(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
            return TopicResult()
        async with ctx.table.locked_async():
            if ctx.table.find(name, 0) >= 0:
                raise _Refused(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
            placed = _place(ctx, name, range(num_partitions), num_partitions, new_topic_id())
        return await _create_on_disks(ctx, placed, overrides, timeout_ms)
    except _Refused as e:
        return TopicResult(e.code, e.message)


def _check_open_files(counts: list[int], adding: int) -> None:
    """Refuse (whole) a creation after which some disk worker would hold more partitions than
    its open-file limit keeps open (a partition at rest holds FDS_PER_PARTITION descriptors)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return
    room = max((soft - FD_RESERVE) // FDS_PER_PARTITION, 0)
    after = list(counts)
    for _ in range(adding):
        after[after.index(min(after))] += 1
    if max(after, default=0) > room:
        raise _Refused(ErrorCode.POLICY_VIOLATION,
                       f"{adding} more partitions would put {max(after)} on one log dir; its disk "
                       f"worker's open-file limit ({soft}) holds {room} (raise LimitNOFILE / "
                       f"ulimit -n, or add log dirs)")


def _place(ctx: BrokerContext, name: str, partitions: range, total: int,
           topic_id: bytes) -> list[tuple[int, int]]:
    """Allocate slots (caller holds the table lock): [(slot, disk)], fewest-partitions-first;
    each slot carries ``topic_id``, which its disk worker saves in ``partition.metadata``."""
    # bound the work before doing it: a count no table could hold (a fuzzed CreatePartitions
    # asked for 2**31) is refused at once, not walked partition by partition
    if len(partitions) > ctx.table.capacity:
        raise _Refused(ErrorCode.INVALID_PARTITIONS,
                       f"{len(partitions)} partitions exceed this broker's partition table "
                       f"({ctx.table.capacity} slots, appliance.max.partitions)")
    counts = ctx.table.partitions_per_disk()
    # never onto an offline log dir (KIP-112): its disk worker would refuse every partition
    offline = {i.disk for i in ctx.table.slots() if i.state == SlotState.STORAGE_ERROR}
    usable = [d for d in range(len(counts)) if d not in offline]
    if not usable:
        raise _Refused(ErrorCode.KAFKA_STORAGE_ERROR, "every log dir is offline")
    _check_open_files([counts[d] for d in usable], len(partitions))
    placed = []
    try:
        for p in partitions:
            disk = min(usable, key=counts.__getitem__)
            placed.append((ctx.table.allocate(name, p, total, disk, SlotState.CREATING, topic_id),
                           disk))
            counts[disk] += 1
    except MemoryError as e:
        for slot, _ in placed:
            ctx.table.release(slot)
        raise _Refused(ErrorCode.POLICY_VIOLATION, str(e)) from e
    return placed


async def _create_on_disks(ctx: BrokerContext, placed: list[tuple[int, int]], overrides: dict[str, str],
                           timeout_ms: int) -> TopicResult:
    payload = json.dumps({"configs": overrides}).encode()
    try:
        results = await asyncio.wait_for(asyncio.gather(*(
            ctx.disks.submit(disk, MsgType.CREATE_PARTITION, slot, payload) for slot, disk in placed)),
            max(timeout_ms, 1) / 1000)
    except TimeoutError:
        return TopicResult(ErrorCode.REQUEST_TIMED_OUT, "timed out waiting for the partitions to open")
    for r in results:
        if r.error_code:
            return TopicResult(r.error_code, f"creating a partition failed: {ErrorCode(r.error_code).name}")
    ctx.index.refresh()
    return TopicResult()


async def add_partitions(ctx: BrokerContext, name: str, count: int, assignments: Any = None,
                         validate_only: bool = False, timeout_ms: int = 60000) -> TopicResult:
    """CreatePartitions: grow ``name`` to ``count`` partitions (never shrink, as Kafka)."""
    try:
        parts = ctx.index.partitions(name)
        if not parts:
            raise _Refused(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
        current = len(parts)
        if count <= current:
            raise _Refused(ErrorCode.INVALID_PARTITIONS,
                           f"Topic currently has {current} partitions, {count} would not increase it")
        if assignments is not None and len(assignments) != count - current:
            raise _Refused(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           f"Increasing the number of partitions by {count - current} but "
                           f"{len(assignments)} assignments provided.")
        plan = {current + i: broker_ids(a) for i, a in enumerate(assignments or ())}
        if not all(plan.values()):
            raise _Refused(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           "replica assignment lists no broker for a partition")
        _check_replication(ctx, -1, plan)
        if validate_only:
            return TopicResult()
        async with ctx.table.locked_async():
            placed = _place(ctx, name, range(current, count), count, parts[0].topic_id)
        overrides = ctx.readers.topic_overrides(parts[0].disk, name)
        return await _create_on_disks(ctx, placed, overrides, timeout_ms)
    except _Refused as e:
        return TopicResult(e.code, e.message)


async def delete_topic(ctx: BrokerContext, name: str, timeout_ms: int = 60000) -> TopicResult:
    if not bool(ctx.config["delete.topic.enable"]):
        return TopicResult(ErrorCode.TOPIC_DELETION_DISABLED, "delete.topic.enable is false")
    parts = ctx.index.partitions(name)
    if not parts:
        return TopicResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
    async with ctx.table.locked_async():
        for info in parts:
            ctx.table.set_state(info.slot, SlotState.DELETING)
    try:
        results = await asyncio.wait_for(asyncio.gather(*(
            ctx.disks.submit(info.disk, MsgType.DELETE_PARTITION, info.slot, b"") for info in parts)),
            max(timeout_ms, 1) / 1000)
    except TimeoutError:
        return TopicResult(ErrorCode.REQUEST_TIMED_OUT, "timed out deleting the partitions")
    ctx.readers.forget(name)
    ctx.index.refresh()
    for r in results:
        if r.error_code:
            return TopicResult(r.error_code, None)
    return TopicResult()
