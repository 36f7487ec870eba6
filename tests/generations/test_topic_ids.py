"""Topic ids (KIP-516) and the newer versions built on them, against a real broker.

A topic's id is made at creation, kept in ``partition.metadata`` in each partition dir (Kafka's
format) and in the shared table; it survives restarts, a topic from before ids gets one that
is written back, and a topic deleted and created again gets a new one. Fetch v13+ names topics
by id (an unknown or zero id gets UNKNOWN_TOPIC_ID), DeleteTopics v6 deletes by id, ListOffsets
v7 finds the record with the largest timestamp, FindCoordinator v4 and OffsetFetch v8 batch,
DescribeProducers shows an idempotent producer's state and DescribeCluster the broker.
"""

from __future__ import annotations

import base64
import struct
import time
import uuid
from pathlib import Path

import pytest

from appliance.client.connection import BrokerConnection
from appliance.errors import ErrorCode
from appliance.protocol.messages import Fetch
from tests.broker.wire import RawConnection, request_frame
from tests.broker_process import BrokerProcess

pytestmark = pytest.mark.timeout(180)

FETCH, LIST_OFFSETS, METADATA, OFFSET_FETCH, FIND_COORDINATOR = 1, 2, 3, 9, 10
CREATE_TOPICS, DELETE_TOPICS, DESCRIBE_CLUSTER, DESCRIBE_PRODUCERS = 19, 20, 60, 61
ZERO = bytes(16)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("topic-ids"), num_log_dirs=2) as b:
        yield b


def _create(c: BrokerConnection, topic: str, partitions: int = 1) -> bytes:
    made = c.request(CREATE_TOPICS, {"topics": [{"name": topic, "num_partitions": partitions,
                                                 "replication_factor": 1}]}, version=7).topics[0]
    assert made.error_code == 0, made
    return made.topic_id


def _metadata_id(c: BrokerConnection, topic: str) -> bytes:
    md = c.request(METADATA, {"topics": [{"name": topic}], "allow_auto_topic_creation": False},
                   version=12)
    assert md.topics[0].error_code == 0
    return md.topics[0].topic_id


def _files(b: BrokerProcess, topic: str) -> dict[str, str]:
    out = {}
    for d in b.log_dirs:
        for part in Path(d).glob(f"{topic}-*"):
            out[part.name] = (part / "partition.metadata").read_text()
    return out


def _kafka_text(topic_id: bytes) -> str:
    return base64.urlsafe_b64encode(topic_id).decode().rstrip("=")


def _fetch_body(topic_id: bytes, partitions: list[int], offset: int = 0) -> dict:
    return {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic_id": topic_id, "partitions": [
                {"partition": p, "fetch_offset": offset, "partition_max_bytes": 1 << 20}
                for p in partitions]}],
            "forgotten_topics_data": [], "rack_id": ""}


def _produce(bootstrap: str, topic: str, values: list[tuple[bytes, int | None]], **conf) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 200, **conf})
    for v, ts in values:
        if ts is None:
            p.produce(topic, value=v, partition=0)
        else:
            p.produce(topic, value=v, partition=0, timestamp=ts)
    assert p.flush(30) == 0


