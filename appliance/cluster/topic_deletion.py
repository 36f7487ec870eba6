"""Topic deletion, Kafka's TopicDeletionManager for the ZooKeeper era, beside the controller.

A topic marked under ``/admin/delete_topics`` is told to every broker as gone (UpdateMetadata
with the deletion's leader), its partitions go Offline then NonExistent, and its replicas go
Offline then DeletionStarted (StopReplica with delete) on live brokers, DeletionIneligible on
the others. Each broker's StopReplica answer moves its replicas to DeletionSuccessful (or
DeletionIneligible on an error); once every replica of the topic has been deleted, its znodes go
and the controller forgets it. A mark for a topic that does not exist is dropped.

It runs on the controller's event thread and drives the controller's own state machines (the
:class:`StateMachines` it is given): nothing here holds state of its own beyond the context's
``topics_deleting``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from appliance.cluster import events as ev
from appliance.cluster.context import ControllerContext
from appliance.cluster.partition_state import PartitionState
from appliance.cluster.replica_state import ReplicaState
from appliance.cluster.request_batch import LEADER_DURING_DELETE, PartitionInfo, RequestBatch
from appliance.cluster.zk_paths import LeaderIsr, TopicPartition
from appliance.cluster.zk_store import ZkStore

__all__ = ["TopicDeletion", "StateMachines"]

log = logging.getLogger("appliance.cluster.controller")

P, R = PartitionState, ReplicaState


class StateMachines(Protocol):
    """What deletion needs of the active controller (read afresh each time: a new election
    replaces the context and the batch)."""

    ctx: ControllerContext
    store: ZkStore
    batch: RequestBatch

    def partitions_to(self, tps: Iterable[TopicPartition], target: PartitionState,
                      chooser: Any = None) -> set[TopicPartition]: ...

    def replicas_to(self, pairs: Iterable[tuple[TopicPartition, int]], target: ReplicaState) -> None: ...


class TopicDeletion:
    def __init__(self, machines: StateMachines, put: Callable[[ev.ControllerEvent], None]) -> None:
        self.m = machines
        self.put = put  # the controller's event queue (StopReplica answers come back on it)

    def requested(self, requested: set[str]) -> None:
        """The topics marked for deletion now (``/admin/delete_topics``' children)."""
        m, ctx = self.m, self.m.ctx
        for t in sorted(requested - ctx.topics()):
            m.store.drop_deletion_request(t)
        for t in sorted((requested & ctx.topics()) - ctx.topics_deleting):
            ctx.topics_deleting.add(t)
            tps = ctx.partitions_of(t)
            gone = {tp: PartitionInfo(LeaderIsr(LEADER_DURING_DELETE, ctx.info(tp).state.leader_epoch,
                                                ctx.info(tp).state.isr, ctx.epoch), ctx.replicas[tp])
                    for tp in tps}
            m.batch.add_update_metadata(ctx.live, gone)
            online = [tp for tp in tps if ctx.partition_states.get(tp) is not P.OFFLINE]
            m.partitions_to(online, P.OFFLINE)
            m.partitions_to(tps, P.NON_EXISTENT)
            pairs = [(tp, b) for tp in tps for b in ctx.replicas[tp]]
            m.replicas_to([p for p in pairs if ctx.replica_states.get(p) is not R.OFFLINE], R.OFFLINE)
            m.replicas_to([p for p in pairs if p[1] in ctx.live], R.DELETION_STARTED)
            m.replicas_to([p for p in pairs if p[1] not in ctx.live], R.DELETION_INELIGIBLE)
            self._maybe_finish(t)

    def stop_replica_callback(self, broker_id: int, delete: bool) -> Callable | None:
        """The callback of a StopReplica sent to ``broker_id``: for a delete, its answer becomes
        a ReplicaDeletionResult event."""
        if not delete:
            return None

        def on_response(b: int, body: dict[str, Any] | None) -> None:
            results = {}
            for e in (body or {}).get("partition_errors", []):
                results[TopicPartition(e["topic_name"], e["partition_index"])] = e["error_code"]
            if body is not None and body.get("error_code", 0) != 0:
                results = dict.fromkeys(results, body["error_code"])
            self.put(ev.ReplicaDeletionResult(b, results))
        return on_response

    def replicas_answered(self, event: ev.ReplicaDeletionResult) -> None:
        """A broker answered a StopReplica(delete): its replicas deleted, or not."""
        m, ctx = self.m, self.m.ctx
        started = [(tp, err) for tp, err in event.results.items()
                   if ctx.replica_states.get((tp, event.broker_id)) is R.DELETION_STARTED]
        ok = [(tp, event.broker_id) for tp, err in started if err == 0]
        m.replicas_to(ok, R.DELETION_SUCCESSFUL)
        m.replicas_to([(tp, event.broker_id) for tp, err in started if err != 0], R.DELETION_INELIGIBLE)
        for t in sorted({tp.topic for tp, _ in ok}):
            self._maybe_finish(t)

    def _maybe_finish(self, topic: str) -> None:
        m, ctx = self.m, self.m.ctx
        pairs = [(tp, b) for tp in ctx.partitions_of(topic) for b in ctx.replicas[tp]]
        if topic not in ctx.topics_deleting or any(ctx.replica_states.get(p) is not R.DELETION_SUCCESSFUL
                                                    for p in pairs):
            return
        m.replicas_to(pairs, R.NON_EXISTENT)
        m.store.delete_topic_znodes(topic)
        ctx.remove_topic(topic)
        log.info("controller: topic %s deleted", topic)
