"""Partition reassignment beside the controller (the controller side of KIP-455, ZooKeeper era).

Not the operator tool: that is :mod:`appliance.cluster.reassignment` (``appliance
reassign-partitions``), which only writes requests; this module carries them out.

A partition moves from its ``original`` replicas to a ``target`` in two steps:

1. replicas = target + original; the topic znode records ``adding_replicas`` /
   ``removing_replicas``; every replica hears the new list (LeaderAndIsr, leader epoch + 1) and
   the new ones start following.
2. once every target replica is in the ISR (the leader's ISR change notification is the
   catch-up signal): leadership onto the target, replicas = target, the replicas no longer
   wanted stop and delete their copies, the request is done.

Requests arrive two ways, ``/admin/reassign_partitions`` (the ZooKeeper-era tools) and
AlterPartitionReassignments (API 45), and both take :meth:`PartitionReassignment.reassign`.
A cancel is a new reassignment back to the original replicas.

The in-flight reassignments are the context's ``reassigning`` (rebuilt from the topic znodes on
every election, and read by the context's ``info`` for LeaderAndIsr). This class holds no state
of its own: it runs on the controller's event thread and drives the controller's state machines
through :class:`StateMachines`, read afresh each time because a new election replaces the
context and the batch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable
from typing import Protocol

from appliance.cluster import election as rules
from appliance.cluster.context import ControllerContext, Reassignment
from appliance.cluster.replica_state import ReplicaState
from appliance.cluster.request_batch import NO_LEADER, RequestBatch
from appliance.cluster.zk_paths import LeaderIsr, TopicAssignment, TopicPartition
from appliance.cluster.zk_store import ZkStore
from appliance.errors import ErrorCode

__all__ = ["PartitionReassignment", "StateMachines", "Listed"]

log = logging.getLogger("appliance.cluster.controller")

R = ReplicaState
# ListPartitionReassignments' answer per partition: (replicas, adding, removing)
Listed = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]


class StateMachines(Protocol):
    """What reassignment needs of the active controller."""

    ctx: ControllerContext
    store: ZkStore
    batch: RequestBatch

    def replicas_to(self, pairs: Iterable[tuple[TopicPartition, int]], target: ReplicaState) -> None: ...

    def update_state(self, tp: TopicPartition,
                     compute: Callable[[LeaderIsr], tuple[int, tuple[int, ...]] | None]) -> LeaderIsr | None: ...

    def elect_leader(self, tp: TopicPartition, chooser: rules.Chooser) -> bool: ...

    def live_replicas(self, tp: TopicPartition) -> list[int]: ...


class PartitionReassignment:
    def __init__(self, machines: StateMachines) -> None:
        self.m = machines

    # -- requests ------------------------------------------------------------------------------

    def znode_changed(self) -> None:
        """``/admin/reassign_partitions`` changed: each entry goes through :meth:`reassign`, as
        AlterPartitionReassignments does; refused entries are dropped from the znode, the rest
        stay there until they complete."""
        m = self.m
        moves = m.store.reassignment()
        refused = set()
        for tp, target in sorted(moves.items()):
            code, why = self.reassign(tp, tuple(target))
            if code:
                log.error("reassignment of %s to %s refused: %s", tp, list(target), why)
                refused.add(tp)
        keep = {tp: t for tp, t in moves.items() if tp not in refused and tp in m.ctx.reassigning}
        if keep != moves:
            m.store.set_reassignment(keep)

    def alter(self, moves: dict[TopicPartition, tuple[int, ...] | None],
              same_replication_factor: bool) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
        """AlterPartitionReassignments (API 45): :meth:`reassign` per partition. An accepted
        partition leaves /admin/reassign_partitions, so a znode entry cannot restart what the
        API changed or cancelled (Kafka does the same)."""
        m = self.m
        results = {tp: self.reassign(tp, target, same_replication_factor)
                   for tp, target in sorted(moves.items(), key=lambda kv: kv[0])}
        pending = m.store.reassignment()
        left = {tp: t for tp, t in pending.items() if not (tp in results and results[tp][0] == ErrorCode.NONE)}
        if left != pending:
            m.store.set_reassignment(left)
        return results

    def listed(self, partitions: Collection[TopicPartition] | None) -> dict[TopicPartition, Listed]:
        """ListPartitionReassignments (API 46): the reassignments in flight, all or those of
        ``partitions``."""
        ctx = self.m.ctx
        # a cancel still waiting for an original replica to catch up moves nothing: not listed
        return {tp: (ctx.replicas[tp], r.adding, r.removing) for tp, r in ctx.reassigning.items()
                if r.target != r.original and (partitions is None or tp in partitions)}

    def reassign(self, tp: TopicPartition, target: tuple[int, ...] | None,
                 same_replication_factor: bool = False) -> tuple[ErrorCode, str | None]:
        """Start, redirect or (``target`` None) cancel ``tp``'s reassignment: the one path of
        both the znode and the API. Returns (error code, message) as AlterPartitionReassignments
        answers them; on an error nothing has changed."""
        ctx = self.m.ctx
        if tp not in ctx.replicas or tp.topic in ctx.topics_deleting:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"partition {tp} does not exist"
        current = ctx.reassigning.get(tp)
        if target is None:
            if current is None or current.target == current.original:
                return ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, f"no reassignment of {tp} is in progress"
            target = current.original  # cancel: back to the replicas it had
        else:
            problem = self._replica_list_problem(target)
            if problem:
                return ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem
        original = current.original if current is not None else ctx.replicas[tp]
        if same_replication_factor and len(target) != len(original):
            return (ErrorCode.INVALID_REPLICATION_FACTOR, f"the replication factor of {tp} would change "
                    f"from {len(original)} to {len(target)}, and allow_replication_factor_change is false")
        if current is not None and current.target == target:
            return ErrorCode.NONE, None  # already on its way there
        if current is None and target == ctx.replicas[tp]:
            return ErrorCode.NONE, None  # nothing to move
        ctx.reassigning[tp] = Reassignment(original, target)
        self._start(tp)
        return ErrorCode.NONE, None

    # -- what moves a reassignment on ------------------------------------------------------------

    def isr_changed(self, tps: Iterable[TopicPartition]) -> None:
        """The leaders wrote new ISRs for ``tps``: those in flight may be complete."""
        for tp in sorted(set(tps) & set(self.m.ctx.reassigning)):
            self._maybe_complete(tp)

    def retry_all(self) -> None:
        """Every reassignment in flight may be complete (a new controller; brokers came back)."""
        for tp in list(self.m.ctx.reassigning):
            self._maybe_complete(tp)

    # -- the steps -------------------------------------------------------------------------------

    def _replica_list_problem(self, target: tuple[int, ...]) -> str | None:
        """Kafka's validateReplicas messages (all INVALID_REPLICA_ASSIGNMENT)."""
        if not target:
            return "Empty replica list specified in partition reassignment."
        if len(set(target)) != len(target):
            return f"Duplicate replica ids in partition reassignment replica list: {list(target)}"
        if any(b < 0 for b in target):
            return f"Invalid broker id in replica list: {list(target)}"
        missing = [b for b in target if b not in self.m.ctx.live]
        if missing:
            return f"Some brokers specified for partition reassignment are not alive: {missing}"
        return None

    def _write_assignment(self, topic: str) -> None:
        ctx = self.m.ctx
        tps = ctx.partitions_of(topic)
        self.m.store.set_assignment(topic, TopicAssignment(
            {tp.partition: ctx.replicas[tp] for tp in tps},
            {tp.partition: ctx.reassigning[tp].adding for tp in tps if tp in ctx.reassigning},
            {tp.partition: ctx.reassigning[tp].removing for tp in tps if tp in ctx.reassigning},
            ctx.topic_ids.get(topic)))

    def _start(self, tp: TopicPartition) -> None:
        """Step 1: replicas = target + original; every replica hears it (leader epoch + 1); the
        new ones start following. Completion waits until the target replicas are all in the
        ISR; the leader's ISR change notification is the catch-up signal.

        When a reassignment in progress is redirected or cancelled, replicas it was adding that
        the new one does not want leave the ISR, stop and delete their copies at once."""
        m, ctx = self.m, self.m.ctx
        r = ctx.reassigning[tp]
        before = ctx.replicas[tp]
        fresh = [(tp, b) for b in r.full if b not in before]
        unneeded = [(tp, b) for b in before if b not in r.full]
        ctx.replicas[tp] = r.full
        self._write_assignment(tp.topic)
        m.replicas_to(fresh, R.NEW)

        def compute(cur: LeaderIsr) -> tuple[int, tuple[int, ...]]:
            isr = tuple(i for i in cur.isr if i in r.full) or cur.isr  # never an empty ISR
            if cur.leader in r.full or cur.leader == NO_LEADER:
                return cur.leader, isr
            e = rules.reassign_partition_leader(r.full, isr, ctx.live_ids)
            return (e.leader, isr) if e is not None else (NO_LEADER, isr)

        if m.update_state(tp, compute) is not None:
            m.batch.add_leader_and_isr(m.live_replicas(tp), tp, ctx.info(tp))
        m.replicas_to(fresh, R.ONLINE)
        self._drop_replicas(unneeded)
        self._maybe_complete(tp)

    def _drop_replicas(self, pairs: list[tuple[TopicPartition, int]]) -> None:
        """Replicas no longer in their partition's list: stop them and delete their copies."""
        for target in (R.OFFLINE, R.DELETION_STARTED, R.DELETION_SUCCESSFUL, R.NON_EXISTENT):
            self.m.replicas_to(pairs, target)

    def _maybe_complete(self, tp: TopicPartition) -> None:
        """Step 2, once the target replicas are all in sync: leadership onto the target,
        replicas = target, the old replicas stop and delete their copies, the request is done."""
        m, ctx = self.m, self.m.ctx
        r = ctx.reassigning.get(tp)
        s = ctx.leader_isr.get(tp)
        if r is None or s is None or not set(r.target) <= set(s.isr):
            return
        # the leader must be a target replica, and the target's first (its preferred leader)
        # takes over when it is in sync, so the new order's leadership holds at once
        # (a cancel, target == original, keeps its leader: it moved nothing)
        preferred = r.target[0]
        moved = (s.leader != preferred and preferred in s.isr and preferred in ctx.live_ids
                 and r.target != r.original)
        if s.leader not in r.target or s.leader not in ctx.live_ids or moved:
            if not m.elect_leader(tp, self._chooser):
                return  # no target replica can lead yet; try again on the next ISR change
        else:
            new = m.update_state(tp, lambda cur: (cur.leader, tuple(i for i in cur.isr if i in r.target)))
            if new is None:
                return
        del ctx.reassigning[tp]
        ctx.replicas[tp] = r.target
        m.batch.add_leader_and_isr(m.live_replicas(tp), tp, ctx.info(tp))
        self._drop_replicas([(tp, b) for b in r.removing])
        self._write_assignment(tp.topic)
        pending = m.store.reassignment()
        if tp in pending:
            del pending[tp]
            m.store.set_reassignment(pending)
        m.batch.add_update_metadata(ctx.live, {tp: ctx.info(tp)})
        log.info("controller: reassignment of %s to %s complete", tp, list(r.target))

    def _chooser(self, tp: TopicPartition, replicas: tuple[int, ...], s: LeaderIsr) -> rules.Election | None:
        """The leader for step 2: the first live target replica in the ISR; the ISR keeps only
        target replicas."""
        target = self.m.ctx.reassigning[tp].target
        e = rules.reassign_partition_leader(target, s.isr, self.m.ctx.live_ids)
        return None if e is None else rules.Election(e.leader, tuple(i for i in s.isr if i in target))
