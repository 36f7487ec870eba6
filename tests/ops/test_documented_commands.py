"""The 0.8.2 documentation's quick start (1.3, steps 3-6) and operations chapter (6.1), command by
command, against a real ZooKeeper and three brokers started from the shipped 0.8.2
`server.properties` and its copies `server-1.properties` / `server-2.properties` edited as step 6
says (broker.id, port, log.dir). Every command is the documented one with `bin/kafka-*.sh` (or
`bin/kafka-run-class.sh kafka.tools.X`) replaced by `appliance <tool>`; where the document types
^C to end a console consumer, `--max-messages` ends it.

What a shared test machine needs and the document cannot know is given as overrides: free ports,
`host.name` 127.0.0.1, temporary log dirs, the test ZooKeeper's address, and
`zookeeper.session.timeout.ms=6000` (0.8.2's own default, where ours is 18000, so step 6's kill -9
is noticed as quickly as in the document). `delete.topic.enable=true` is set as section 6.1 tells
the reader to.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.broker_process import BrokerProcess
from tests.cluster.harness import kill_brokers, start_brokers, wait_for, wait_joined
from tests.cluster.zk import ZooKeeperServer
from tests.ops.procs import DATA, FileBroker, appliance, free_port

SHIPPED = DATA / "server-0.8.2.properties"
PARTITION_LINE = re.compile(r"Topic:\s*(\S+)\s+Partition:\s*(\d+)\s+Leader:\s*(-?\d+)\s+"
                            r"Replicas:\s*([\d,]*)\s+Isr:\s*([\d,]*)")


def _edited_copy(dest: Path, broker_id: int, port: int, log_dir: Path) -> Path:
    """Step 6: `cp config/server.properties config/server-N.properties` and set broker.id, port
    and log.dir."""
    text = SHIPPED.read_text()
    text = re.sub(r"(?m)^broker\.id=.*$", f"broker.id={broker_id}", text)
    text = re.sub(r"(?m)^port=.*$", f"port={port}", text)
    text = re.sub(r"(?m)^log\.dirs=.*$", f"log.dir={log_dir}", text)
    dest.write_text(text)
    return dest


class Cluster:
    """ZooKeeper and the three brokers of the quick start, and `appliance` run against them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.zk = ZooKeeperServer(root / "zk")
        self.brokers: dict[int, FileBroker] = {}
        for i in (0, 1, 2):
            port = free_port()
            work = root / f"broker{i}"
            work.mkdir()
            config = _edited_copy(root / ("server.properties" if i == 0 else f"server-{i}.properties"),
                                  i, port, work / "kafka-logs")
            self.brokers[i] = FileBroker(work, config, port, {
                "host.name": "127.0.0.1", "zookeeper.connect": self.zk.connect,
                "zookeeper.session.timeout.ms": "6000", "delete.topic.enable": "true",
                # our default replica.lag.time.max.ms (30 s, Kafka 2.5+) would keep a killed
                # broker in the ISR for longer than 0.8.2 (10 s)
                "replica.lag.time.max.ms": "10000"})

    @property
    def zookeeper(self) -> str:
        return self.zk.connect

    def run(self, *args: str, input: str | None = None, ok: bool = True, timeout: float = 90.0):
        r = appliance(*args, input=input, timeout=timeout)
        if ok:
            assert r.returncode == 0, f"appliance {' '.join(args)}:\n{r.stdout}\n{r.stderr}"
            assert "Traceback" not in r.stderr, r.stderr
        return r

    def describe(self, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
        """`topics --describe --zookeeper`: partition -> (leader, replicas, isr)."""
        out = self.run("topics", "--describe", "--zookeeper", self.zookeeper, "--topic", topic).stdout
        parts = {}
        for m in PARTITION_LINE.finditer(out):
            assert m.group(1) == topic, out
            parts[int(m.group(2))] = (int(m.group(3)), [int(x) for x in m.group(4).split(",") if x],
                                      [int(x) for x in m.group(5).split(",") if x])
        assert parts, out
        return parts

    def broker_list(self) -> str:
        return self.brokers[0].bootstrap


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("documented"))
    c.zk.start()
    try:
        start_brokers(c.brokers.values())
        wait_joined(c.brokers.values(), 3)
        yield c
    finally:
        kill_brokers(b for b in c.brokers.values() if b.proc is not None)
        c.zk.stop()


def _settled(c: Cluster, topic: str, isr_size: int) -> dict:
    """The topic's description once every partition has a leader and ``isr_size`` in sync."""
    def look():
        d = c.describe(topic)
        return d if all(leader >= 0 and len(isr) == isr_size for leader, _, isr in d.values()) else None
    return wait_for(look, 60, f"{topic} with leaders and ISRs of {isr_size}", step=0.5)


