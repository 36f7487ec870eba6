"""OffsetDelete (47, KIP-496) on the wire: committed offsets go, except of topics a live group
still consumes; what the real clients then read back agrees. (Neither kafka-python's nor
confluent-kafka's Python admin client offers OffsetDelete, so it is sent by our protocol module;
the commits and the read-back go through the real clients.)"""

from __future__ import annotations

import time
import warnings

from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import AdminClient

from appliance.errors import ErrorCode
from tests.broker.clients import create_topic
from tests.broker.wire import RawConnection

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition


def _offset_delete(port: int, group: str, topics: dict[str, list[int]]):
    with RawConnection(port) as conn:
        return conn.request(47, 0, {"group_id": group, "topics": [
            {"name": t, "partitions": [{"partition_index": p} for p in ps]} for t, ps in topics.items()]})


def _codes(resp) -> dict[tuple[str, int], int]:
    return {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}


def _committed(bootstrap: str, group: str, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    req = ConsumerGroupTopicPartitions(group, [CTP(t, p) for t, p in tps])
    res = next(iter(admin.list_consumer_group_offsets([req]).values())).result(timeout=30)
    return {(tp.topic, tp.partition): tp.offset for tp in res.topic_partitions}


def test_offset_delete_of_an_empty_group(module_broker):
    b = module_broker.bootstrap
    create_topic(b, "od-a", 2)
    c = KafkaConsumer(bootstrap_servers=b, group_id="od-empty", enable_auto_commit=False)
    c.assign([TopicPartition("od-a", 0), TopicPartition("od-a", 1)])
    c.commit({TopicPartition("od-a", 0): OffsetAndMetadata(5, "", -1),
              TopicPartition("od-a", 1): OffsetAndMetadata(7, "", -1)})
    c.close()
    r = _offset_delete(module_broker.port, "od-empty", {"od-a": [0], "od-missing": [0]})
    assert r.error_code == 0
    assert _codes(r) == {("od-a", 0): 0, ("od-missing", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert _committed(b, "od-empty", [("od-a", 0), ("od-a", 1)]) == {("od-a", 0): -1001, ("od-a", 1): 7}
    assert _offset_delete(module_broker.port, "od-no-such-group", {"od-a": [0]}).error_code == \
        ErrorCode.GROUP_ID_NOT_FOUND


def test_offset_delete_refuses_topics_a_live_group_consumes(module_broker):
    b = module_broker.bootstrap
    create_topic(b, "od-live", 1)
    create_topic(b, "od-old", 1)
    p = KafkaProducer(bootstrap_servers=b)
    p.send("od-live", b"x").get(timeout=30)
    p.close()
    c = KafkaConsumer(bootstrap_servers=b, group_id="od-live-g", enable_auto_commit=False,
                      auto_offset_reset="earliest", session_timeout_ms=30000)
    try:
        c.subscribe(["od-live"])
        deadline = time.monotonic() + 60
        while not c.assignment() and time.monotonic() < deadline:
            c.poll(timeout_ms=500)
        assert c.assignment() == {TopicPartition("od-live", 0)}
        c.commit({TopicPartition("od-live", 0): OffsetAndMetadata(1, "", -1),
                  TopicPartition("od-old", 0): OffsetAndMetadata(3, "", -1)})
        r = _offset_delete(module_broker.port, "od-live-g", {"od-live": [0], "od-old": [0]})
        assert r.error_code == 0
        assert _codes(r) == {("od-live", 0): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC, ("od-old", 0): 0}
        assert _committed(b, "od-live-g", [("od-live", 0), ("od-old", 0)]) == {
            ("od-live", 0): 1, ("od-old", 0): -1001}
    finally:
        c.close()
