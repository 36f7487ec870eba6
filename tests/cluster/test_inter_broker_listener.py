"""Two real brokers, each with an EXTERNAL and an INTERNAL PLAINTEXT listener and
inter.broker.listener.name=INTERNAL; EXTERNAL comes first, so it is also the registration's
legacy host and port. Both endpoints are registered in ZooKeeper with their protocols, an RF 2
topic written through EXTERNAL with acks=all reaches the follower, and the follower's cluster
worker (replica fetcher, controller channel) talks to the leader on INTERNAL only. A client
asking any broker on either listener (Metadata, FindCoordinator, DescribeCluster) is given every
broker at its address on that same listener, as Kafka answers."""

from __future__ import annotations

import json
import uuid

import psutil
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from tests.broker.wire import RawConnection, metadata_body
from tests.broker_process import free_port
from tests.cluster.harness import (
    cluster_broker,
    kill_brokers,
    log_bytes,
    start_brokers,
    wait_for,
    wait_joined,
)

TOPIC = "inter-broker-listener"
METADATA, FIND_COORDINATOR, DESCRIBE_CLUSTER = 3, 10, 60


@pytest.fixture(scope="module")
def pair(zk_server, tmp_path_factory):
    connect = f"{zk_server.connect}/r{uuid.uuid4().hex[:10]}"
    root = tmp_path_factory.mktemp("listeners")
    ports = {i: (free_port(), free_port()) for i in (1, 2)}  # (EXTERNAL, INTERNAL)
    brokers = {i: cluster_broker(root / f"b{i}", connect, i, port=ext, overrides={
        "listeners": f"EXTERNAL://127.0.0.1:{ext},INTERNAL://127.0.0.1:{internal}",
        "listener.security.protocol.map": "EXTERNAL:PLAINTEXT,INTERNAL:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL", "min.insync.replicas": "2",
        "offsets.topic.num.partitions": "1"})
        for i, (ext, internal) in ports.items()}
    try:
        start_brokers(brokers.values())
        wait_joined(brokers.values(), 2)
        yield connect, brokers, ports
    finally:
        kill_brokers(brokers.values())


def test_every_listener_is_registered_with_its_protocol(pair):
    connect, _, ports = pair
    zk = KazooClient(hosts=connect)
    zk.start()
    try:
        for i, (ext, internal) in ports.items():
            reg = json.loads(zk.get(f"/brokers/ids/{i}")[0])
            assert reg["endpoints"] == [f"EXTERNAL://127.0.0.1:{ext}", f"INTERNAL://127.0.0.1:{internal}"]
            assert reg["listener_security_protocol_map"] == {"EXTERNAL": "PLAINTEXT", "INTERNAL": "PLAINTEXT"}
            assert (reg["host"], reg["port"]) == ("127.0.0.1", ext)
    finally:
        zk.stop()
        zk.close()


def test_replication_runs_over_the_inter_broker_listener(pair):
    _, brokers, ports = pair
    boot = ",".join(f"127.0.0.1:{ext}" for ext, _ in ports.values())
    admin = AdminClient({"bootstrap.servers": boot})
    admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=2)])[TOPIC].result(60)
    producer = Producer({"bootstrap.servers": boot, "acks": "all", "enable.idempotence": True})
    failures: list = []
    for n in range(200):
        producer.produce(TOPIC, value=b"%d" % n,
                         on_delivery=lambda err, msg: failures.append(err) if err else None)
    assert producer.flush(60) == 0 and failures == []  # acks=all with min.insync.replicas=2

    leader = wait_for(lambda: _leader(boot), 30, "a leader")
    follower = 2 if leader == 1 else 1
    want = log_bytes(brokers[leader], TOPIC, 0)
    assert want  # 200 records
    wait_for(lambda: log_bytes(brokers[follower], TOPIC, 0) == want, 60, "the follower's copy")

    # the follower's cluster worker holds its replica fetcher's connection to the leader's
    # INTERNAL port, and no connection to any EXTERNAL port (the legacy host and port)
    ext_ports = {ext for ext, _ in ports.values()}
    leader_internal = ports[leader][1]
    (cluster_pid,) = brokers[follower].worker_pids("cluster worker")

    def remote_ports() -> set[int]:
        return {c.raddr.port for c in psutil.Process(cluster_pid).net_connections("inet")
                if c.raddr and c.status == psutil.CONN_ESTABLISHED}

    assert leader_internal in wait_for(lambda: remote_ports() or None, 10, "fetcher connection")
    assert not remote_ports() & ext_ports


def _leader(boot: str) -> int | None:
    md = AdminClient({"bootstrap.servers": boot}).list_topics(TOPIC, timeout=10)
    t = md.topics.get(TOPIC)
    if t is None or t.error is not None or 0 not in t.partitions:
        return None
    leader = t.partitions[0].leader
    return leader if leader in (1, 2) else None


def test_each_listener_is_answered_with_every_brokers_address_on_it(pair):
    _, _, ports = pair
    for ext, internal in ports.values():  # through either broker
        for which, port in ((0, ext), (1, internal)):
            want = {b: ("127.0.0.1", p[which]) for b, p in ports.items()}

            def metadata(port: int = port) -> dict | None:
                with RawConnection(port) as c:
                    md = c.request(METADATA, 9, metadata_body([]))
                got = {b.node_id: (b.host, b.port) for b in md.brokers}
                return got if len(got) == 2 else None

            assert wait_for(metadata, 30, "both brokers in Metadata") == want

            def coordinator(port: int = port) -> tuple | None:
                with RawConnection(port) as c:
                    r = c.request(FIND_COORDINATOR, 2, {"key": "g", "key_type": 0})
                return None if r.error_code else (r.node_id, r.host, r.port)

            node, host, cport = wait_for(coordinator, 60, "a coordinator")
            assert (host, cport) == want[node]
            with RawConnection(port) as c:
                cluster = c.request(DESCRIBE_CLUSTER, 0, {"include_cluster_authorized_operations": False})
            assert {b.broker_id: (b.host, b.port) for b in cluster.brokers} == want