def test_quick_start_steps_3_to_6(cluster):
    c, zk = cluster, cluster.zookeeper
    # step 3
    c.run("topics", "--create", "--zookeeper", zk, "--replication-factor", "1", "--partitions", "1",
          "--topic", "test")
    assert "test" in c.run("topics", "--list", "--zookeeper", zk).stdout.split()
    # step 4
    c.run("console-producer", "--broker-list", c.broker_list(), "--topic", "test",
          input="This is a message\nThis is another message\n")
    # step 5
    r = c.run("console-consumer", "--zookeeper", zk, "--topic", "test", "--from-beginning",
              "--max-messages", "2")
    assert r.stdout.splitlines() == ["This is a message", "This is another message"]
    # step 6: the replicated topic
    c.run("topics", "--create", "--zookeeper", zk, "--replication-factor", "3", "--partitions", "1",
          "--topic", "my-replicated-topic")
    (leader, replicas, isr) = _settled(c, "my-replicated-topic", 3)[0]
    assert sorted(replicas) == [0, 1, 2] and leader == replicas[0]
    (_, test_replicas, _) = c.describe("test")[0]
    assert len(test_replicas) == 1
    c.run("console-producer", "--broker-list", c.broker_list(), "--topic", "my-replicated-topic",
          input="my test message 1\nmy test message 2\n")
    r = c.run("console-consumer", "--zookeeper", zk, "--from-beginning", "--topic", "my-replicated-topic",
              "--max-messages", "2")
    assert r.stdout.splitlines() == ["my test message 1", "my test message 2"]
    # kill -9 the leader: leadership moves to another replica, which the ISR no longer counts
    victim = c.brokers[leader]
    os.killpg(victim.proc.pid, signal.SIGKILL)
    victim.proc.wait(30)

    def moved():
        try:
            d = c.describe("my-replicated-topic")[0]
        except AssertionError:  # the tool asked the dead broker: asked again
            return None
        return d if d[0] not in (-1, leader) and leader not in d[2] else None
    new_leader, _, isr = wait_for(moved, 60, "a new leader without the killed broker", step=1.0)
    assert sorted(isr) == sorted(set(replicas) - {leader})
    r = c.run("console-consumer", "--zookeeper", zk, "--from-beginning", "--topic", "my-replicated-topic",
              "--max-messages", "2")
    assert r.stdout.splitlines() == ["my test message 1", "my test message 2"]
    # (not in the document) the killed broker comes back, for the chapters that follow
    victim.start()
    wait_joined(c.brokers.values(), 3)
    _settled(c, "my-replicated-topic", 3)


def test_operations_adding_modifying_and_removing_topics(cluster):
    c, zk = cluster, cluster.zookeeper
    c.run("topics", "--zookeeper", zk, "--create", "--topic", "my_topic_name", "--partitions", "20",
          "--replication-factor", "3", "--config", "max.message.bytes=64000", "--config", "flush.messages=1")
    d = _settled(c, "my_topic_name", 3)
    assert sorted(d) == list(range(20))
    # leaders spread over the three brokers, as Kafka's assignment does
    assert {leader for leader, _, _ in d.values()} == {0, 1, 2}
    c.run("topics", "--zookeeper", zk, "--alter", "--topic", "my_topic_name", "--partitions", "40")
    assert sorted(_settled(c, "my_topic_name", 3)) == list(range(40))
    c.run("topics", "--zookeeper", zk, "--alter", "--topic", "my_topic_name", "--config", "max.message.bytes=128000")
    out = c.run("topics", "--describe", "--zookeeper", zk, "--topic", "my_topic_name").stdout
    configs = out.split("Configs:")[1].splitlines()[0]
    assert "max.message.bytes=128000" in configs and "flush.messages=1" in configs, out
    c.run("topics", "--zookeeper", zk, "--alter", "--topic", "my_topic_name", "--deleteConfig", "max.message.bytes")
    out = c.run("topics", "--describe", "--zookeeper", zk, "--topic", "my_topic_name").stdout
    configs = out.split("Configs:")[1].splitlines()[0]
    assert "max.message.bytes" not in configs and "flush.messages=1" in configs, out
    c.run("topics", "--zookeeper", zk, "--delete", "--topic", "my_topic_name")
    wait_for(lambda: "my_topic_name" not in c.run("topics", "--list", "--zookeeper", zk).stdout.split(),
             60, "my_topic_name gone from the list", step=0.5)
    # a bad --zookeeper is one clear line, not a traceback or a hang
    r = c.run("topics", "--list", "--zookeeper", f"127.0.0.1:{free_port()}", "--timeout", "2", ok=False)
    assert r.returncode == 1 and "did not answer" in r.stderr and "Traceback" not in r.stderr


