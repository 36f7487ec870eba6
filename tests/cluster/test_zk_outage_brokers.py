"""ZooKeeper down for 20 s under three real brokers: leaders keep serving acks=all produce and
fetch (nothing of the data path needs ZooKeeper), and once it is back the brokers' sessions
carry on (a topic created afterwards gets its leaders)."""

from __future__ import annotations

import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import BrokerProcess
from tests.cluster.harness import kill_brokers, start_brokers

SESSION_MS = 60000  # the server's maximum: the sessions outlive the outage and a slow JVM start
OUTAGE_S = 20


def _wait(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if pred():
                return
        except Exception:
            pass
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def _ready(admin: AdminClient, topic: str, n: int) -> bool:
    t = admin.list_topics(timeout=10).topics.get(topic)
    return t is not None and t.error is None and len(t.partitions) == n and \
        all(p.leader >= 0 and len(p.isrs) == 3 for p in t.partitions.values())


def test_leaders_serve_through_a_zookeeper_outage(private_zk, tmp_path):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP
    connect = private_zk.connect + "/outage"
    brokers = []
    try:
        for i in range(3):
            (tmp_path / f"b{i}").mkdir()
            brokers.append(BrokerProcess(tmp_path / f"b{i}", overrides={
                "zookeeper.connect": connect, "broker.id": str(i), "num.network.threads": "1",
                "zookeeper.session.timeout.ms": str(SESSION_MS)}))
        start_brokers(brokers)
        boot = ",".join(b.bootstrap for b in brokers)
        admin = AdminClient({"bootstrap.servers": boot})
        _wait(lambda: len(admin.list_topics(timeout=10).brokers) == 3, 60, "three brokers")
        admin.create_topics([NewTopic("during", 3, 3, config={"min.insync.replicas": "2"})])["during"].result(60)
        _wait(lambda: _ready(admin, "during", 3), 60, "leaders")
        # the controller's view says ISR 3 at once; an acks=all record per partition shows the
        # followers really replicate (their LeaderAndIsr may need a retry on a loaded machine)
        warm = Producer({"bootstrap.servers": boot, "acks": "all", "enable.idempotence": True})
        for q in range(3):
            warm.produce("during", value=b"warm", partition=q)
        assert warm.flush(90) == 0

        private_zk.kill()
        down_at = time.monotonic()
        p = Producer({"bootstrap.servers": boot, "acks": "all", "enable.idempotence": True})
        for i in range(300):
            p.produce("during", value=b"%04d" % i, partition=i % 3)
        assert p.flush(OUTAGE_S - 5) == 0
        c = KafkaConsumer(bootstrap_servers=boot, enable_auto_commit=False)
        tps = [KTP("during", q) for q in range(3)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        got = []
        while len(got) < 303 and time.monotonic() - down_at < OUTAGE_S:
            for msgs in c.poll(timeout_ms=500).values():
                got += [m.value for m in msgs]
        c.close()
        assert sorted(v for v in got if v != b"warm") == [b"%04d" % i for i in range(300)]
        assert time.monotonic() - down_at < OUTAGE_S, "the reads did not finish inside the outage"
        time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - down_at)))

        private_zk.start()
        admin.create_topics([NewTopic("after", 3, 3)])["after"].result(120)
        _wait(lambda: _ready(admin, "after", 3), 120, "leaders of a topic created after the outage")
        assert all(b.proc.poll() is None for b in brokers)
    finally:
        kill_brokers(brokers)
