"""Racks on a real cluster: six brokers in three racks (two each), ZooKeeper, replica.selector.class
set to Kafka's RackAwareReplicaSelector.

- KIP-36: every partition's replicas span the racks (RF 3: all three; RF 2: two), in topic
  creation, partition addition and reassign-partitions --generate.
- KIP-392: a confluent-kafka consumer with client.rack set to a rack the leader is not in reads
  everything from the in-sync follower in its rack (that broker's bytes-out metric grows by what
  it read; the leader's own consumer bytes do not), never past the high watermark.
- Kafka's rule for a broker without a rack joining: CreateTopics is refused with Kafka's message;
  `topics --create --disable-rack-aware` and auto-created topics place replicas anyway."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from tests.broker_process import free_port
from tests.cluster.harness import cluster_broker, kill_brokers, start_brokers, wait_for, wait_joined
from tests.metrics.scrape import scrape, value, wait_for_endpoint
from tests.ops.procs import appliance

RACK = {i: f"rack-{(i - 1) // 2}" for i in range(1, 7)}  # 1,2: rack-0; 3,4: rack-1; 5,6: rack-2
SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


@pytest.fixture(scope="module")
def racks(zk_server, tmp_path_factory):
    connect = f"{zk_server.connect}/r{uuid.uuid4().hex[:10]}"
    root = tmp_path_factory.mktemp("racks")
    brokers = {}
    for i, rack in RACK.items():
        mport = free_port()
        b = cluster_broker(root / f"b{i}", connect, i, overrides={
            "broker.rack": rack, "replica.selector.class": SELECTOR,
            "metrics.listener": f"http://127.0.0.1:{mport}/metrics",
            "offsets.topic.replication.factor": "3", "offsets.topic.num.partitions": "3",
            "auto.leader.rebalance.enable": "false"})
        b.metrics_port = mport
        brokers[i] = b
    try:
        start_brokers(brokers.values())
        wait_joined(brokers.values(), 6)
        yield brokers, connect, root
    finally:
        kill_brokers(b for b in brokers.values() if b.proc is not None)


def _boot(brokers) -> str:
    return ",".join(b.bootstrap for b in brokers.values())


def _assignment(boot: str, topic: str) -> dict[int, list[int]]:
    md = AdminClient({"bootstrap.servers": boot}).list_topics(topic, timeout=10)
    return {p: list(pm.replicas) for p, pm in md.topics[topic].partitions.items()}


def test_every_partitions_replicas_span_the_racks(racks):
    brokers, connect, root = racks
    boot = _boot(brokers)
    admin = AdminClient({"bootstrap.servers": boot})
    admin.create_topics([NewTopic("spread3", 12, 3), NewTopic("spread2", 6, 2)])["spread3"].result(60)
    wait_for(lambda: len(_assignment(boot, "spread2")) == 6, 30, "spread2 created")
    admin.create_partitions([NewPartitions("spread3", 18)])["spread3"].result(60)
    wait_for(lambda: len(_assignment(boot, "spread3")) == 18, 30, "the added partitions")
    for topic, rf in (("spread3", 3), ("spread2", 2)):
        for p, replicas in _assignment(boot, topic).items():
            assert len(replicas) == rf and len({RACK[r] for r in replicas}) == rf, (topic, p, replicas)
    moving = root / "move.json"
    moving.write_text(json.dumps({"version": 1, "topics": [{"topic": "spread3"}]}))
    r = appliance("reassign-partitions", "--zookeeper", connect, "--generate", "--topics-to-move-json-file",
                  str(moving), "--broker-list", "1,2,3,4,5,6")
    assert r.returncode == 0, r.stderr
    proposed = json.loads(r.stdout.strip().splitlines()[-1])["partitions"]
    assert len(proposed) == 18
    assert all(len({RACK[b] for b in p["replicas"]}) == 3 for p in proposed)


def _bytes_out(b, topic: str) -> float:
    return value(scrape(b.metrics_port), "kafka_server_brokertopicmetrics_bytesout_total", topic=topic)


def _rack_topic(brokers, topic: str, values: list[bytes]) -> tuple[int, int]:
    """A one-partition RF 3 topic holding ``values``, every replica in the ISR; (its leader, an
    in-sync follower in another rack)."""
    boot = _boot(brokers)
    admin = AdminClient({"bootstrap.servers": boot})  # kept alive while its future is awaited
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(60)
    md = admin.list_topics(topic, timeout=10).topics[topic].partitions[0]
    leader, replicas = md.leader, list(md.replicas)
    p = Producer({"bootstrap.servers": boot, "acks": "all", "linger.ms": 5})
    for v in values:
        p.produce(topic, v, partition=0)
    assert p.flush(60) == 0
    for b in brokers.values():
        wait_for_endpoint(b.metrics_port)
    # the follower's copy complete and in the ISR before the reader comes
    wait_for(lambda: sorted(AdminClient({"bootstrap.servers": boot}).list_topics(topic, timeout=10)
                            .topics[topic].partitions[0].isrs) == sorted(replicas), 30, "a full ISR")
    return leader, next(r for r in replicas if RACK[r] != RACK[leader])


def test_a_consumer_reads_from_the_follower_in_its_rack(racks):
    brokers, _, _ = racks
    boot = _boot(brokers)
    values = [f"near-{n}".encode() * 10 for n in range(2000)]
    leader, near = _rack_topic(brokers, "near", values)
    before = {i: _bytes_out(b, "near") for i, b in brokers.items()}
    c = Consumer({"bootstrap.servers": boot, "group.id": f"g-{uuid.uuid4().hex}", "client.rack": RACK[near],
                  "enable.auto.commit": False, "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100})
    c.assign([TopicPartition("near", 0, 0)])
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < len(values) and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append((m.offset(), m.value()))
        _, high = c.get_watermark_offsets(TopicPartition("near", 0), timeout=10)
    finally:
        c.close()
    assert [v for _, v in got] == values and [o for o, _ in got] == list(range(len(values)))
    assert all(o < high for o, _ in got)  # nothing past the high watermark
    after = {i: _bytes_out(b, "near") for i, b in brokers.items()}
    size = sum(len(v) for v in values)
    assert after[near] - before[near] >= size, (near, before, after)  # served by the near follower
    assert after[leader] - before[leader] < size  # not by the leader (it sends followers nothing new)


def test_the_spark_sources_remote_read_goes_to_its_racks_replica(racks):
    """The Spark source's read of a partition it has no local replica of (spark/remote_reader.py,
    as a task runs it) with the ``kafka.client.rack`` option: the leader names the in-sync
    follower in that rack, which serves the whole range; the rows are the leader's."""
    from spark.broker_catalog import BrokerView
    from spark.remote_reader import fetch_range

    brokers, _, _ = racks
    boot = _boot(brokers)
    values = [f"spark-{n}".encode() * 10 for n in range(3000)]
    leader, near = _rack_topic(brokers, "near-spark", values)
    before = {i: _bytes_out(b, "near-spark") for i, b in brokers.items()}
    view = BrokerView(boot, 30000)
    try:
        batches = list(fetch_range(view, "near-spark", 0, 0, len(values), chunk_bytes=16384,
                                   rack=RACK[near]))
    finally:
        view.close()
    rows = [(o, v) for rb in batches
            for o, v in zip(rb.column("offset").to_pylist(), rb.column("value").to_pylist(), strict=True)]
    assert rows == list(enumerate(values))
    after = {i: _bytes_out(b, "near-spark") for i, b in brokers.items()}
    size = sum(len(v) for v in values)
    assert after[near] - before[near] >= size, (near, before, after)  # several fetches, all to the follower
    assert after[leader] - before[leader] < size


def test_a_broker_without_a_rack_follows_kafkas_rule(racks):
    brokers, connect, root = racks
    seventh = cluster_broker(root / "b7", connect, 7, overrides={"offsets.topic.replication.factor": "3"})
    try:
        seventh.start()
        everyone = {**brokers, 7: seventh}
        wait_joined(everyone.values(), 7)
        boot = _boot(everyone)
        admin = AdminClient({"bootstrap.servers": boot})
        with pytest.raises(KafkaException, match="Not all brokers have rack information"):
            admin.create_topics([NewTopic("mixed", 3, 2)])["mixed"].result(60)
        r = appliance("topics", "--bootstrap-server", seventh.bootstrap, "--create", "--topic", "mixed",
                      "--partitions", "7", "--replication-factor", "2", "--disable-rack-aware")
        assert r.returncode == 0, r.stderr
        assert len(_assignment(boot, "mixed")) == 7
        # a topic the broker creates itself (auto-creation) ignores the racks, as Kafka's Safe mode
        p = Producer({"bootstrap.servers": boot})
        p.produce("auto-made", b"x")
        assert p.flush(30) == 0
        assert _assignment(boot, "auto-made")
    finally:
        seventh.kill()