def test_ids_are_made_once_kept_on_disk_and_survive_restarts(tmp_path):
    b = BrokerProcess(tmp_path, num_log_dirs=2)
    try:
        b.start()
        with BrokerConnection("127.0.0.1", b.port) as c:
            tid = _create(c, "kept", partitions=4)
            assert tid != ZERO and _metadata_id(c, "kept") == tid
            other = _create(c, "other")
            assert other not in (ZERO, tid)
        files = _files(b, "kept")
        assert len(files) == 4
        assert sum(1 for d in b.log_dirs if list(Path(d).glob("kept-*"))) == 2  # both dirs
        assert set(files.values()) == {f"version: 0\ntopic_id: {_kafka_text(tid)}\n"}
        b.stop()
        b.start()
        with BrokerConnection("127.0.0.1", b.port) as c:
            assert _metadata_id(c, "kept") == tid and _metadata_id(c, "other") == other
        # a topic from before topic ids: it gets one at load, the same for every partition
        # (over both dirs), written back, and kept at the next restart
        b.stop()
        for d in b.log_dirs:
            for f in Path(d).glob("kept-*/partition.metadata"):
                f.unlink()
        b.start()
        with BrokerConnection("127.0.0.1", b.port) as c:
            legacy = _metadata_id(c, "kept")
        assert legacy not in (ZERO, tid)
        assert set(_files(b, "kept").values()) == {f"version: 0\ntopic_id: {_kafka_text(legacy)}\n"}
        b.stop()
        b.start()
        with BrokerConnection("127.0.0.1", b.port) as c:
            assert _metadata_id(c, "kept") == legacy
            # CreatePartitions: the new partitions carry the topic's id
            assert c.request(37, {"topics": [{"name": "kept", "count": 6, "assignments": None}],
                                  "timeout_ms": 30000, "validate_only": False},
                             version=3).results[0].error_code == 0
        assert set(_files(b, "kept").values()) == {f"version: 0\ntopic_id: {_kafka_text(legacy)}\n"}
        assert len(_files(b, "kept")) == 6
    finally:
        b.stop()
        b.kill()


