"""Topic ids in cluster mode (KIP-516), two real brokers and a real ZooKeeper: the creator writes
the id into ``/brokers/topics/<t>`` (version 3, Kafka's format), a topic znode from before ids
gets one from the controller, every broker answers the same id in Metadata and keeps it in its
replicas' ``partition.metadata``, and confluent-kafka consumes through Fetch by topic id."""

from __future__ import annotations

import base64
import json
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from appliance.client.connection import BrokerConnection
from appliance.cluster import zk_paths as zp
from appliance.cluster.zk_session import ZkSettings, open_session
from appliance.storage.partition_metadata import parse_topic_id
from tests.broker_process import BrokerProcess
from tests.cluster.harness import cluster_metadata, kill_brokers, start_brokers, wait_for

pytestmark = pytest.mark.timeout(240)

METADATA, API_VERSIONS = 3, 18
N = 40


def _text(topic_id: bytes) -> str:
    return base64.urlsafe_b64encode(topic_id).decode().rstrip("=")


@pytest.fixture(scope="module")
def cluster(zk_server, tmp_path_factory):
    connect = f"{zk_server.connect}/i{uuid.uuid4().hex[:10]}"
    root = tmp_path_factory.mktemp("topic-ids")
    brokers: dict[int, BrokerProcess] = {}
    client = None
    try:
        for i in range(2):
            (root / f"b{i}").mkdir()
            brokers[i] = BrokerProcess(root / f"b{i}", overrides={
                "zookeeper.connect": connect, "broker.id": str(i), "num.network.threads": "1",
                "zookeeper.session.timeout.ms": "6000", "offsets.topic.num.partitions": "2",
                "group.initial.rebalance.delay.ms": "0"})  # the consumer's join: no 3 s wait
        start_brokers(brokers.values())
        boot = ",".join(b.bootstrap for b in brokers.values())
        wait_for(lambda: len(cluster_metadata(boot).brokers) == 2, 60, "two registered brokers")
        client = open_session(ZkSettings(connect, 30000, 30000))
        yield {"brokers": brokers, "boot": boot, "zk": client}
    finally:
        if client is not None:
            client.stop()
            client.close()
        kill_brokers(brokers.values())


def _znode(zk, topic: str) -> dict:
    data, _ = zk.get(zp.topic_path(topic))
    return json.loads(data)


def _ids_answered(brokers: dict[int, BrokerProcess], topic: str) -> set[bytes]:
    out = set()
    for b in brokers.values():
        with BrokerConnection("127.0.0.1", b.port) as c:
            md = c.request(METADATA, {"topics": [{"name": topic}],
                                      "allow_auto_topic_creation": False}, version=12)
            t = md.topics[0]
            out.add(t.topic_id if t.error_code == 0 and t.partitions else None)
    return out


def _files(brokers: dict[int, BrokerProcess], topic: str) -> set[str]:
    out = set()
    for b in brokers.values():
        for d in b.log_dirs:
            for part in Path(d).glob(f"{topic}-*"):
                f = part / "partition.metadata"
                out.add(f.read_text() if f.exists() else "")
    return out


def _agreed(cluster, topic: str) -> bytes:
    """The id every broker answers and keeps on disk, once they all agree with the znode."""
    def check():
        node = _znode(cluster["zk"], topic)
        if "topic_id" not in node:
            return None
        want = parse_topic_id(node["topic_id"])
        if _ids_answered(cluster["brokers"], topic) != {want}:
            return None
        if _files(cluster["brokers"], topic) != {f"version: 0\ntopic_id: {node['topic_id']}\n"}:
            return None
        return want
    return wait_for(check, 60, f"every broker to agree on {topic}'s id", step=0.3)


