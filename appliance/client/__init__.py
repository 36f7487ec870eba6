"""appliance's own Kafka clients: Producer, Consumer (poll API, groups), SimpleConsumer (the
0.8 low-level API) and AdminClient, over the Kafka protocol (or, for producers, shared memory
to a broker on the same host: ``transport="ipc"|"auto"``)."""

from appliance.client.admin import AdminClient, NewTopic
from appliance.client.connection import KafkaConnectionError
from appliance.client.consumer import Consumer, ConsumerRebalanceListener
from appliance.client.delivery import CallbackHandler, ProducerFuture, RecordMetadata
from appliance.client.errors import CommitFailedError, NoOffsetForPartitionError, QueueFull
from appliance.client.fetching import ConsumerRecord, TopicPartition
from appliance.client.producer import DefaultPartitioner, Producer, ProducerRecord
from appliance.client.serialization import (
    Decoder,
    Encoder,
    JsonDecoder,
    JsonEncoder,
    StringDecoder,
    StringEncoder,
)
from appliance.client.simple_consumer import SimpleConsumer
from appliance.client.transport import SendFuture, SendResult, TcpTransport, Transport

__all__ = [
    "AdminClient", "NewTopic", "KafkaConnectionError", "Consumer", "ConsumerRebalanceListener",
    "CallbackHandler", "ProducerFuture", "RecordMetadata", "CommitFailedError", "NoOffsetForPartitionError",
    "QueueFull", "ConsumerRecord", "TopicPartition", "DefaultPartitioner", "Producer", "ProducerRecord",
    "Decoder", "Encoder", "JsonDecoder", "JsonEncoder", "StringDecoder", "StringEncoder", "SimpleConsumer",
    "SendFuture", "SendResult", "TcpTransport", "Transport",
]