def test_fetch_by_topic_id(broker):
    topic = f"fid-{uuid.uuid4().hex[:6]}"
    with BrokerConnection("127.0.0.1", broker.port) as c:
        tid = _create(c, topic, partitions=2)
        _produce(broker.bootstrap, topic, [(b"v%d" % i, None) for i in range(5)])
        for version in (13, 14, 15):
            r = c.request(FETCH, _fetch_body(tid, [0, 1, 7]), version=version)
            [t] = r.responses
            assert t.topic_id == tid
            p0, p1, p7 = t.partitions
            assert (p0.error_code, p0.high_watermark) == (0, 5) and len(p0.records) > 0
            assert (p1.error_code, p1.high_watermark, len(p1.records)) == (0, 0, 0)
            assert p7.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        # unknown ids, the zero UUID included: UNKNOWN_TOPIC_ID for every partition asked
        for bad in (ZERO, uuid.uuid4().bytes):
            r = c.request(FETCH, _fetch_body(bad, [0, 1]), version=13)
            [t] = r.responses
            assert t.topic_id == bad
            assert [p.error_code for p in t.partitions] == [ErrorCode.UNKNOWN_TOPIC_ID] * 2
        # Metadata v12 by id alone: answered under the topic's name
        md = c.request(METADATA, {"topics": [{"topic_id": tid, "name": None},
                                             {"topic_id": uuid.uuid4().bytes, "name": None}],
                                  "allow_auto_topic_creation": False}, version=12)
        assert [(t.name, t.error_code) for t in md.topics] == [(topic, 0), (None, 100)]
        # deleted and created again: a new id; the old one is unknown from then on
        r = c.request(DELETE_TOPICS, {"topics": [{"name": None, "topic_id": tid}],
                                      "timeout_ms": 30000}, version=6)
        assert [(x.name, x.topic_id, x.error_code) for x in r.responses] == [(topic, tid, 0)]
        again = _create(c, topic)
        assert again not in (ZERO, tid)
        r = c.request(FETCH, _fetch_body(tid, [0]), version=13)
        assert r.responses[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID
        r = c.request(FETCH, _fetch_body(again, [0]), version=13)
        assert r.responses[0].partitions[0].error_code == 0


def test_delete_topics_v6_bad_input(broker):
    topic = f"del-{uuid.uuid4().hex[:6]}"
    with BrokerConnection("127.0.0.1", broker.port) as c:
        tid = _create(c, topic)
        r = c.request(DELETE_TOPICS, {"topics": [
            {"name": topic, "topic_id": tid},            # both: refused
            {"name": None, "topic_id": uuid.uuid4().bytes},  # an id no topic has
            {"name": None, "topic_id": ZERO},
            {"name": "no-such-topic", "topic_id": ZERO},
        ], "timeout_ms": 30000}, version=6)
        assert [x.error_code for x in r.responses] == [
            ErrorCode.INVALID_REQUEST, ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.UNKNOWN_TOPIC_ID,
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
        assert _metadata_id(c, topic) == tid  # still there
        r = c.request(DELETE_TOPICS, {"topics": [{"name": topic, "topic_id": ZERO}],
                                      "timeout_ms": 30000}, version=6)
        assert [(x.name, x.topic_id, x.error_code) for x in r.responses] == [(topic, tid, 0)]


@pytest.mark.parametrize("cut", [4, 9, 20])
def test_truncated_fetch_v13_closes_and_the_broker_carries_on(broker, cut):
    """A Fetch v13 frame cut inside its body (mid topic id, mid partition): the connection is
    closed, as for any request that cannot be decoded; the broker answers the next one."""
    frame = request_frame(FETCH, 13, _fetch_body(uuid.uuid4().bytes, [0]), client_id="raw-test")
    header = 4 + 2 + 2 + 4 + 2 + len("raw-test") + 1  # size, key, version, corr, client id, tags
    body_end = header + 8 + 4 + 4 + 4 + 1 + 4 + 4 + 1 + cut  # into the topics array
    cut_frame = struct.pack(">i", body_end - 4) + frame[4:body_end]
    with RawConnection(broker.port) as c:
        c.send_raw(cut_frame)
        assert c.closed_by_peer()
    with BrokerConnection("127.0.0.1", broker.port) as c:
        assert c.request(DESCRIBE_CLUSTER, {"include_cluster_authorized_operations": False},
                         version=0).error_code == 0


def test_list_offsets_max_timestamp(broker):
    topic = f"maxts-{uuid.uuid4().hex[:6]}"
    with BrokerConnection("127.0.0.1", broker.port) as c:
        _create(c, topic)

        def ask(ts: int, version: int) -> tuple[int, int, int]:
            r = c.request(LIST_OFFSETS, {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": topic, "partitions": [{"partition_index": 0, "timestamp": ts}]}]},
                version=version)
            p = r.topics[0].partitions[0]
            return p.error_code, p.offset, p.timestamp

        assert ask(-3, 7) == (0, -1, -1)  # empty: no record
        # one batch (1000, 5000, 3000), then another (5000, 2000): the first 5000 wins
        _produce(broker.bootstrap, topic, [(b"a", 1000), (b"b", 5000), (b"c", 3000)])
        _produce(broker.bootstrap, topic, [(b"d", 5000), (b"e", 2000)])
        assert ask(-3, 7) == (0, 1, 5000)
        assert ask(-3, 8) == (0, 1, 5000)
        _produce(broker.bootstrap, topic, [(b"f", 9000), (b"g", 100)])
        assert ask(-3, 7) == (0, 5, 9000)
        assert ask(-4, 8)[:2] == (0, 0)  # the local log start: the log start, no tiered storage
        assert ask(-3, 6)[0] == ErrorCode.INVALID_REQUEST  # too old a version to ask it
        assert ask(-4, 7)[0] == ErrorCode.INVALID_REQUEST
        assert ask(-1, 7)[:2] == (0, 7) and ask(-2, 7)[:2] == (0, 0)


def test_find_coordinator_v4_and_offset_fetch_v8(broker):
    from confluent_kafka import Consumer, TopicPartition

    topic = f"grp-{uuid.uuid4().hex[:6]}"
    groups = [f"g{i}-{uuid.uuid4().hex[:6]}" for i in range(3)]
    with BrokerConnection("127.0.0.1", broker.port) as c:
        _create(c, topic, partitions=2)
        r = c.request(FIND_COORDINATOR, {"key_type": 0, "coordinator_keys": [*groups, ""]}, version=4)
        assert [x.key for x in r.coordinators] == [*groups, ""]
        assert [x.error_code for x in r.coordinators] == [0, 0, 0, ErrorCode.INVALID_GROUP_ID]
        assert all((x.node_id, x.port) == (0, broker.port) for x in r.coordinators[:3])
        r = c.request(FIND_COORDINATOR, {"key_type": 1, "coordinator_keys": ["txn"]}, version=4)
        # the transaction coordinator: this broker (the topic created by the first lookup)
        assert (r.coordinators[0].error_code, r.coordinators[0].port) == (0, broker.port)
    for i, g in enumerate(groups[:2]):  # the third never commits
        cons = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": g})
        try:
            cons.commit(offsets=[TopicPartition(topic, 0, 10 + i), TopicPartition(topic, 1, 20 + i)],
                        asynchronous=False)
        finally:
            cons.close()
    with BrokerConnection("127.0.0.1", broker.port) as c:
        r = c.request(OFFSET_FETCH, {"groups": [
            {"group_id": groups[0], "topics": [{"name": topic, "partition_indexes": [0, 1]}]},
            {"group_id": groups[1], "topics": None},
            {"group_id": groups[2], "topics": [{"name": topic, "partition_indexes": [0]}]},
        ], "require_stable": True}, version=8)
        got = {g.group_id: (g.error_code, {(t.name, p.partition_index): p.committed_offset
                                           for t in g.topics for p in t.partitions})
               for g in r.groups}
    assert got == {groups[0]: (0, {(topic, 0): 10, (topic, 1): 20}),
                   groups[1]: (0, {(topic, 0): 11, (topic, 1): 21}),
                   groups[2]: (0, {(topic, 0): -1})}


def test_describe_producers(broker):
    topic = f"prod-{uuid.uuid4().hex[:6]}"
    with BrokerConnection("127.0.0.1", broker.port) as c:
        _create(c, topic)
        before = int(time.time() * 1000)
        _produce(broker.bootstrap, topic, [(b"v%d" % i, None) for i in range(7)],
                 **{"enable.idempotence": True})
        after = int(time.time() * 1000)
        r = c.request(DESCRIBE_PRODUCERS, {"topics": [
            {"name": topic, "partition_indexes": [0, 3]},
            {"name": "no-such-topic", "partition_indexes": [0]}]}, version=0)
    [p0, p3], [missing] = r.topics[0].partitions, r.topics[1].partitions
    assert p0.error_code == 0
    [st] = p0.active_producers
    assert st.producer_id >= 0 and st.producer_epoch == 0 and st.last_sequence == 6
    assert before - 1000 <= st.last_timestamp <= after + 1000
    assert (st.coordinator_epoch, st.current_txn_start_offset) == (-1, -1)
    assert p3.error_code == missing.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_describe_cluster_through_confluent_kafka(broker):
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    desc = admin.describe_cluster(request_timeout=30).result(30)
    assert desc.cluster_id == "appliance-0"
    assert desc.controller is not None and desc.controller.id == 0
    assert [(n.id, n.host, n.port) for n in desc.nodes] == [(0, "127.0.0.1", broker.port)]
    with BrokerConnection("127.0.0.1", broker.port) as c:
        r = c.request(DESCRIBE_CLUSTER, {"include_cluster_authorized_operations": False,
                                         "endpoint_type": 2}, version=1)
        assert r.error_code == ErrorCode.UNSUPPORTED_ENDPOINT_TYPE and r.brokers == []


def test_fetch_v15_replica_state_encodes_as_kafka():
    """Fetch v15 (KIP-903): the replica id is the tagged ReplicaState (tag 1), not a field; v13
    names topics by their 16-byte id. Bytes written down from FetchRequest.json."""
    tid = bytes(range(16))
    body = _fetch_body(tid, [0])
    body["replica_state"] = {"replica_id": 3, "replica_epoch": 9}
    got = Fetch.encode_request(15, body)
    want = (struct.pack(">iiiBii", 0, 1, 1 << 20, 0, 0, -1)  # max wait, min/max bytes, iso, session
            + b"\x02" + tid                                    # 1 topic, its id
            + b"\x02" + struct.pack(">iiqiqi", 0, -1, 0, -1, -1, 1 << 20) + b"\x00"  # 1 partition
            + b"\x00"                                          # topic tags
            + b"\x01"                                          # no forgotten topics
            + b"\x01"                                          # rack id ""
            + b"\x01" + b"\x01" + b"\x0d" + struct.pack(">iq", 3, 9) + b"\x00")  # tag 1, 13 bytes
    assert got == want
    back = Fetch.decode_request(15, got)
    assert (back.replica_state.replica_id, back.topics[0].topic_id) == (3, tid)
