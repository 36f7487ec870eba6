"""Which view of the topics a request is judged against: the one function that decides.

Two views are kept. The *local* one is the partition table: the partitions this broker holds a
replica of, with their offsets (``PartitionIndex``). The *cluster* one is every topic and
partition the controller's UpdateMetadata named (``MetadataCache``, cluster mode only). Kafka
judges whether a topic or partition exists against the cluster's view (its MetadataCache) and
serves data only from a local replica; a partition that exists in the cluster but is not led
here gets NOT_LEADER_OR_FOLLOWER (the client looks for the leader again), one the cluster does
not know UNKNOWN_TOPIC_OR_PARTITION.

Standalone, this broker *is* the cluster: both questions go to the partition table.
"""

from __future__ import annotations

from typing import Any

from appliance.errors import ErrorCode

__all__ = ["ClusterView"]


class ClusterView:
    """What exists in the cluster. ``cache`` is the shared MetadataCache in cluster mode, None
    standalone (the local partition index then answers)."""

    def __init__(self, index: Any, cache: Any = None) -> None:
        self.index = index
        self.cache = cache

    def has_partition(self, topic: str, partition: int) -> bool:
        if self.cache is None:
            return self.index.lookup(topic, partition) is not None
        parts = self.cache.topics().get(topic)
        return parts is not None and partition in parts

    def partition_count(self, topic: str, local: int) -> int:
        """How many partitions ``topic`` has. Cluster mode: the controller's (the metadata
        cache), once it has named the topic; else ``local``, the partition table's count. That
        count is made at start-up from this broker's own log dirs (the highest partition held
        + 1): a broker holding replicas of some partitions only counts too few. Measured: a
        broker restarted holding __transaction_state-0 and -1 of 3 counted 2, routed ids to the
        wrong partition, and answered NOT_COORDINATOR to them for minutes
        (tests/transactions/test_cluster_kills.py)."""
        if self.cache is not None:
            parts = self.cache.topics().get(topic)
            if parts:
                return len(parts)
        return local

    def not_served(self, topic: str, partition: int) -> int:
        """The error for a partition-level request this broker cannot serve (no local replica,
        or not the leader): retriable NOT_LEADER_OR_FOLLOWER when the partition exists in the
        cluster, UNKNOWN_TOPIC_OR_PARTITION when it does not."""
        if self.has_partition(topic, partition):
            return int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        return int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
