"""Leader election rules, one small function per reason a leader is chosen (Kafka's
``PartitionLeaderElectionAlgorithms``). Pure: replica list, ISR and live brokers in, a
:class:`Election` (new leader and ISR) or None out. Replica-list order is the preference order.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from appliance.cluster.zk_paths import LeaderIsr, TopicPartition

__all__ = [
    "Election", "Chooser", "offline_partition_leader", "reassign_partition_leader", "preferred_replica_leader",
    "controlled_shutdown_leader",
]


@dataclass(frozen=True, slots=True)
class Election:
    leader: int
    isr: tuple[int, ...]
    unclean: bool = False


# What the controller asks when it elects: one of the rules below bound to its context, given a
# partition, its replicas and its current leader/ISR (the controller and reassignment share it).
Chooser = Callable[[TopicPartition, tuple[int, ...], LeaderIsr], "Election | None"]


def offline_partition_leader(replicas: Sequence[int], isr: Sequence[int], live: Collection[int],
                             unclean_allowed: bool) -> Election | None:
    """The leader is gone (or the partition is new): the first live replica that is in the ISR;
    if none and ``unclean.leader.election.enable``, the first live replica at all, which may
    have lost acknowledged records, so the ISR becomes just that replica."""
    for r in replicas:
        if r in live and r in isr:
            return Election(r, tuple(i for i in isr if i in live))
    if unclean_allowed:
        for r in replicas:
            if r in live:
                return Election(r, (r,), unclean=True)
    return None


def reassign_partition_leader(target_replicas: Sequence[int], isr: Sequence[int],
                              live: Collection[int]) -> Election | None:
    """During reassignment the leader must be among the target replicas: the first live target
    replica in the ISR. The ISR is unchanged."""
    for r in target_replicas:
        if r in live and r in isr:
            return Election(r, tuple(isr))
    return None


def preferred_replica_leader(replicas: Sequence[int], isr: Sequence[int],
                             live: Collection[int]) -> Election | None:
    """Leadership back to the first replica, only if it is alive and in sync."""
    if replicas and replicas[0] in live and replicas[0] in isr:
        return Election(replicas[0], tuple(isr))
    return None


def controlled_shutdown_leader(replicas: Sequence[int], isr: Sequence[int], live: Collection[int],
                               shutting_down: Collection[int]) -> Election | None:
    """Move leadership off the brokers shutting down: the first live replica in the ISR that is
    not shutting down; the ones shutting down leave the ISR."""
    new_isr = tuple(r for r in isr if r not in shutting_down)
    for r in replicas:
        if r in live and r in new_isr:
            return Election(r, new_isr)
    return None
