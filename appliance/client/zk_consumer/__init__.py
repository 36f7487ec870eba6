"""The 0.8 high-level ("ZooKeeper") consumer of the design documents: a ConsumerConnector that
registers in ``/consumers/<group>``, rebalances the group's partitions through ZooKeeper and
hands records to KafkaStream iterators, with offsets in ZooKeeper or Kafka.

    connector = create_java_consumer_connector({"zookeeper.connect": "zk:2181", "group.id": "g"})
    streams = connector.create_message_streams({"orders": 2})
    for m in streams["orders"][0]:      # MessageAndMetadata(key, message, topic, partition, offset)
        ...
    connector.shutdown()

Modules: settings (consumer.properties, the ZooKeeper session), znodes (the layout), filters
(Whitelist/Blacklist), assignment (range/roundrobin over thread ids), rebalance (claims in
ZooKeeper), offsets (zookeeper/kafka/dual storage), fetcher, stream, connector.
"""

from __future__ import annotations

from appliance.client.zk_consumer.connector import ConsumerConnector, create_java_consumer_connector
from appliance.client.zk_consumer.errors import (
           ConsumerRebalanceFailed,
           ConsumerTimeout,
           ZooKeeperUnreachable,
)
from appliance.client.zk_consumer.filters import Blacklist, TopicFilter, Whitelist
from appliance.client.zk_consumer.stream import KafkaStream, MessageAndMetadata

__all__ = ["ConsumerConnector", "create_java_consumer_connector", "ConsumerRebalanceFailed", "ConsumerTimeout",
           "ZooKeeperUnreachable", "Blacklist", "TopicFilter", "Whitelist", "KafkaStream", "MessageAndMetadata"]
