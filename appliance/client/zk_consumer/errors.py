"""The ZooKeeper consumer's own errors (Kafka 0.8's ConsumerTimeoutException and
ConsumerRebalanceFailedException, and an unreachable ZooKeeper)."""

from __future__ import annotations

from appliance.errors import KafkaError

__all__ = ["ConsumerTimeout", "ConsumerRebalanceFailed", "ZooKeeperUnreachable"]


class ConsumerTimeout(KafkaError):
    """No message reached a stream within consumer.timeout.ms. The stream stays usable: iterate
    again to keep waiting."""


class ConsumerRebalanceFailed(KafkaError):
    """The group's partitions could not be claimed within rebalance.max.retries attempts
    (another owner's node stayed in place)."""


class ZooKeeperUnreachable(KafkaError):
    """No ZooKeeper server answered within zookeeper.connection.timeout.ms."""
