"""The leader's ISR and high-watermark rules (Kafka's ``Partition``: maybeIncrementLeaderHW,
getOutOfSyncReplicas / maybeShrinkIsr, maybeExpandIsr), and how a leader records an ISR change:
a zkVersion-conditional write of the state znode, then an ISR change notification.

The rules are pure functions so the disk worker that owns the partition can run them in its
loop; the writes need the ZooKeeper session, so they run in the cluster worker.

Thread-safety: the functions are pure; :class:`IsrChangePropagator` belongs to one thread.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from appliance.cluster.leadership import PartitionLeadership
from appliance.cluster.zk_paths import LeaderIsr, TopicPartition
from appliance.cluster.zk_store import ZkStore

__all__ = [
    "out_of_sync_replicas", "caught_up_replicas", "propose_isr",
    "IsrChangePropagator", "PROPAGATION_MIN_INTERVAL_MS",
]

# Kafka 2.x's ReplicaManager announced ISR changes once none had happened for 5 s (or every 60 s
# while they kept coming), so Metadata showed an ISR change 5-60 s late; Kafka 2.7+ sends each
# change to the controller at once (AlterIsr, KIP-497). We keep the ZooKeeper notification (the
# controller already acts on it at once) and announce at the end of the upkeep round that made
# the change: every broker's Metadata has it within about a second. At most one notification
# per PROPAGATION_MIN_INTERVAL_MS per broker, so a flapping follower cannot flood the controller
# even with a tiny replica.lag.time.max.ms (rounds every lag/2).
PROPAGATION_MIN_INTERVAL_MS = 250


def out_of_sync_replicas(leader_id: int, isr: Collection[int], last_caught_up_ms: Mapping[int, int],
                         now_ms: int, lag_time_max_ms: int) -> set[int]:
    """Followers in the ISR that have not been caught up to the leader's log end for longer
    than ``replica.lag.time.max.ms`` (a follower never seen counts as never caught up)."""
    return {r for r in isr if r != leader_id
            and now_ms - last_caught_up_ms.get(r, -(1 << 62)) > lag_time_max_ms}


def caught_up_replicas(leader_id: int, replicas: Collection[int], isr: Collection[int],
                       follower_leos: Mapping[int, int], hw: int) -> set[int]:
    """Assigned followers outside the ISR whose log end has reached the HW: they may join."""
    return {r for r in replicas if r != leader_id and r not in isr and follower_leos.get(r, -1) >= hw}


def propose_isr(store: ZkStore, tp: TopicPartition, held: PartitionLeadership,
                new_isr: tuple[int, ...]) -> PartitionLeadership | None:
    """The leader writes a new ISR, conditional on the zkVersion it holds. Returns the new state
    (with the new zkVersion), or None when the znode moved on: the controller changed the
    partition and its LeaderAndIsr is on its way; the leader keeps its old ISR until then.

    A version conflict on a znode still at this leader's epoch is not the controller's (every
    controller write bumps the leader epoch): it is this leader's own earlier write whose answer
    was lost with its connection (kazoo raised; the write had landed). Waiting for a LeaderAndIsr
    then waits forever — no ISR change of this partition would ever be written again (Kafka's
    stuck "cached zkVersion" ISR). So the znode's state is taken as the one held: the new ISR
    when it is that (Kafka's checkLeaderAndIsrZkData), else the ISR it records, from which the
    next round decides again."""
    written = store.update_partition_state(
        tp, LeaderIsr(held.leader, held.leader_epoch, tuple(new_isr), held.controller_epoch, held.zk_version),
        None)
    if written is None:
        now = store.partition_state(tp)
        if now is None or (now.leader, now.leader_epoch) != (held.leader, held.leader_epoch):
            return None
        return PartitionLeadership(held.leader, held.leader_epoch, tuple(now.isr), held.replicas,
                                   now.zk_version, now.controller_epoch, held.offline)
    return PartitionLeadership(held.leader, held.leader_epoch, tuple(new_isr), held.replicas,
                               written.zk_version, held.controller_epoch, held.offline)


class IsrChangePropagator:
    """Collects partitions whose ISR this broker changed and announces them to the controller
    with one ``/isr_change_notification`` node per round (see PROPAGATION_MIN_INTERVAL_MS)."""

    def __init__(self, store: ZkStore) -> None:
        self.store = store
        self.pending: set[TopicPartition] = set()
        self.last_propagation_ms: int | None = None

    def record(self, tp: TopicPartition) -> None:
        self.pending.add(tp)

    def maybe_propagate(self, now_ms: int) -> bool:
        """Write the notification if anything is pending and the last one is old enough; True
        if one was written."""
        if not self.pending:
            return False
        if self.last_propagation_ms is not None and now_ms - self.last_propagation_ms < PROPAGATION_MIN_INTERVAL_MS:
            return False
        self.store.notify_isr_change(self.pending)
        self.pending = set()
        self.last_propagation_ms = now_ms
        return True
