"""Replication throttling for reassignments (Kafka's KIP-73 replication quotas), follower side.

Kafka's layout, which `reassign-partitions --execute --throttle` writes and --verify removes:

- ``/config/brokers/<id>``: ``leader.replication.throttled.rate`` and
  ``follower.replication.throttled.rate`` (bytes/s) for every broker a moving partition is on;
- ``/config/topics/<t>``: ``leader.replication.throttled.replicas`` (``partition:broker`` of the
  replicas the partition had) and ``follower.replication.throttled.replicas`` (those being
  added), comma-separated, or ``*`` for all.

Follower side, in the fetcher: a throttled replica that is not caught up (its log end below the
leader's high watermark at the last fetch) is left out of the fetch while this broker's
throttled bytes have used up the follower rate (Kafka's ``shouldFollowerThrottle``; a token
bucket here, Kafka's is a windowed rate). Replicas in sync are never held back, so acks=all does
not slow.

Leader side (Kafka's ReplicationQuotaManager with ``shouldLeaderThrottle``): the cluster worker
publishes, per partition it leads, the leader rate when the topic's leader list names this
broker for it (0 otherwise) in the leadership area (:meth:`publish_leader_throttles`); the
network worker serving a follower's Fetch (:class:`LeaderQuota`) answers a throttled partition
with no records while the bytes it sent to throttled followers out of the ISR have used up its
share of the rate, and otherwise with at most one second's worth of it (at least one batch);
it never holds back a follower in the ISR. Each network worker keeps its own
bucket with rate / num.network.threads (they are separate processes; the sum stays within the
rate).

Settings come from kazoo data watches on those znodes (the cluster worker's session); the
fetcher reads the cached values, never ZooKeeper, per round.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from typing import Any

from appliance.cluster.zk_paths import TopicPartition, broker_config_path, topic_config_path

__all__ = [
    "LEADER_RATE", "FOLLOWER_RATE", "LEADER_REPLICAS", "FOLLOWER_REPLICAS", "REPLICATION_KEYS",
    "parse_replicas", "format_replicas", "is_throttled",
    "ThrottleSettings", "publish_leader_throttles",
]

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
# topic keys that tell the replication path, not the log: never handed to a disk worker
REPLICATION_KEYS = frozenset({LEADER_REPLICAS, FOLLOWER_REPLICAS})
ALL = "*"


def parse_replicas(value: str | None) -> frozenset[tuple[int, int]] | str:
    """``"0:1,1:2"`` -> {(0, 1), (1, 2)} (partition, broker); ``"*"`` -> ALL. Entries that do
    not parse are ignored (Kafka validates them when they are set)."""
    value = (value or "").strip()
    if value == ALL:
        return ALL
    out = set()
    for item in value.split(","):
        p, sep, b = item.strip().partition(":")
        if sep and p.strip().isdigit() and b.strip().isdigit():
            out.add((int(p), int(b)))
    return frozenset(out)


def format_replicas(pairs: Iterable[tuple[int, int]]) -> str:
    return ",".join(f"{p}:{b}" for p, b in sorted(set(pairs)))


def is_throttled(replicas: frozenset[tuple[int, int]] | str, partition: int, broker_id: int) -> bool:
    return replicas == ALL or (partition, broker_id) in replicas


def _config_of(data: bytes | None) -> dict[str, str]:
    if not data:
        return {}
    try:
        cfg = json.loads(data).get("config") or {}
    except (ValueError, AttributeError):
        return {}
    return {str(k): str(v) for k, v in cfg.items()} if isinstance(cfg, dict) else {}


class ThrottleSettings:
    """This broker's follower rate and the followed topics' throttled replicas, kept current by
    data watches (kazoo's thread writes, the fetcher's loop reads: whole-value swaps only)."""

    def __init__(self, client: Any, broker_id: int) -> None:
        self.client = client
        self.broker_id = broker_id
        self.follower_rate: int | None = None
        self.leader_rate: int | None = None
        self._replicas: dict[str, frozenset[tuple[int, int]] | str] = {}
        self._leader_replicas: dict[str, frozenset[tuple[int, int]] | str] = {}
        self._watched: set[str] = set()
        self._lock = threading.Lock()
        # a watch's set-up reads ZooKeeper, retrying while it is out of reach: on a thread of
        # its own, so no caller (the cluster worker's event loop) waits on it
        client.handler.spawn(client.DataWatch, broker_config_path(broker_id), self._on_broker)

    def _on_broker(self, data: bytes | None, _stat: Any) -> None:
        cfg = _config_of(data)
        v, lv = cfg.get(FOLLOWER_RATE, ""), cfg.get(LEADER_RATE, "")
        self.follower_rate = int(v) if v.strip().isdigit() else None
        self.leader_rate = int(lv) if lv.strip().isdigit() else None

    def watch_topic(self, topic: str) -> None:
        """Follow ``topic``'s throttled replicas from now on (idempotent)."""
        with self._lock:
            if topic in self._watched:
                return
            self._watched.add(topic)

        def on_topic(data: bytes | None, _stat: Any) -> None:
            cfg = _config_of(data)
            self._replicas[topic] = parse_replicas(cfg.get(FOLLOWER_REPLICAS))
            self._leader_replicas[topic] = parse_replicas(cfg.get(LEADER_REPLICAS))

        self.client.handler.spawn(self.client.DataWatch, topic_config_path(topic), on_topic)

    def throttled(self, tp: TopicPartition) -> bool:
        """Whether this broker's replica of ``tp`` is a throttled follower (a rate is set and
        the topic lists it)."""
        return (self.follower_rate is not None
                and is_throttled(self._replicas.get(tp.topic, frozenset()), tp.partition, self.broker_id))

    def leader_rate_for(self, tp: TopicPartition) -> int:
        """The leader rate when this broker's replica of ``tp`` is a throttled leader, else 0."""
        rate = self.leader_rate
        if rate is None or not is_throttled(self._leader_replicas.get(tp.topic, frozenset()),
                                            tp.partition, self.broker_id):
            return 0
        return rate


def publish_leader_throttles(settings: ThrottleSettings, led: Iterable[tuple[TopicPartition, int]],
                             area: Any) -> None:
    """For each (partition, slot) this broker leads, its leader rate into the leadership area
    (only when it changed); the topics are watched from their first pass on."""
    for tp, slot in led:
        settings.watch_topic(tp.topic)
        rate = settings.leader_rate_for(tp)
        if area.leader_throttle(slot) != rate:
            area.set_leader_throttle(slot, rate)
