"""The replica fetcher's keys with real processes: two brokers with num.replica.fetchers=3 and
replica.socket.receive.buffer.bytes set; an RF 2 topic of 8 partitions reaches both, each
follower holds one connection per fetcher its partitions hash to (Kafka's spread), and those
sockets carry the receive buffer (ss shows the kernel's doubled value)."""

from __future__ import annotations

import re
import subprocess
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from appliance.cluster.fetcher import fetcher_id
from appliance.cluster.zk_paths import TopicPartition
from tests.cluster.harness import (
    cluster_broker,
    kill_brokers,
    log_bytes,
    start_brokers,
    wait_for,
    wait_joined,
)

TOPIC = "spread"
PARTITIONS = 8
FETCHERS = 3
RCVBUF = 70_000


@pytest.fixture(scope="module")
def pair(zk_server, tmp_path_factory):
    connect = f"{zk_server.connect}/r{uuid.uuid4().hex[:10]}"
    root = tmp_path_factory.mktemp("fetchers")
    brokers = {i: cluster_broker(root / f"b{i}", connect, i, overrides={
        "num.replica.fetchers": str(FETCHERS), "replica.socket.receive.buffer.bytes": str(RCVBUF),
        "replica.socket.timeout.ms": "10000", "replica.fetch.min.bytes": "1",
        "offsets.topic.num.partitions": "1"}) for i in (1, 2)}
    try:
        start_brokers(brokers.values())
        wait_joined(brokers.values(), 2)
        yield brokers
    finally:
        kill_brokers(brokers.values())


def _leaders(boot: str) -> dict[int, int] | None:
    t = AdminClient({"bootstrap.servers": boot}).list_topics(TOPIC, timeout=10).topics.get(TOPIC)
    if t is None or t.error is not None or len(t.partitions) < PARTITIONS:
        return None
    leaders = {p: t.partitions[p].leader for p in range(PARTITIONS)}
    return leaders if all(b in (1, 2) for b in leaders.values()) else None


def _fetcher_sockets(pid: int, port: int) -> list[int]:
    """The receive buffer (ss's rb) of each established socket of process ``pid`` to ``port``."""
    out = subprocess.run(["ss", "-tmnpO", "state", "established", f"dport = :{port}"],
                         capture_output=True, text=True, check=True).stdout
    return [int(m.group(1)) for line in out.splitlines() if f"pid={pid}," in line
            for m in [re.search(r"\brb(\d+)", line)] if m]


def test_partitions_spread_over_fetcher_connections_with_their_receive_buffer(pair):
    boot = ",".join(b.bootstrap for b in pair.values())
    admin = AdminClient({"bootstrap.servers": boot})  # held: a collected client cancels its futures
    admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=2)])[TOPIC].result(60)
    producer = Producer({"bootstrap.servers": boot, "acks": "all"})
    for p in range(PARTITIONS):
        for n in range(20):
            producer.produce(TOPIC, value=b"%d-%d" % (p, n), partition=p)
    assert producer.flush(60) == 0
    leaders = wait_for(lambda: _leaders(boot), 30, "the leaders")
    for p, leader in leaders.items():  # every partition replicated byte for byte
        follower = 3 - leader
        want = log_bytes(pair[leader], TOPIC, p)
        assert want
        wait_for(lambda p=p, f=follower, w=want: log_bytes(pair[f], TOPIC, p) == w, 60,
                 f"partition {p} on broker {follower}")
    for follower, b in pair.items():
        leader = 3 - follower
        led = [p for p, lb in leaders.items() if lb == leader]
        # __consumer_offsets (1 partition) may be led by the other broker too
        expected = {fetcher_id(TopicPartition(TOPIC, p), FETCHERS) for p in led}
        (cluster_pid,) = b.worker_pids("cluster worker")
        port = pair[leader].port

        def settled(pid: int = cluster_pid, port: int = port, least: int = len(expected)) -> list[int] | None:
            socks = [rb for rb in _fetcher_sockets(pid, port) if rb == 2 * RCVBUF]
            return socks if len(socks) >= least else None

        socks = wait_for(settled, 20, f"broker {follower}'s fetcher connections")
        # one per fetcher id in use (the offsets partition may add one more), none above three
        assert len(expected) <= len(socks) <= FETCHERS, (expected, socks)