def _controller(zk: str) -> int:
    from kazoo.client import KazooClient

    client = KazooClient(hosts=zk, timeout=10)
    client.start(30)
    try:
        return json.loads(client.get("/controller")[0])["brokerid"]
    finally:
        client.stop()
        client.close()


def test_graceful_shutdown_and_balancing_leadership(cluster):
    c, zk = cluster, cluster.zookeeper
    c.run("topics", "--zookeeper", zk, "--create", "--topic", "balanced", "--partitions", "6",
          "--replication-factor", "3")
    before = _settled(c, "balanced", 3)
    assert all(leader == replicas[0] for leader, replicas, _ in before.values())
    # controlled.shutdown.enable=true (our default): a stopped broker hands its leaderships over
    # before it exits, so no partition is ever without a leader. Not the controller: a new
    # controller checks the leadership balance 5 s after it takes over (as Kafka's), and would
    # hand the stopped broker's leaderships back before the election below is asked for
    stopped_id = next(i for i in (1, 2, 0) if i != _controller(zk))
    stopped = c.brokers[stopped_id]
    stopped.stop()
    after = c.describe("balanced")
    assert all(leader not in (-1, stopped_id) for leader, _, _ in after.values()), after
    stopped.start()
    wait_joined(c.brokers.values(), 3)
    _settled(c, "balanced", 3)
    led_elsewhere = [p for p, (leader, replicas, _) in c.describe("balanced").items() if leader != replicas[0]]
    assert led_elsewhere  # the stopped broker came back as a follower everywhere
    r = c.run("preferred-replica-election", "--zookeeper", zk)
    assert "Successfully started preferred replica election" in r.stdout
    wait_for(lambda: all(leader == replicas[0] for leader, replicas, _ in c.describe("balanced").values()),
             60, "every partition led by its preferred replica", step=0.5)


def test_mirroring_from_two_source_clusters(cluster, tmp_path):
    c, zk = cluster, cluster.zookeeper
    c.run("topics", "--zookeeper", zk, "--create", "--topic", "my-topic", "--partitions", "2",
          "--replication-factor", "2")
    _settled(c, "my-topic", 2)
    (tmp_path / "src2").mkdir()
    (tmp_path / "dst").mkdir()
    with BrokerProcess(tmp_path / "src2") as src2, BrokerProcess(tmp_path / "dst") as dst:
        c.run("console-producer", "--broker-list", c.broker_list(), "--topic", "my-topic",
              input="".join(f"a{i}\n" for i in range(50)))
        c.run("console-producer", "--broker-list", src2.bootstrap, "--topic", "my-topic",
              input="".join(f"b{i}\n" for i in range(30)))
        c.run("console-producer", "--broker-list", src2.bootstrap, "--topic", "other-topic", input="x\n")
        # consumer-1: the 0.8 ZooKeeper consumer's config; consumer-2: a modern one
        (tmp_path / "consumer-1.properties").write_text(
            f"zookeeper.connect={zk}\ngroup.id=mirror-1\nzookeeper.connection.timeout.ms=6000\n"
            "auto.offset.reset=smallest\nrebalance.backoff.ms=2000\n")
        (tmp_path / "consumer-2.properties").write_text(f"bootstrap.servers={src2.bootstrap}\ngroup.id=mirror-2\n")
        (tmp_path / "producer.properties").write_text(
            f"metadata.broker.list={dst.bootstrap}\nproducer.type=sync\nserializer.class=kafka.serializer.DefaultEncoder\n")
        mm = subprocess.Popen(
            [sys.executable, "-m", "appliance.cli.main", "mirror-maker",
             "--consumer.config", str(tmp_path / "consumer-1.properties"),
             "--consumer.config", str(tmp_path / "consumer-2.properties"),
             "--producer.config", str(tmp_path / "producer.properties"), "--whitelist", "my-topic",
             "--offset.commit.interval.ms", "500"],
            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "mm.log", "wb"), start_new_session=True)
        try:
            def mirrored():
                r = appliance("console-consumer", "--bootstrap-server", dst.bootstrap, "--topic", "my-topic",
                              "--from-beginning", "--max-messages", "80", "--timeout-ms", "3000")
                lines = r.stdout.splitlines()
                return lines if len(lines) == 80 else None
            lines = wait_for(mirrored, 90, "80 records mirrored", step=1.0)
            assert sorted(lines) == sorted([f"a{i}" for i in range(50)] + [f"b{i}" for i in range(30)])
            topics = c.run("topics", "--list", "--bootstrap-server", dst.bootstrap).stdout.split()
            assert "other-topic" not in topics  # not whitelisted
        finally:
            os.killpg(mm.pid, signal.SIGTERM)
            mm.wait(30)
        log = (tmp_path / "mm.log").read_text()
        assert "Traceback" not in log, log
        assert "rebalance.backoff.ms" in log  # the ZooKeeper consumer's key, said to be ignored


