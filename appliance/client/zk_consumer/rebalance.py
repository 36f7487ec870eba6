"""The ZooKeeper side of a rebalance (the design documents' "Consumer rebalancing algorithm"):
read the group (members' registrations, the topics and their partition counts), release this
consumer's owner nodes, and claim the partitions :func:`assignment.assign` gave it.

A claim is an ephemeral ``/consumers/<group>/owners/<topic>/<partition>`` holding the thread id.
When one is already there and not ours, the whole claim is undone and :class:`Conflict` says who
holds it: a member that has not released yet, or a consumer no longer registered (it died and
its ZooKeeper session has not expired: its node goes when the session does). The caller backs
off rebalance.backoff.ms and starts the rebalance over, up to rebalance.max.retries times.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from appliance.client.zk_consumer.assignment import consumer_of, topic_threads
from appliance.client.zk_consumer.registry import partition_count
from appliance.client.zk_consumer.znodes import (
    BROKER_TOPICS,
    Registration,
    decode_registration,
    ids_path,
    owner_path,
)

__all__ = ["GroupState", "Conflict", "read_group", "claim", "release", "still_owned"]

log = logging.getLogger("appliance.client.zk_consumer")


@dataclass(frozen=True, slots=True)
class GroupState:
    registrations: dict[str, Registration]  # live consumer id -> its registration
    topics: list[str]  # every topic in /brokers/topics
    partition_counts: dict[str, int]  # of the topics some member subscribes to


@dataclass(frozen=True, slots=True)
class Conflict:
    topic: str
    partition: int
    owner: str  # the thread id in the node
    owner_registered: bool  # False: a dead consumer's node, waiting for its session to expire

    def describe(self) -> str:
        if self.owner_registered:
            return f"{self.topic}-{self.partition} is still owned by {self.owner} (not released yet)"
        return (f"{self.topic}-{self.partition} is owned by {self.owner}, which is no longer registered in the "
                "group: waiting for that stale owner's ZooKeeper session to expire")


def read_group(zk: KazooClient, group: str, exclude_internal: bool) -> GroupState:
    """The group as ZooKeeper holds it now. Registrations that vanish while being read (a
    member leaving) are skipped; unreadable ones are logged and skipped."""
    regs: dict[str, Registration] = {}
    for cid in sorted(zk.get_children(ids_path(group))):
        path = f"{ids_path(group)}/{cid}"
        try:
            data, _ = zk.get(path)
            regs[cid] = decode_registration(data, path)
        except NoNodeError:
            continue
        except ValueError as e:
            log.warning("ignoring consumer %s of group %s: %s", cid, group, e)
    try:
        topics = sorted(zk.get_children(BROKER_TOPICS))
    except NoNodeError:
        topics = []
    wanted = {t for cid, reg in regs.items() for t in topic_threads(cid, reg, topics, exclude_internal)}
    counts: dict[str, int] = {}
    for t in sorted(wanted):
        try:
            n = partition_count(zk, t)
        except ValueError as e:
            log.warning("topic %s: %s; not assigned", t, e)
            continue
        if n is not None:  # else subscribed before it exists: its watch rebalances when it is created
            counts[t] = n
    return GroupState(regs, topics, counts)


def release(zk: KazooClient, group: str, consumer_id: str, partitions: list[tuple[str, int]]) -> None:
    """Delete the owner nodes of ``partitions`` that hold one of our thread ids."""
    for topic, p in partitions:
        path = owner_path(group, topic, p)
        try:
            data, _ = zk.get(path)
            if consumer_of(data.decode(errors="replace")) == consumer_id:
                zk.delete(path)
        except NoNodeError:
            pass


def claim(zk: KazooClient, group: str, consumer_id: str, wanted: dict[tuple[str, int], str],
          registered: set[str]) -> Conflict | None:
    """Create an owner node for each of ``wanted`` ({(topic, partition): thread id}); None when
    all are ours, else the first conflict (the nodes made by this call are deleted again)."""
    made: list[tuple[str, int]] = []
    for (topic, p), tid in sorted(wanted.items()):
        path = owner_path(group, topic, p)
        try:
            zk.create(path, tid.encode(), ephemeral=True, makepath=True)
            made.append((topic, p))
            continue
        except NodeExistsError:
            pass
        try:
            data, _ = zk.get(path)
        except NoNodeError:  # released just now: the next attempt takes it
            data = b""
        owner = data.decode(errors="replace")
        if owner == tid:  # ours already (a claim made before a connection loss was retried)
            made.append((topic, p))
            continue
        release(zk, group, consumer_id, made)
        return Conflict(topic, p, owner, consumer_of(owner) in registered)
    return None


def still_owned(zk: KazooClient, group: str, wanted: dict[tuple[str, int], str],
                owned: dict[tuple[str, int], str]) -> bool:
    """True when ``wanted`` is what we own now and every one of its owner nodes still holds our
    thread id (nothing to release or claim)."""
    if wanted != owned:
        return False
    for (topic, p), tid in wanted.items():
        try:
            if zk.get(owner_path(group, topic, p))[0].decode(errors="replace") != tid:
                return False
        except NoNodeError:
            return False
    return True
