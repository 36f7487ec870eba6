"""Group -> ``__consumer_offsets`` partition, exactly as Kafka computes it.

Kafka: ``Utils.abs(groupId.hashCode) % offsets.topic.num.partitions`` with Java's String.hashCode
(over UTF-16 code units, int32 arithmetic) and ``Utils.abs(n) = n & 0x7fffffff``. Matching it keeps
the same group on the same partition as a Kafka cluster would put it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["java_string_hash", "offsets_partition_for", "OFFSETS_TOPIC", "offsets_topic_config",
           "TXN_TOPIC", "txn_partition_for", "txn_topic_config"]

OFFSETS_TOPIC = "__consumer_offsets"
TXN_TOPIC = "__transaction_state"


def offsets_topic_config(broker_config: Mapping[str, Any] | Any) -> dict[str, str]:
    """The offsets topic's own configuration, as Kafka creates it: compacted, with
    offsets.topic.segment.bytes segments."""
    return {"cleanup.policy": "compact",
            "segment.bytes": str(int(broker_config["offsets.topic.segment.bytes"]))}


def java_string_hash(s: str) -> int:
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def offsets_partition_for(group_id: str, num_partitions: int) -> int:
    return (java_string_hash(group_id) & 0x7FFFFFFF) % num_partitions


def txn_partition_for(transactional_id: str, num_partitions: int) -> int:
    """The ``__transaction_state`` partition of a transactional id, as Kafka's
    TransactionStateManager.partitionFor: ``Utils.abs(hash) % n``, where ``Utils.abs`` is
    Math.abs with Integer.MIN_VALUE mapped to 0 (for a negative hash it differs from
    ``& 0x7fffffff``: -5 gives 5, not 2147483643)."""
    h = java_string_hash(transactional_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


def txn_topic_config(broker_config: Mapping[str, Any] | Any, replication_factor: int = 1) -> dict[str, str]:
    """``__transaction_state``'s own configuration, as Kafka creates it: compacted,
    transaction.state.log.segment.bytes segments, transaction.state.log.min.isr. The min ISR is
    capped at the replication factor, which is capped at the live brokers (as for the offsets
    topic): Kafka would refuse to create the topic on fewer brokers than
    transaction.state.log.replication.factor, and with a smaller one no write could succeed."""
    min_isr = min(int(broker_config["transaction.state.log.min.isr"]), max(replication_factor, 1))
    return {"cleanup.policy": "compact",
            "segment.bytes": str(int(broker_config["transaction.state.log.segment.bytes"])),
            "min.insync.replicas": str(min_isr),
            "unclean.leader.election.enable": "false"}
