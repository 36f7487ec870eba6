"""The leader's ISR upkeep, in the cluster worker (Kafka's maybeShrinkIsr / maybeExpandIsr): every
tick, for each partition this broker leads, read the followers' positions the disk worker keeps
in the leadership area, drop followers not caught up for ``replica.lag.time.max.ms``, add
followers whose log end reached the high watermark, write the new ISR to ZooKeeper conditional
on its zkVersion (:func:`appliance.cluster.isr.propose_isr`), publish it, and announce it to the
controller at the end of the round (:class:`IsrChangePropagator`), which then updates every
broker's metadata at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from kazoo.exceptions import ConnectionLoss, OperationTimeoutError, SessionExpiredError

from appliance.cluster.isr import (
    IsrChangePropagator,
    caught_up_replicas,
    out_of_sync_replicas,
    propose_isr,
)
from appliance.cluster.leadership import LeadershipTable
from appliance.cluster.local_replicas import isr_changed
from appliance.cluster.zk_store import ZkStore
from appliance.shm.layout import Role
from appliance.shm.leadership_area import LeadershipArea

__all__ = ["IsrManager"]

log = logging.getLogger("appliance.cluster.isr")


class IsrManager:
    def __init__(self, ctx: Any, table: LeadershipTable, area: LeadershipArea, store: ZkStore,
                 lock: asyncio.Lock, metrics: Any = None) -> None:
        self.ctx = ctx
        self.table = table
        self.area = area
        self.store = store
        self.lock = lock  # LocalReplicas' lock: no LeaderAndIsr is applied while we write
        self.lag_ms = int(ctx.config["replica.lag.time.max.ms"])
        self.propagator = IsrChangePropagator(store)
        self.metrics = metrics  # a Recorder when metrics are on: ISR shrinks and expansions

    async def run(self) -> None:
        interval = min(self.lag_ms / 2, 1000) / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                async with self.lock:
                    await self.tick()
            except (ConnectionLoss, OperationTimeoutError, SessionExpiredError) as e:
                # ZooKeeper out of reach for now: the next tick proposes the change again
                log.warning("ISR upkeep: ZooKeeper unavailable (%s); trying again", type(e).__name__)
            except Exception:
                log.exception("ISR upkeep failed")

    async def tick(self) -> None:
        me = self.table.broker_id
        loop = asyncio.get_running_loop()
        now = _now_ms()
        for tp, held in list(self.table.local.items()):
            if held.leader != me:
                continue
            info = self.ctx.index.lookup(tp.topic, tp.partition)
            if info is None:
                continue
            lead = self.area.read(info.slot)
            if lead.role != Role.LEADER or lead.leader_epoch != held.leader_epoch:
                continue
            leos, caught = self.area.positions(info.slot)
            reps = lead.replicas
            follower_leos = {r: leos[i] for i, r in enumerate(reps)}
            caught_up = {r: caught[i] for i, r in enumerate(reps)}
            hw = self.ctx.table.offsets(info.slot)[1]
            out = out_of_sync_replicas(me, held.isr, caught_up, now, self.lag_ms)
            # only a follower that is fetching: a dead one's last position stays in the area
            joining = {r for r in caught_up_replicas(me, reps, held.isr, follower_leos, hw)
                       if now - caught_up[r] <= self.lag_ms}
            if not out and not joining:
                continue
            new_isr = tuple(r for r in held.isr if r not in out) + tuple(sorted(joining))
            written = await loop.run_in_executor(None, propose_isr, self.store, tp, held, new_isr)
            if written is None:
                continue  # the controller moved the partition: its LeaderAndIsr is on its way
            if written.isr == held.isr:  # only the zkVersion was stale (see propose_isr)
                self.table.local[tp] = written
                continue
            log.info("%s: ISR %s -> %s", tp, list(held.isr), list(written.isr))
            if self.metrics is not None:
                self.metrics.isr_changed(bool(set(held.isr) - set(written.isr)),
                                         bool(set(written.isr) - set(held.isr)))
            self.table.local[tp] = written
            self.area.write(info.slot, Role.LEADER, written.leader, written.leader_epoch,
                            written.replicas, written.isr)
            isr_changed(self.ctx, info.slot, tp)
            self.propagator.record(tp)
        await loop.run_in_executor(None, self.propagator.maybe_propagate, _now_ms())


def _now_ms() -> int:
    return int(time.monotonic() * 1000)