def test_checking_consumer_position(cluster):
    c, zk = cluster, cluster.zookeeper
    c.run("topics", "--zookeeper", zk, "--create", "--topic", "checked", "--partitions", "2",
          "--replication-factor", "2")
    _settled(c, "checked", 2)
    c.run("console-producer", "--broker-list", c.broker_list(), "--topic", "checked",
          "--property", "parse.key=true", "--property", "key.separator=:",
          input="".join(f"k{i}:v{i}\n" for i in range(20)))
    r = c.run("console-consumer", "--zookeeper", zk, "--topic", "checked", "--from-beginning",
              "--group", "test", "--max-messages", "5")
    assert len(r.stdout.splitlines()) == 5
    r = c.run("consumer-offset-checker", "--zkconnect", zk, "--group", "test")
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["Group", "Topic", "Pid", "Offset", "logSize", "Lag", "Owner"]
    rows = [line.split() for line in lines[1:] if line.strip()]
    assert [row[:3] for row in rows] == [["test", "checked", "0"], ["test", "checked", "1"]]
    total_size = sum(int(row[4]) for row in rows)
    assert total_size == 20
    assert sum(int(row[3]) for row in rows) == 5
    assert all(int(row[5]) == int(row[4]) - int(row[3]) for row in rows)
    assert all(row[6] == "none" for row in rows)  # the console consumer has exited


def test_expanding_the_cluster_and_increasing_replication(cluster, tmp_path):
    c, zk = cluster, cluster.zookeeper
    for t in ("foo1", "foo2"):
        c.run("topics", "--zookeeper", zk, "--create", "--topic", t, "--partitions", "3",
              "--replication-factor", "2")
        _settled(c, t, 2)
    (tmp_path / "topics-to-move.json").write_text(
        '{"topics": [{"topic": "foo1"},\n{"topic": "foo2"}],\n"version":1\n}\n')
    r = c.run("reassign-partitions", "--zookeeper", zk, "--topics-to-move-json-file",
              str(tmp_path / "topics-to-move.json"), "--broker-list", "1,2", "--generate")
    proposed = r.stdout.split("Proposed partition reassignment configuration")[1]
    plan = json.loads(proposed)
    assert len(plan["partitions"]) == 6 and all(sorted(p["replicas"]) == [1, 2] for p in plan["partitions"])
    (tmp_path / "expand-cluster-reassignment.json").write_text(proposed)
    r = c.run("reassign-partitions", "--zookeeper", zk, "--reassignment-json-file",
              str(tmp_path / "expand-cluster-reassignment.json"), "--execute")
    assert "Successfully started reassignment of partitions" in r.stdout

    def verified():
        out = c.run("reassign-partitions", "--zookeeper", zk, "--reassignment-json-file",
                    str(tmp_path / "expand-cluster-reassignment.json"), "--verify", ok=False).stdout
        return out if out.count("completed successfully") == 6 else None
    wait_for(verified, 90, "the expansion verified", step=1.0)
    for t in ("foo1", "foo2"):
        assert all(sorted(replicas) == [1, 2] for _, replicas, _ in c.describe(t).values())
    # increasing the replication factor: foo's partition 0 from one replica to three
    c.run("topics", "--zookeeper", zk, "--create", "--topic", "foo", "--replica-assignment", "2")
    (tmp_path / "increase-replication-factor.json").write_text(
        '{"version":1,\n"partitions":[{"topic":"foo","partition":0,"replicas":[2,0,1]}]}\n')
    c.run("reassign-partitions", "--zookeeper", zk, "--reassignment-json-file",
          str(tmp_path / "increase-replication-factor.json"), "--execute")

    def increased():
        out = c.run("reassign-partitions", "--zookeeper", zk, "--reassignment-json-file",
                    str(tmp_path / "increase-replication-factor.json"), "--verify", ok=False).stdout
        return "completed successfully" in out
    wait_for(increased, 90, "foo's replication factor raised", step=1.0)
    leader, replicas, isr = _settled(c, "foo", 3)[0]
    assert replicas == [2, 0, 1] and sorted(isr) == [0, 1, 2]
    out = c.run("topics", "--zookeeper", zk, "--topic", "foo", "--describe").stdout
    assert re.search(r"PartitionCount:\s*1\s+ReplicationFactor:\s*3", out), out
