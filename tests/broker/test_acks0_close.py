"""An acks=0 produce that the broker refuses closes the connection (the 0.8.2 walk-through's
KafkaApis: the producer hears of the failure only that way); one it accepts does not. Raw
frames, as a 0.8.2 producer (Produce v0, a magic 0 message set) and a current one (v7) send them."""

from __future__ import annotations

import pytest

from appliance.client import AdminClient, NewTopic
from appliance.protocol.messages import Metadata, Produce
from appliance.records import Compression
from appliance.records.batch import build_batch
from appliance.records.legacy import build_message_set
from tests.broker.wire import RawConnection, produce_body


def _records(version: int) -> bytes:
    if version < 3:
        return build_message_set([(b"k", b"v")], magic=0, compression=Compression.NONE)
    return build_batch([(b"k", b"v")])


@pytest.fixture(scope="module")
def topic(module_broker):
    with AdminClient(module_broker.bootstrap) as a:
        a.create_topics([NewTopic("acks0-topic", 2)])
    return "acks0-topic"


@pytest.mark.parametrize("version", [0, 7])
@pytest.mark.parametrize("where", ["no-such-topic", "no-such-partition"])
def test_refused_acks_0_produce_closes_the_connection(module_broker, topic, version, where):
    name, partition = ("acks0-missing", 0) if where == "no-such-topic" else (topic, 5)
    with RawConnection(module_broker.port) as c:
        # an answered request first: it must still be answered before the close
        assert c.request(Metadata.API_KEY, 1, {"topics": [{"name": topic}]}).topics[0].name == topic
        assert c.request(Produce.API_KEY, version, produce_body(name, partition, _records(version), acks=0)) is None
        assert c.closed_by_peer(10)


@pytest.mark.parametrize("version", [0, 7])
def test_accepted_acks_0_produce_keeps_the_connection(module_broker, topic, version):
    with RawConnection(module_broker.port) as c:
        assert c.request(Produce.API_KEY, version, produce_body(topic, 1, _records(version), acks=0)) is None
        # the connection still answers, and the record was written
        body = c.request(Produce.API_KEY, version, produce_body(topic, 1, _records(version), acks=1))
        resp = body.responses[0].partition_responses[0]
        assert resp.error_code == 0 and resp.base_offset >= 1


def test_good_partitions_of_a_refused_request_are_still_written(module_broker, topic):
    body = produce_body(topic, 0, _records(7), acks=0)
    body["topic_data"][0]["partition_data"].append({"index": 9, "records": _records(7)})
    with RawConnection(module_broker.port) as c:
        c.request(Produce.API_KEY, 7, body)
        assert c.closed_by_peer(10)
    with RawConnection(module_broker.port) as c:
        resp = c.request(Produce.API_KEY, 7, produce_body(topic, 0, _records(7), acks=1))
        assert resp.responses[0].partition_responses[0].base_offset == 1  # offset 0: the acks=0 record


@pytest.mark.parametrize("version", [0, 7])
def test_acks_0_produce_the_disk_worker_refuses_closes_the_connection(module_broker, topic, version):
    """A failure only the disk worker finds (a corrupt CRC) closes the connection too: the disk
    worker answers an acks=0 produce only when it fails."""
    records = bytearray(_records(version))
    records[-1] ^= 0xFF  # the value's last byte: the CRC no longer matches
    with RawConnection(module_broker.port) as c:
        assert c.request(Metadata.API_KEY, 1, {"topics": [{"name": topic}]}).topics[0].name == topic
        assert c.request(Produce.API_KEY, version, produce_body(topic, 0, bytes(records), acks=0)) is None
        assert c.closed_by_peer(10)
    # and a good acks=0 produce after it still leaves its connection open
    with RawConnection(module_broker.port) as c:
        assert c.request(Produce.API_KEY, version, produce_body(topic, 0, _records(version), acks=0)) is None
        assert not c.closed_by_peer(1)
