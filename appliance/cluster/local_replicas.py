"""Turns what the controller said (a :class:`~appliance.cluster.leadership.Changes` and the
:class:`LeadershipTable`) into this broker's state: partitions created on a disk worker when
this broker first holds a replica, the leadership area written, followers truncated and handed
to the replica fetcher, leaders taken from it. Runs in the cluster worker's event loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from appliance.cluster.fetcher import ReplicaFetcher
from appliance.cluster.leadership import Changes, LeadershipTable
from appliance.cluster.replication_throttle import REPLICATION_KEYS
from appliance.cluster.topic_ids import TopicIds
from appliance.cluster.zk_paths import TopicPartition
from appliance.cluster.zk_store import ZkStore
from appliance.errors import ErrorCode
from appliance.shm.layout import EPOCH_BODY, MsgType, Role, SlotState
from appliance.shm.leadership_area import LeadershipArea

__all__ = ["LocalReplicas", "isr_changed"]

log = logging.getLogger("appliance.cluster")

_EPOCH = EPOCH_BODY.struct  # type: ignore[attr-defined]



class LocalReplicas:
    def __init__(self, ctx: Any, table: LeadershipTable, area: LeadershipArea, store: ZkStore,
                 fetcher: ReplicaFetcher, topic_ids: TopicIds) -> None:
        self.ctx = ctx  # a BrokerContext on the cluster worker's own rings
        self.table = table
        self.area = area
        self.store = store
        self.fetcher = fetcher
        self.topic_ids = topic_ids
        self.lock = asyncio.Lock()  # one LeaderAndIsr / StopReplica applied at a time

    async def apply(self, changes: Changes, touched: list[TopicPartition]) -> None:
        """After LeaderAndIsr: publish every partition of the request (ISR updates too); start
        leading or following those that moved."""
        moved = set(changes.became_leader) | set(changes.became_follower)
        for tp in touched:
            st = self.table.local.get(tp)
            if st is None:
                continue
            slot = await self._ensure_partition(tp)
            if slot < 0:
                continue
            await self._ensure_topic_id(tp, slot)
            me = self.table.broker_id
            role = Role.LEADER if st.leader == me else Role.FOLLOWER
            if tp in moved and role == Role.FOLLOWER:
                # stop serving first; the fetcher truncates by leader epoch, then fetches
                self.area.write(slot, Role.FOLLOWER, st.leader, st.leader_epoch, st.replicas, st.isr)
                self.fetcher.add(tp, slot, self.ctx.table.read(slot).disk, st.leader)
                continue
            if tp in moved:
                self.fetcher.remove(tp)
                self.area.reset_positions(slot, int(time.monotonic() * 1000))
            shrunk_or_grown = tp not in moved and role == Role.LEADER and self.area.read(slot).isr != st.isr
            self.area.write(slot, role, st.leader, st.leader_epoch, st.replicas, st.isr)
            if tp in moved:  # KIP-101: the new epoch starts at the LEO, before any append
                self.ctx.disks.submit(self.ctx.table.read(slot).disk, MsgType.BECOME_LEADER,
                                      slot, _EPOCH.pack(st.leader_epoch), on_done=_stamped, token=tp)
            elif shrunk_or_grown:  # the controller's ISR change: the HW may move without a fetch
                isr_changed(self.ctx, slot, tp)

    async def stop(self, changes: Changes) -> None:
        for tp in changes.stopped:
            self.fetcher.remove(tp)
            info = self.ctx.index.lookup(tp.topic, tp.partition)
            if info is None:
                continue
            self.area.clear(info.slot)
            if tp in changes.deleted:
                with self.ctx.table.locked():
                    self.ctx.table.set_state(info.slot, SlotState.DELETING)
                await self._submit(info.disk, MsgType.DELETE_PARTITION, info.slot, b"")
                self.ctx.index.refresh()

    async def _ensure_topic_id(self, tp: TopicPartition, slot: int) -> None:
        """The slot carries ZooKeeper's topic id (KIP-516), so that every broker answers the
        same id and a fetch by id finds the partition; its disk worker writes it."""
        tid = (await self.topic_ids.ids([tp.topic])).get(tp.topic)
        info = self.ctx.table.read(slot)
        if tid is not None and info.topic_id != tid:
            await self._submit(info.disk, MsgType.TOPIC_ID, slot, tid)

    async def _submit(self, disk: int, msg_type: int, slot: int, payload: bytes) -> int:
        comp = await self.ctx.disks.submit(disk, msg_type, slot, payload)
        if comp.error_code:
            log.error("message %d for slot %d failed: %s", msg_type, slot, ErrorCode(comp.error_code).name)
        return comp.error_code

    async def _ensure_partition(self, tp: TopicPartition) -> int:
        """The slot of ``tp``, created on the least loaded disk worker if this broker has none."""
        ctx = self.ctx
        ctx.index.refresh()
        info = ctx.index.lookup(tp.topic, tp.partition)
        if info is not None:
            return info.slot
        loop = asyncio.get_running_loop()
        assignment = await loop.run_in_executor(None, self.store.assignment, tp.topic)
        total = len(assignment.partitions) if assignment is not None else tp.partition + 1
        overrides = await loop.run_in_executor(None, self.store.topic_config, tp.topic)
        # the throttled-replica lists are the fetcher's (replication_throttle.py), not the log's
        overrides = {k: v for k, v in overrides.items() if k not in REPLICATION_KEYS}
        with ctx.table.locked():
            slot = ctx.table.find(tp.topic, tp.partition)
            if slot < 0:
                counts = ctx.table.partitions_per_disk()
                disk = min(range(len(counts)), key=counts.__getitem__)
                slot = ctx.table.allocate(tp.topic, tp.partition, total, disk, SlotState.CREATING)
            disk = ctx.table.read(slot).disk
        if await self._submit(disk, MsgType.CREATE_PARTITION, slot,
                              json.dumps({"configs": overrides}).encode()):
            return -1
        ctx.index.refresh()
        return slot


def isr_changed(ctx: Any, slot: int, tp: TopicPartition) -> None:
    """Tell the disk worker of a led partition whose ISR was just written to the leadership
    area: it applies the high watermark rule to the new ISR (fire and forget)."""
    ctx.disks.submit(ctx.table.read(slot).disk, MsgType.ISR_CHANGED, slot, on_done=_hw_checked, token=tp)


def _hw_checked(tp: TopicPartition, comp: Any) -> None:
    # NOT_LEADER_OR_FOLLOWER: leadership moved on meanwhile; nothing to apply
    if comp.error_code and comp.error_code != ErrorCode.NOT_LEADER_OR_FOLLOWER:
        log.error("%s: the high watermark after an ISR change: %s", tp, ErrorCode(comp.error_code).name)


def _stamped(tp: TopicPartition, comp: Any) -> None:
    # NOT_LEADER_OR_FOLLOWER: a newer LeaderAndIsr came first (produce stamps its epoch then)
    if comp.error_code and comp.error_code != ErrorCode.NOT_LEADER_OR_FOLLOWER:
        log.error("%s: stamping the leader epoch failed: %s", tp, ErrorCode(comp.error_code).name)