def test_created_topic_id_is_in_zookeeper_and_the_same_everywhere(cluster):
    topic = f"ids-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": cluster["boot"]})
    admin.create_topics([NewTopic(topic, 2, 2)])[topic].result(60)
    tid = _agreed(cluster, topic)
    node = _znode(cluster["zk"], topic)
    assert node["version"] == 3 and node["topic_id"] == _text(tid) and tid != bytes(16)
    # consumed through Fetch by topic id (librdkafka 2.16 takes v13+ when advertised)
    for b in cluster["brokers"].values():
        with BrokerConnection("127.0.0.1", b.port) as c:
            fetch = {e.api_key: e.max_version for e in c.request(API_VERSIONS, {}, version=2).api_keys}[1]
            assert fetch >= 13
    p = Producer({"bootstrap.servers": cluster["boot"], "acks": "all"})
    for i in range(N):
        p.produce(topic, value=b"v%d" % i, partition=i % 2)
    assert p.flush(60) == 0
    c = Consumer({"bootstrap.servers": cluster["boot"], "group.id": f"g-{topic}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    got = []
    try:
        while len(got) < N:
            m = c.poll(30)
            assert m is not None, f"only {len(got)} of {N}"
            assert m.error() is None, m.error()
            got.append(m.value())
        # committed and read back: librdkafka 2.16 reads offsets with OffsetFetch v8 (groups)
        c.commit(asynchronous=False)
        committed = c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=30)
        assert sorted((x.partition, x.offset) for x in committed) == [(0, N // 2), (1, N // 2)]
    finally:
        c.close()
    assert sorted(got) == sorted(b"v%d" % i for i in range(N))


def test_a_topic_from_before_ids_gets_one_from_the_controller(cluster):
    """A topic znode as Kafka 2.7 wrote it (version 2, no id): the controller gives it an id,
    writes it back, and both brokers answer and keep that one."""
    topic = f"old-{uuid.uuid4().hex[:6]}"
    zk = cluster["zk"]
    zk.create(zp.topic_config_path(topic), zp.encode_topic_config({}), makepath=True)
    zk.create(zp.topic_path(topic), json.dumps(
        {"version": 2, "partitions": {"0": [0, 1], "1": [1, 0]}}).encode(), makepath=True)
    tid = _agreed(cluster, topic)
    assert _znode(zk, topic)["version"] == 3 and tid != bytes(16)


def test_a_reassignment_keeps_the_topic_id(cluster):
    """The controller rewrites the topic znode at every reassignment step: the id stays."""
    topic = f"move-{uuid.uuid4().hex[:6]}"
    zk = cluster["zk"]
    admin = AdminClient({"bootstrap.servers": cluster["boot"]})
    admin.create_topics([NewTopic(topic, num_partitions=2, replica_assignment=[[0], [1]])])[topic].result(60)
    tid = _agreed(cluster, topic)
    zk.create(zp.REASSIGN_PARTITIONS, zp.encode_reassignment(
        {zp.TopicPartition(topic, 0): (1, 0), zp.TopicPartition(topic, 1): (0,)}), makepath=True)
    wait_for(lambda: zk.exists(zp.REASSIGN_PARTITIONS) is None, 90, "the reassignment to finish",
             step=0.3)
    node = _znode(zk, topic)
    assert node["partitions"] == {"0": [1, 0], "1": [0]}
    assert node["topic_id"] == _text(tid) and _agreed(cluster, topic) == tid


def test_find_coordinator_v4_and_describe_cluster_in_cluster_mode(cluster):
    """Batched FindCoordinator names the same coordinator as one key at a time, from either
    broker; DescribeCluster lists both brokers and the controller, the same everywhere."""
    groups = [f"g{i}-{uuid.uuid4().hex[:6]}" for i in range(4)]
    answers = []
    for b in cluster["brokers"].values():
        with BrokerConnection("127.0.0.1", b.port) as c:
            batched = wait_for(lambda c=c: (r := c.request(10, {"key_type": 0, "coordinator_keys": groups},
                                                           version=4))
                               and all(x.error_code == 0 for x in r.coordinators) and r,
                               60, "coordinators for every group", step=0.5)
            single = [c.request(10, {"key": g, "key_type": 0}, version=3) for g in groups]
            assert [x.key for x in batched.coordinators] == groups
            assert [(x.node_id, x.port) for x in batched.coordinators] == [
                (s.node_id, s.port) for s in single]
            answers.append([x.node_id for x in batched.coordinators])
            desc = c.request(60, {"include_cluster_authorized_operations": False,
                                  "endpoint_type": 1}, version=1)
            assert desc.error_code == 0 and desc.cluster_id == "appliance-cluster"
            assert sorted((x.broker_id, x.port) for x in desc.brokers) == sorted(
                (i, p.port) for i, p in cluster["brokers"].items())
            assert desc.controller_id in cluster["brokers"]
    assert answers[0] == answers[1]
