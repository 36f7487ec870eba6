"""The cluster health metrics operators page on tell the truth (issue 43), on three real brokers
and a real ZooKeeper: ActiveControllerCount is 1 on the controller only; with one broker
SIGKILLed, the leaders' UnderReplicatedPartitions add up to what Metadata shows with a short
ISR, and their UnderMinIsrPartitionCount counts the partitions of the topic whose
min.insync.replicas (3) that ISR no longer meets; the leaders' ISR shrink counters move when it
goes and the expand counters when it returns."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import free_port
from tests.cluster.harness import cluster_broker, kill_brokers, start_brokers, wait_for, wait_joined
from tests.metrics.scrape import scrape, value, wait_for_endpoint

TOPICS = {"cm-rf3": 3, "cm-rf2": 2, "cm-rf1": 1, "cm-min3": 3}  # name -> replication factor
MIN_ISR = {"cm-min3": "3"}  # name -> min.insync.replicas (others: the default, 1)
PARTITIONS = 4


@pytest.fixture(scope="module")
def cluster(zk_server, tmp_path_factory):
    connect = f"{zk_server.connect}/m{uuid.uuid4().hex[:10]}"
    root = tmp_path_factory.mktemp("cluster-metrics")
    brokers = {}
    for i in (1, 2, 3):
        mport = free_port()
        b = cluster_broker(root / f"b{i}", connect, i, overrides={
            "metrics.listener": f"http://127.0.0.1:{mport}/metrics",
            "replica.lag.time.max.ms": "2000", "auto.leader.rebalance.enable": "false"})
        b.metrics_port = mport
        brokers[i] = b
    try:
        start_brokers(brokers.values())
        wait_joined(brokers.values(), 3)
        for b in brokers.values():
            wait_for_endpoint(b.metrics_port)
        boot = ",".join(b.bootstrap for b in brokers.values())
        admin = AdminClient({"bootstrap.servers": boot})
        for name, rf in TOPICS.items():
            config = {"min.insync.replicas": MIN_ISR[name]} if name in MIN_ISR else {}
            admin.create_topics([NewTopic(name, PARTITIONS, rf, config=config)])[name].result(60)
        yield brokers, boot
    finally:
        kill_brokers(brokers.values())


def _gauge(b, name: str) -> float:
    return value(scrape(b.metrics_port), name)


def _short_isr(boot: str) -> int | None:
    """Partitions whose ISR is smaller than their replicas, as Metadata tells a client (None
    while no broker answered, or the one that did does not list every topic: asked again)."""
    try:
        md = AdminClient({"bootstrap.servers": boot}).list_topics(timeout=10)
    except KafkaException:  # it asked the stopped broker: asked again
        return None
    if any(md.topics.get(name) is None or md.topics[name].error is not None for name in TOPICS):
        return None
    return sum(1 for name in TOPICS for p in md.topics[name].partitions.values()
               if len(p.isrs) < len(p.replicas))


def _controller(b) -> int:
    return int(_gauge(b, "kafka_controller_kafkacontroller_activecontrollercount"))


def test_only_the_controller_counts_itself_active(cluster):
    brokers, _ = cluster
    counts = wait_for(lambda: (c := {i: _controller(b) for i, b in brokers.items()})
                      and sum(c.values()) == 1 and c, 30, "one active controller")
    assert sorted(counts.values()) == [0, 0, 1]


def test_under_replicated_and_isr_changes_follow_a_stopped_broker(cluster):
    brokers, boot = cluster
    name = "kafka_server_replicamanager_underreplicatedpartitions"
    assert wait_for(lambda: _short_isr(boot) == 0 and all(_gauge(b, name) == 0 for b in brokers.values()),
                    60, "every ISR full") is True
    assert all(_gauge(b, "kafka_server_replicamanager_underminisrpartitioncount") == 0 for b in brokers.values())

    victim = next(i for i, b in brokers.items() if _controller(b) == 0)
    live = {i: b for i, b in brokers.items() if i != victim}

    def counter(which: str) -> float:  # the ISR changes the live brokers' leaders made
        return sum(_gauge(b, f"kafka_server_replicamanager_{which}_total") for b in live.values())

    shrinks, expands = counter("isrshrinks"), counter("isrexpands")
    # SIGKILL: its followers stop fetching and the leaders shrink their ISRs themselves after
    # replica.lag.time.max.ms, before its session expires (a controlled shutdown's ISR changes
    # are the controller's, which Kafka's leaders do not count either)
    brokers[victim].kill()
    # RF 2 and RF 3 partitions with a replica on the stopped broker lose it from their ISR;
    # RF 1 partitions it led go offline instead (not under-replicated: no one else has them)
    short = wait_for(lambda: (n := _short_isr(boot)) and n, 60, "ISRs to shrink")

    def leaders_agree() -> bool:
        reported = sum(_gauge(b, name) for b in live.values())
        return reported == _short_isr(boot)

    assert wait_for(lambda: leaders_agree() or None, 5 + 10, "the leaders' count to match Metadata")
    assert short > 0
    assert wait_for(lambda: counter("isrshrinks") > shrinks or None, 15, "the leaders' ISR shrinks counted")
    assert sum(_controller(b) for b in live.values()) == 1  # the controller was not stopped
    # every cm-min3 partition had a replica on the stopped broker: its ISR of 2 is below its
    # min.insync.replicas of 3 wherever it is led now; the other topics' minimum is 1
    under_min = "kafka_server_replicamanager_underminisrpartitioncount"
    assert wait_for(lambda: sum(_gauge(b, under_min) for b in live.values()) == PARTITIONS or None, 15,
                    "the leaders' under-min-ISR count")

    brokers[victim].start()
    assert wait_for(lambda: _short_isr(boot) == 0 or None, 90, "every ISR full again")
    assert wait_for(lambda: all(_gauge(b, name) == 0 for b in brokers.values()) or None, 15,
                    "no under-replicated partition reported")
    assert all(_gauge(b, under_min) == 0 for b in brokers.values())
    assert counter("isrexpands") > expands
