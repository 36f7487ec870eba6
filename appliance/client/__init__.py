"""appliance's own Kafka clients: Producer, Consumer (poll API, groups), SimpleConsumer (the
0.8 low-level API), the 0.8 high-level ZooKeeper consumer (create_java_consumer_connector,
package ``zk_consumer``) and AdminClient, over the Kafka protocol (or, for producers, shared memory
to a broker on the same host: ``transport="ipc"|"auto"``).

Names are imported on first use (PEP 562): the record and batch code pulls in numba, which a
tool that only needs a connection should not wait for.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "AdminClient": "admin", "NewTopic": "admin",
    "KafkaConnectionError": "connection",
    "Consumer": "consumer", "ConsumerRebalanceListener": "consumer",
    "CallbackHandler": "delivery", "ProducerFuture": "delivery", "RecordMetadata": "delivery",
    "CommitFailedError": "errors", "NoOffsetForPartitionError": "errors", "QueueFull": "errors",
    "ConsumerRecord": "fetching", "TopicPartition": "fetching",
    "DefaultPartitioner": "producer", "Producer": "producer", "ProducerRecord": "producer",
    "Decoder": "serialization", "Encoder": "serialization", "JsonDecoder": "serialization",
    "JsonEncoder": "serialization", "StringDecoder": "serialization", "StringEncoder": "serialization",
    "SimpleConsumer": "simple_consumer",
    "ConsumerConnector": "zk_consumer", "create_java_consumer_connector": "zk_consumer",
    "Whitelist": "zk_consumer", "Blacklist": "zk_consumer", "ConsumerTimeout": "zk_consumer",
    "ConsumerGroupMetadata": "transactions", "ProducerFencedError": "transactions",
    "TransactionStateError": "transactions", "TransactionAbortableError": "transactions",
    "SendFuture": "transport", "SendResult": "transport", "TcpTransport": "transport", "Transport": "transport",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'appliance.client' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"appliance.client.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
