"""A client cannot write into __consumer_offsets (Kafka refuses appends to an internal topic with
INVALID_TOPIC_EXCEPTION): raw Produce v0, v2 and v8 and confluent-kafka are refused, nothing
lands in the log, and the group coordinator, the topic's one writer, still commits."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from appliance.errors import ErrorCode
from appliance.records.batch import build_batch
from appliance.records.legacy import build_message_set
from tests.broker.wire import RawConnection, produce_body

OFFSETS = "__consumer_offsets"
PRODUCE = 0


@pytest.fixture(scope="module")
def offsets_topic(module_broker):
    """A group's commit makes the broker create __consumer_offsets."""
    c = Consumer({"bootstrap.servers": module_broker.bootstrap, "group.id": "g-internal",
                  "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition("internal-t", 0, 5)], asynchronous=False)
    except Exception:  # the topic need not exist for the coordinator to be created
        pass
    finally:
        c.close()
    return module_broker


def _ends(broker) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g-watch"})
    try:
        md = c.list_topics(OFFSETS, timeout=10).topics[OFFSETS]
        return {p: c.get_watermark_offsets(TopicPartition(OFFSETS, p), timeout=10)[1]
                for p in md.partitions}
    finally:
        c.close()


# Produce version -> the records it carries (built in the test: a batch has a timestamp, and a
# parameter must be the same in every pytest-xdist worker)
_RECORDS = {0: lambda: build_message_set([(b"k", b"v")], magic=0),
            2: lambda: build_message_set([(b"k", b"v")], magic=1),
            8: lambda: build_batch([(b"k", b"v")])}


@pytest.mark.parametrize("version", sorted(_RECORDS))
def test_raw_produce_to_an_internal_topic_is_refused(offsets_topic, version):
    records = _RECORDS[version]()
    before = _ends(offsets_topic)
    port = int(offsets_topic.bootstrap.rsplit(":", 1)[1])
    for partition in (0, 42):
        with RawConnection(port) as c:
            resp = c.request(PRODUCE, version, produce_body(OFFSETS, partition, records))
        (topic,) = resp.responses
        (p,) = topic.partition_responses
        assert p.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert _ends(offsets_topic) == before  # nothing appended


def test_a_client_producer_is_refused_and_the_coordinator_still_commits(offsets_topic):
    errors = []
    p = Producer({"bootstrap.servers": offsets_topic.bootstrap, "message.timeout.ms": 10000})
    p.produce(OFFSETS, value=b"garbage", partition=3, on_delivery=lambda err, msg: errors.append(err))
    p.flush(15)
    assert [e.code() for e in errors] == [KafkaError.TOPIC_EXCEPTION]
    c = Consumer({"bootstrap.servers": offsets_topic.bootstrap, "group.id": "g-still",
                  "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(OFFSETS, 0, 1)], asynchronous=False)  # any partition name
        got = c.committed([TopicPartition(OFFSETS, 0)], timeout=10)
        assert got[0].offset == 1
    finally:
        c.close()
