"""The cluster's operator tools against a real cluster (one ZooKeeper, three `appliance serve`
brokers, shared by the module): `appliance reassign-partitions` while an acks=all idempotent
confluent-kafka producer runs, AlterPartitionReassignments / ListPartitionReassignments with kafka-python
and `reassign-partitions --cancel`, a move under `--throttle`, `appliance leader-election` (preferred and unclean, through
ElectLeaders), the old tools' /admin/preferred_replica_election, and last the controller's
automatic preferred-leader rebalance (the brokers restarted with a short check interval).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from appliance.cluster.zk_paths import TopicPartition
from appliance.cluster.zk_session import ZkSettings, open_session
from appliance.cluster.zk_store import ZkStore
from tests.broker_process import BrokerProcess
from tests.cluster.harness import kill_brokers, start_brokers, wait_for, wait_joined

_wait = functools.partial(wait_for, step=0.2)  # Metadata polls: 5 a second is plenty

SESSION_MS = 6000


def _overrides(connect: str, broker_id: int, **extra: str) -> dict[str, str]:
    return {"zookeeper.connect": connect, "broker.id": str(broker_id),
            "zookeeper.session.timeout.ms": str(SESSION_MS), "num.network.threads": "1",
            "replica.lag.time.max.ms": "10000", "auto.leader.rebalance.enable": "false", **extra}


def _partitions(boot: str, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """partition -> (leader, replicas, isr) as Metadata says; {} while unknown."""
    try:
        md = AdminClient({"bootstrap.servers": boot}).list_topics(topic, timeout=10)
    except Exception:  # a broker still joining closes the connection: ask again
        return {}
    t = md.topics.get(topic)
    if t is None or t.error is not None:
        return {}
    return {p.id: (p.leader, list(p.replicas), list(p.isrs)) for p in t.partitions.values()}


def _cluster_md(boot: str):
    """Metadata of the cluster, or None while a broker still joining closes the connection."""
    try:
        return AdminClient({"bootstrap.servers": boot}).list_topics(timeout=10)
    except Exception:
        return None


def _controller(boot: str) -> int:
    return _wait(lambda: _cluster_md(boot), 60, "metadata").controller_id


def _tool(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "appliance.cli.main", *args], capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def cluster(zk_server, tmp_path_factory):
    connect = f"{zk_server.connect}/a{uuid.uuid4().hex[:10]}"
    root = tmp_path_factory.mktemp("admin")
    brokers: dict[int, BrokerProcess] = {}
    client = None
    try:
        for i in range(3):
            (root / f"b{i}").mkdir()
            brokers[i] = BrokerProcess(root / f"b{i}", overrides=_overrides(connect, i))
        start_brokers(brokers.values())
        boot = ",".join(b.bootstrap for b in brokers.values())
        _wait(lambda: (md := _cluster_md(boot)) and len(md.brokers) == 3, 60, "three registered brokers")
        client = open_session(ZkSettings(connect, 30000, 30000))
        yield {"connect": connect, "brokers": brokers, "boot": boot, "store": ZkStore(client), "root": root}
    finally:
        if client is not None:
            client.stop()
            client.close()
        kill_brokers(brokers.values())


def _create(boot: str, topic: str, assignment: list[list[int]]) -> None:
    admin = AdminClient({"bootstrap.servers": boot})
    admin.create_topics([NewTopic(topic, num_partitions=len(assignment), replica_assignment=assignment)])[topic].result(60)
    _create_wait(boot, topic, len(assignment))


def _create_wait(boot: str, topic: str, partitions: int) -> None:
    _wait(lambda: (ps := _partitions(boot, topic)) and len(ps) == partitions
          and all(leader >= 0 and len(isr) == len(rs) for leader, rs, isr in ps.values()),
          60, f"leaders and full ISRs of {topic}")


def _restart(b: BrokerProcess) -> None:
    """A graceful stop (controlled shutdown moves its leadership away) and a start."""
    assert b.stop(60) == 0, b.log()
    b.start()
    wait_joined([b], 3)  # joined and told who is live: the tests go on asking any broker


def _write(tmp: Path, name: str, obj) -> str:
    path = tmp / name
    path.write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return str(path)


def test_reassign_partitions_online_while_producing(cluster, tmp_path):
    boot, store, connect = cluster["boot"], cluster["store"], cluster["connect"]
    topic = "moves"
    _create(boot, topic, [[0, 1, 2], [1], [0, 1]])

    acked: list[tuple[int, int, bytes]] = []
    errors: list[str] = []
    stop = threading.Event()

    def on_delivery(err, msg):
        if err is None:
            acked.append((msg.partition(), msg.offset(), msg.value()))
        else:
            errors.append(str(err))

    def produce():
        p = Producer({"bootstrap.servers": boot, "acks": "all", "enable.idempotence": True,
                      "linger.ms": 5, "message.timeout.ms": 120000})
        i = 0
        while not stop.is_set():
            p.produce(topic, value=b"%d-%08d" % (i % 3, i), partition=i % 3, on_delivery=on_delivery)
            i += 1
            p.poll(0)
            if i % 20 == 0:
                time.sleep(0.01)
        assert p.flush(150) == 0

    t = threading.Thread(target=produce)
    t.start()
    try:
        _wait(lambda: len(acked) > 300, 60, "acknowledged records before the move")
        # --generate proposes; --execute starts [0,1,2] -> [2,1,0], RF 1 -> 3, {0,1} -> {1,2}
        gen = _tool("reassign-partitions", "--zookeeper", connect, "--generate", "--broker-list", "0,1,2",
                    "--topics-to-move-json-file", _write(tmp_path, "move.json", {"version": 1, "topics": [{"topic": topic}]}))
        assert gen.returncode == 0, gen.stderr
        assert "Proposed partition reassignment configuration" in gen.stdout
        proposed = json.loads(gen.stdout.strip().splitlines()[-1])
        assert sorted(p["partition"] for p in proposed["partitions"]) == [0, 1, 2]

        plan = _write(tmp_path, "plan.json", {"version": 1, "partitions": [
            {"topic": topic, "partition": 0, "replicas": [2, 1, 0]},
            {"topic": topic, "partition": 1, "replicas": [1, 2, 0]},
            {"topic": topic, "partition": 2, "replicas": [1, 2]}]})
        # through --bootstrap-server: the broker tells the tool its zookeeper.connect
        ex = _tool("reassign-partitions", "--bootstrap-server", boot.split(",")[0], "--execute",
                   "--reassignment-json-file", plan)
        assert ex.returncode == 0, ex.stderr
        assert "Successfully started reassignment of partitions." in ex.stdout
        assert '"replicas":[1]' in ex.stdout  # the rollback file: the current assignment

        def verified():
            v = _tool("reassign-partitions", "--zookeeper", connect, "--verify", "--reassignment-json-file", plan)
            assert v.returncode == 0, v.stdout + v.stderr
            return v.stdout.count("completed successfully") == 3 and v.stdout
        out = _wait(verified, 120, "--verify to report completion", step=1.0)
        assert "Reassignment of partition moves-1 completed successfully" in out
        before = len(acked)
        _wait(lambda: len(acked) > before + 200, 60, "the producer to carry on after the move")
    finally:
        stop.set()
        t.join(200)
    assert not errors, errors[:5]

    try:
        ps = _wait(lambda: (ps := _partitions(boot, topic)) and ps[0][0] == 2 and len(ps[1][2]) == 3 and ps,
                   120, "the new leaders and ISRs in Metadata")
    except AssertionError:
        raise AssertionError(f"metadata {_partitions(boot, topic)}, ZooKeeper "
                             f"{store.partition_states([TopicPartition(topic, p) for p in range(3)])}, "
                             f"{store.assignment(topic)}") from None
    assert ps[0][1] == [2, 1, 0] and ps[0][0] == 2  # the new preferred replica leads
    assert ps[1][1] == [1, 2, 0] and sorted(ps[1][2]) == [0, 1, 2]
    assert ps[2][1] == [1, 2] and ps[2][0] in (1, 2) and sorted(ps[2][2]) == [1, 2]
    assert store.reassignment() == {}
    # broker 0 stopped and deleted its replica of moves-2
    gone = Path(cluster["brokers"][0].log_dirs[0]) / f"{topic}-2"
    _wait(lambda: not gone.exists(), 60, f"{gone} to be deleted")
    assert (Path(cluster["brokers"][2].log_dirs[0]) / f"{topic}-1").is_dir()

    # every acknowledged record exactly once, in order per partition
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTp
    ends = {p: 1 + max(o for q, o, _ in acked if q == p) for p in range(3)}
    c = KafkaConsumer(bootstrap_servers=boot, enable_auto_commit=False)
    tps = [KTp(topic, p) for p in range(3)]
    c.assign(tps)
    c.seek_to_beginning(*tps)
    got: dict[int, list[bytes]] = {p: [] for p in range(3)}
    deadline = time.monotonic() + 120
    while any(len(got[p]) < ends[p] for p in got) and time.monotonic() < deadline:
        for tp, msgs in c.poll(timeout_ms=1000).items():
            got[tp.partition] += [m.value for m in msgs]
    c.close()
    for p in range(3):
        mine = [v for q, _, v in sorted(acked) if q == p]
        assert len(got[p]) == len(set(got[p])), f"partition {p} has duplicates"
        assert got[p] == sorted(got[p]), f"partition {p} out of order"
        assert set(mine) <= set(got[p]), f"partition {p} lost {len(set(mine) - set(got[p]))} records"


@pytest.mark.parametrize("plan,message", [
    ({"version": 1, "partitions": [{"topic": "moves", "partition": 0, "replicas": [0, 7]}]},
     "The proposed assignment contains non-existent brokerIDs: 7"),
    ({"version": 1, "partitions": [{"topic": "moves", "partition": 9, "replicas": [0]},
                                   {"topic": "nope", "partition": 0, "replicas": [1]}]},
     "The proposed assignment contains non-existent partitions: moves-9, nope-0"),
    ({"version": 1, "partitions": [{"topic": "moves", "partition": 0, "replicas": []}]},
     "Partition replica list cannot be empty"),
    ({"version": 1, "partitions": [{"topic": "moves", "partition": 0, "replicas": [1, 1]}]},
     "Partition replica lists may not contain duplicate entries: moves-0 contains multiple entries for 1"),
    ('{"version":1,"partitions":[{"topic":"moves","partition":0,"replicas":[1]},'
     '{"topic":"moves","partition":0,"replicas":[2]}]}',
     "Partition reassignment contains duplicate topic partitions: moves-0"),
    ("{", "reassignment file is not valid JSON"),
])
def test_reassign_bad_input_refused_nothing_written(cluster, tmp_path, plan, message):
    r = _tool("reassign-partitions", "--zookeeper", cluster["connect"], "--execute",
              "--reassignment-json-file", _write(tmp_path, "bad.json", plan))
    assert r.returncode != 0
    assert message in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert cluster["store"].reassignment() == {}


def test_reassignment_api_with_kafka_python_and_cancel(cluster, tmp_path):
    """AlterPartitionReassignments / ListPartitionReassignments through kafka-python's admin
    client; bad input over the wire; a reassignment held in progress (the new replica's disk
    worker SIGSTOPped, well under the supervisor's 30 s) is listed, reported by --verify,
    blocks a second --execute, and `--cancel` puts the partition back: the new copy is
    deleted and every acknowledged record is still there."""
    import signal

    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTp
    from kafka import errors as kerr
    from kafka.admin import KafkaAdminClient

    from appliance.cli.controller_request import call
    from appliance.errors import ErrorCode

    boot, brokers = cluster["boot"], cluster["brokers"]
    topic, tp = "undo", KTp("undo", 0)
    controller = _controller(boot)
    home, newcomer = [i for i in range(3) if i != controller]
    _create(boot, topic, [[home]])
    p = Producer({"bootstrap.servers": boot, "acks": "all", "enable.idempotence": True})
    for i in range(200):
        p.produce(topic, b"r%04d" % i, partition=0)
    assert p.flush(60) == 0

    admin = KafkaAdminClient(bootstrap_servers=boot, request_timeout_ms=30000)
    try:
        assert admin.list_partition_reassignments() == {}
        got = admin.alter_partition_reassignments({KTp(topic, 5): [home], tp: [newcomer, newcomer]})
        assert got == {KTp(topic, 5): kerr.UnknownTopicOrPartitionError,
                       tp: kerr.InvalidReplicationAssignmentError}
        assert admin.alter_partition_reassignments({tp: [home, 9]}) == {tp: kerr.InvalidReplicationAssignmentError}
        assert admin.alter_partition_reassignments({tp: None}) == {tp: kerr.NoReassignmentInProgressError}
        # an empty list (kafka-python refuses to send one) and a broker that is not the controller
        body = {"timeout_ms": 10000, "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "replicas": []}]}]}
        ctl, other = brokers[controller].bootstrap.split(":"), brokers[home].bootstrap.split(":")
        empty = call(ctl[0], int(ctl[1]), 45, 0, body, 30)
        assert empty.error_code == 0
        assert empty.responses[0].partitions[0].error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
        assert call(other[0], int(other[1]), 45, 0, body, 30).error_code == ErrorCode.NOT_CONTROLLER
        assert call(other[0], int(other[1]), 46, 0, {"timeout_ms": 1000, "topics": None}, 30).error_code \
            == ErrorCode.NOT_CONTROLLER
        assert _partitions(boot, topic)[0][1] == [home]  # none of that changed anything

        disks = brokers[newcomer].worker_pids("disk worker")
        assert disks
        plan = _write(tmp_path, "undo.json", {"version": 1, "partitions": [
            {"topic": topic, "partition": 0, "replicas": [home, newcomer]}]})
        for pid in disks:
            os.kill(pid, signal.SIGSTOP)
        try:
            assert admin.alter_partition_reassignments({tp: [home, newcomer]}) == {tp: None}
            assert admin.list_partition_reassignments() == {
                tp: {"replicas": [home, newcomer], "adding_replicas": [newcomer], "removing_replicas": []}}
            assert admin.list_partition_reassignments([KTp(topic, 3)]) == {}
            v = _tool("reassign-partitions", "--zookeeper", cluster["connect"], "--verify",
                      "--reassignment-json-file", plan)
            assert v.returncode == 0 and f"Reassignment of partition {topic}-0 is still in progress" in v.stdout, \
                v.stdout + v.stderr
            again = _tool("reassign-partitions", "--zookeeper", cluster["connect"], "--execute",
                          "--reassignment-json-file", plan)
            assert again.returncode == 1 and "Cannot execute because there is an existing partition assignment" \
                in again.stderr, again.stderr
            cancel = _tool("reassign-partitions", "--bootstrap-server", boot, "--cancel",
                           "--reassignment-json-file", plan)
            assert cancel.returncode == 0, cancel.stdout + cancel.stderr
            assert f"Successfully cancelled partition reassignment(s) for: {topic}-0" in cancel.stdout
            assert admin.list_partition_reassignments() == {}
        finally:
            for pid in disks:
                os.kill(pid, signal.SIGCONT)
        twice = _tool("reassign-partitions", "--bootstrap-server", boot, "--cancel", "--reassignment-json-file", plan)
        assert twice.returncode == 0 and f"No reassignment was in progress for: {topic}-0" in twice.stdout
    finally:
        admin.close()
    _wait(lambda: (ps := _partitions(boot, topic)) and ps[0] == (home, [home], [home]), 60,
          "the original replica alone again in Metadata")
    assert cluster["store"].assignment(topic).partitions == {0: (home,)}
    gone = Path(brokers[newcomer].log_dirs[0]) / f"{topic}-0"
    _wait(lambda: not gone.exists(), 60, f"the cancelled copy {gone} to be deleted")
    c = KafkaConsumer(bootstrap_servers=boot, enable_auto_commit=False)
    c.assign([tp])
    c.seek_to_beginning(tp)
    got_values: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got_values) < 200 and time.monotonic() < deadline:
        for msgs in c.poll(timeout_ms=1000).values():
            got_values += [m.value for m in msgs]
    c.close()
    assert got_values == [b"r%04d" % i for i in range(200)]


def _one_replica_to_move(boot: str, topic: str, n: int) -> tuple[int, int]:
    """A one-replica topic on a broker that is not the controller, holding ``n`` 1000-byte
    records; returns (its broker, the other non-controller broker, where a move takes it)."""
    controller = _controller(boot)
    home, newcomer = [i for i in range(3) if i != controller]
    _create(boot, topic, [[home]])
    p = Producer({"bootstrap.servers": boot, "acks": "all", "linger.ms": 5})
    for i in range(n):
        p.produce(topic, (b"%06d" % i) * 166 + b"....", partition=0)  # 1000 bytes
    assert p.flush(60) == 0
    return home, newcomer


def test_throttled_reassignment_is_capped_and_verify_removes_the_throttle(cluster, tmp_path):
    """--throttle 200000 B/s on a move that copies ~2 MB to a new replica: Kafka's configs are
    written, the copy takes well over what it takes unthrottled, --verify reports completion
    and removes the throttle, and the new replica has every byte."""
    from appliance.cluster import replication_throttle as rt
    from appliance.cluster.reassignment import COMPLETE, verify

    boot, brokers, store = cluster["boot"], cluster["brokers"], cluster["store"]
    topic, rate, n = "slow", 200_000, 2000
    home, newcomer = _one_replica_to_move(boot, topic, n)
    plan = _write(tmp_path, "slow.json", {"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [home, newcomer]}]})
    ex = _tool("reassign-partitions", "--zookeeper", cluster["connect"], "--execute",
               "--reassignment-json-file", plan, "--throttle", str(rate))
    assert ex.returncode == 0, ex.stdout + ex.stderr
    started = time.monotonic()
    assert f"The inter-broker throttle limit was set to {rate} B/s" in ex.stdout
    assert store.broker_config(newcomer)[rt.FOLLOWER_RATE] == str(rate)
    assert store.broker_config(home)[rt.LEADER_RATE] == str(rate)
    cfg = store.topic_config(topic)
    assert cfg[rt.FOLLOWER_REPLICAS] == f"0:{newcomer}" and cfg[rt.LEADER_REPLICAS] == f"0:{home}"
    # the copy itself: the new replica's segment growing to the leader's size (unthrottled,
    # 0.2 s here; at 200 kB/s ~2.1 MB take ~10 s, of which the first second is a burst and
    # the tool's own start-up overlaps the first seconds, so a third of it is the bar)
    seg = Path(brokers[newcomer].log_dirs[0]) / f"{topic}-0" / "00000000000000000000.log"
    size = (Path(brokers[home].log_dirs[0]) / f"{topic}-0" / "00000000000000000000.log").stat().st_size
    _wait(lambda: seg.exists() and seg.stat().st_size >= size, 120, "the new replica's copy", step=0.2)
    took = time.monotonic() - started
    assert took > size / rate / 3, f"the throttled copy of {size} bytes took only {took:.1f} s"
    tp = TopicPartition(topic, 0)
    _wait(lambda: verify(store, {tp: (home, newcomer)}) == {tp: COMPLETE}, 60, "the move to complete", step=0.5)
    v = _tool("reassign-partitions", "--zookeeper", cluster["connect"], "--verify", "--reassignment-json-file", plan)
    assert v.returncode == 0 and "completed successfully" in v.stdout and "Throttle was removed." in v.stdout, v.stdout
    assert rt.FOLLOWER_RATE not in store.broker_config(newcomer) and rt.LEADER_RATE not in store.broker_config(home)
    assert not rt.REPLICATION_KEYS & set(store.topic_config(topic))
    # the new replica has everything: it leads once the original stops
    ps = _wait(lambda: (ps := _partitions(boot, topic)) and sorted(ps[0][2]) == sorted([home, newcomer]) and ps,
               60, "both replicas in the ISR")
    assert ps[0][1] == [home, newcomer]
    assert seg.stat().st_size == size > n * 1000


def test_leader_side_throttle_holds_back_only_followers_out_of_the_isr(cluster, tmp_path):
    """Only the leader's side is set (Kafka's leader.replication.throttled.rate on the leader's
    broker, the topic's leader.replication.throttled.replicas naming it): a move that copies
    ~1.2 MB to a new replica takes well over its unthrottled 0.2 s, and once the new replica is
    in the ISR a far lower rate does not slow acks=all (in-sync followers are never held back)."""
    from appliance.cluster import replication_throttle as rt

    boot, brokers, store = cluster["boot"], cluster["brokers"], cluster["store"]
    topic, rate, n = "slowlead", 300_000, 1200
    home, newcomer = _one_replica_to_move(boot, topic, n)
    store.set_broker_config(home, {rt.LEADER_RATE: str(rate)})
    store.set_topic_config(topic, {rt.LEADER_REPLICAS: f"0:{home}"})
    time.sleep(1.0)  # the leader's cluster worker publishes throttles every 0.5 s
    plan = _write(tmp_path, "slowlead.json", {"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [home, newcomer]}]})
    started = time.monotonic()
    ex = _tool("reassign-partitions", "--zookeeper", cluster["connect"], "--execute", "--reassignment-json-file", plan)
    assert ex.returncode == 0, ex.stdout + ex.stderr
    seg = Path(brokers[newcomer].log_dirs[0]) / f"{topic}-0" / "00000000000000000000.log"
    size = (Path(brokers[home].log_dirs[0]) / f"{topic}-0" / "00000000000000000000.log").stat().st_size
    _wait(lambda: seg.exists() and seg.stat().st_size >= size, 120, "the new replica's copy", step=0.1)
    took = time.monotonic() - started
    print(f"leader-throttled copy of {size} bytes at {rate} B/s: {took:.1f} s")
    assert took > size / rate / 3, f"the throttled copy of {size} bytes took only {took:.1f} s"
    _wait(lambda: (ps := _partitions(boot, topic)) and sorted(ps[0][2]) == sorted([home, newcomer]),
          60, "both replicas in the ISR")

    slow = 10_000  # 300 kB to a throttled out-of-sync follower would take 30 s
    store.set_broker_config(home, {rt.LEADER_RATE: str(slow)})
    time.sleep(1.0)
    p = Producer({"bootstrap.servers": boot, "acks": "all", "linger.ms": 5})
    started = time.monotonic()
    for _ in range(300):
        p.produce(topic, b"y" * 1000, partition=0)
    assert p.flush(60) == 0
    took = time.monotonic() - started
    print(f"acks=all 300 kB with the in-sync follower under a {slow} B/s leader throttle: {took:.2f} s")
    assert took < 300_000 / slow / 6, took
    store.set_broker_config(home, {})
    store.set_topic_config(topic, {})
    # the later tests restart brokers and elect across every topic: this one goes
    admin = AdminClient({"bootstrap.servers": boot})  # kept: a collected handle cancels its futures
    admin.delete_topics([topic])[topic].result(60)


def _leaders(boot: str, topic: str) -> dict[int, int]:
    """partition -> leader from the first answer about the topic: _partitions' {} means no
    broker answered yet (one still joining, or not yet told of the topic), not "no leaders"."""
    deadline = time.monotonic() + 30
    while not (ps := _partitions(boot, topic)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return {p: s[0] for p, s in ps.items()}


def _every_isr_full(boot: str) -> bool:
    """Every partition of every topic has all its replicas in the ISR (Metadata)."""
    try:
        md = AdminClient({"bootstrap.servers": boot}).list_topics(timeout=10)
    except Exception:  # a broker still joining closes the connection: ask again
        return False
    return bool(md.topics) and all(sorted(p.isrs) == sorted(p.replicas) and p.leader >= 0
                                   for t in md.topics.values() for p in t.partitions.values())


def test_preferred_leader_election(cluster, tmp_path):
    boot, brokers, store = cluster["boot"], cluster["brokers"], cluster["store"]
    topic = "elect"
    _create(boot, topic, [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 2, 1], [0, 1, 2]])
    _restart(brokers[0])
    # {} (no answer yet: a broker still joining closes the connection) is not "every ISR"
    _wait(lambda: len(ps := _partitions(boot, topic)) == 5 and all(len(st[2]) == 3 for st in ps.values()),
          90, "broker 0 back in every ISR")
    leaders = _leaders(boot, topic)
    assert leaders[0] != 0 and leaders[3] != 0 and leaders[4] != 0  # moved away, nothing moved back

    # a real client's ElectLeaders (librdkafka finds it advertised in cluster mode)
    from confluent_kafka import ElectionType
    from confluent_kafka import TopicPartition as CTp
    admin = AdminClient({"bootstrap.servers": boot})
    result = admin.elect_leaders(ElectionType.PREFERRED, [CTp(topic, 4)]).result(60)
    assert [(tp.topic, tp.partition, err) for tp, err in result.items()] == [(topic, 4, None)]
    _wait(lambda: _leaders(boot, topic)[4] == 0, 30, "confluent-kafka's election to show")
    result = admin.elect_leaders(ElectionType.PREFERRED, [CTp(topic, 4)]).result(60)
    assert "ELECTION_NOT_NEEDED" in str(list(result.values())[0])

    # the old tools' way: /admin/preferred_replica_election names one partition
    store.request_preferred_election([TopicPartition(topic, 3)])
    _wait(lambda: _leaders(boot, topic)[3] == 0, 60, "the znode's partition to move back")
    _wait(lambda: not store.client.exists("/admin/preferred_replica_election"), 30, "the znode to go")
    assert _leaders(boot, topic)[0] != 0

    # every partition of the cluster (earlier tests' too) has its preferred replica back in sync,
    # else Kafka's answer for it is PREFERRED_LEADER_NOT_AVAILABLE, as the tool reports
    _wait(lambda: _every_isr_full(boot), 90, "every partition's ISR to be full again")
    r = _tool("leader-election", "--bootstrap-server", boot, "--election-type", "preferred",
              "--all-topic-partitions")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Successfully completed leader election (PREFERRED) for partitions" in r.stdout
    assert f"{topic}-0" in r.stdout.splitlines()[0]
    assert f"{topic}-3" in r.stdout and "Valid replica already elected" in r.stdout
    _wait(lambda: _leaders(boot, topic) == {0: 0, 1: 1, 2: 2, 3: 0, 4: 0}, 30, "every preferred leader")

    again = _tool("leader-election", "--bootstrap-server", boot, "--election-type", "preferred",
                  "--topic", topic, "--partition", "1")
    assert again.returncode == 0 and f"Valid replica already elected for partitions {topic}-1" in again.stdout
    unknown = _tool("leader-election", "--bootstrap-server", boot, "--election-type", "preferred",
                    "--path-to-json-file", _write(tmp_path, "p.json", {"partitions": [{"topic": topic, "partition": 9}]}))
    assert unknown.returncode == 1 and f"{topic}-9: UNKNOWN_TOPIC_OR_PARTITION" in unknown.stdout
    assert "Traceback" not in unknown.stderr
    bad = _tool("leader-election", "--bootstrap-server", boot, "--election-type", "preferred", "--topic", topic)
    assert bad.returncode == 2 and "--topic needs --partition" in bad.stderr


def test_delete_topics_removes_every_replica_through_the_controller(cluster):
    """DeleteTopics sent to one broker marks /admin/delete_topics; the controller stops and
    deletes the replicas on all three brokers and then the znodes; Metadata on every broker
    forgets the topic. An unknown topic gets UNKNOWN_TOPIC_OR_PARTITION."""
    from confluent_kafka import KafkaError, KafkaException

    boot, brokers, store = cluster["boot"], cluster["brokers"], cluster["store"]
    topic = "doomed"
    # an earlier test restarted a broker: all three registered again first, each answering for
    # itself (another's Metadata could still list a registration from before a restart)
    wait_joined(brokers.values(), 3, 90)
    _create(boot, topic, [[0, 1, 2], [1, 2, 0]])
    p = Producer({"bootstrap.servers": boot, "acks": "all"})
    for i in range(20):
        p.produce(topic, b"v%d" % i, partition=i % 2)
    assert p.flush(30) == 0

    def replica_dirs() -> list[str]:
        return [os.path.join(d, n) for b in brokers.values() for d in b.log_dirs
                for n in os.listdir(d) if n.startswith(f"{topic}-")]

    assert len(replica_dirs()) == 6
    one = AdminClient({"bootstrap.servers": brokers[2].bootstrap})  # any broker, not only the controller
    one.delete_topics([topic], operation_timeout=30)[topic].result(60)
    assert store.assignment(topic) is None  # answered once the topic znode is gone
    assert topic not in store.topics_to_delete()
    _wait(lambda: not replica_dirs(), 30, "every replica's dir deleted")
    for b in brokers.values():
        _wait(lambda b=b: topic not in AdminClient({"bootstrap.servers": b.bootstrap})
              .list_topics(timeout=10).topics, 30, f"broker {b.bootstrap} to forget {topic}")
    with pytest.raises(KafkaException) as e:
        one.delete_topics(["never-was"], operation_timeout=30)["never-was"].result(60)
    assert e.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_unclean_election_only_when_asked(cluster):
    boot, brokers = cluster["boot"], cluster["brokers"]
    topic = "lossy"
    controller = _controller(boot)
    a, b = [i for i in range(3) if i != controller]
    _create(boot, topic, [[a, b]])
    p = Producer({"bootstrap.servers": boot, "acks": "all"})
    p.produce(topic, b"before", partition=0)
    assert p.flush(60) == 0
    # b stops first (leaves the ISR), then a, the last ISR member: no leader, b out of sync
    assert brokers[b].stop(60) == 0
    _wait(lambda: _partitions(boot, topic)[0][2] == [a], 60, "the ISR to shrink to the leader")
    assert brokers[a].stop(60) == 0
    brokers[b].start()
    others = brokers[controller].bootstrap
    _wait(lambda: (s := _partitions(others, topic).get(0)) and s[0] == -1
          and (md := _cluster_md(others)) and b in md.brokers, 60,
          "broker b back, the partition still without a leader")
    pref = _tool("leader-election", "--bootstrap-server", others, "--election-type", "preferred",
                 "--topic", topic, "--partition", "0")
    assert pref.returncode == 1 and "PREFERRED_LEADER_NOT_AVAILABLE" in pref.stdout, pref.stdout + pref.stderr
    assert _partitions(others, topic)[0][0] == -1  # unclean election is off: still offline

    r = _tool("leader-election", "--bootstrap-server", others, "--election-type", "unclean",
              "--topic", topic, "--partition", "0")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"Successfully completed leader election (UNCLEAN) for partitions {topic}-0" in r.stdout
    _wait(lambda: _partitions(others, topic)[0][:3:2] == (b, [b]), 30, "b leading, alone in the ISR")
    again = _tool("leader-election", "--bootstrap-server", others, "--election-type", "unclean",
                  "--topic", topic, "--partition", "0")
    assert again.returncode == 0 and "Valid replica already elected" in again.stdout
    # broker a stays down: the next test restarts every broker


def test_auto_leader_rebalance(cluster):
    """Last: the brokers restart with auto.leader.rebalance.enable and a 2 s check interval;
    a broker that stops and comes back gets its preferred leaderships back without any tool."""
    boot, brokers = cluster["boot"], cluster["brokers"]
    topic = "balance"
    # all at once, so whichever becomes the controller has the settings; SIGKILL, since a
    # controlled shutdown with nowhere to move leadership to only waits
    logs = {i: b.log_path.stat().st_size for i, b in brokers.items()}
    t0 = time.monotonic()
    kill_brokers(brokers.values())
    for b in brokers.values():
        b.overrides.update({"auto.leader.rebalance.enable": "true",
                            "leader.imbalance.check.interval.seconds": "2"})
    start_brokers(brokers.values())
    # every broker answering for itself: a Metadata from any one could still list another's
    # registration from before the SIGKILL, which that broker ends when it starts (the
    # CreateTopics below then met "unknown brokers [2]" in the gap before it registered again)
    wait_joined(brokers.values(), 3)
    try:
        _create(boot, topic, [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 2, 1]])
    except TimeoutError:  # the broker waited its whole 60 s for leaders: say what the brokers did
        raise AssertionError("CreateTopics not answered in 60 s after the restart:\n" + "\n".join(
            f"--- broker {i}:\n" + b.log_path.read_bytes()[logs[i]:].decode(errors="replace")[-4000:]
            for i, b in brokers.items())) from None
    print(f"SIGKILL of the cluster to a created topic with leaders: {time.monotonic() - t0:.1f} s")
    # the brokers ended their previous lives' sessions themselves (or found them over): none
    # waited for ZooKeeper to expire one (the old registrations and /controller would have held
    # the cluster up to the session timeout)
    for i, b in brokers.items():
        since = b.log_path.read_bytes()[logs[i]:]
        assert b"of this broker's previous run" in since and b"still held" not in since, since[-3000:]
    assert _leaders(boot, topic) == {0: 0, 1: 1, 2: 2, 3: 0}
    assert brokers[1].stop(60) == 0
    assert _leaders(boot, topic)[1] != 1  # moved away by the controlled shutdown
    brokers[1].start()
    _wait(lambda: _leaders(boot, topic) == {0: 0, 1: 1, 2: 2, 3: 0}, 90,
          "broker 1's leadership to come back by itself")


@pytest.mark.parametrize("text,message", [
    ("[", "is not valid JSON"),
    ('{"partitions":[]}', "'partitions' must be a non-empty list"),
    ('{"partitions":[{"partition":0}]}', "has no 'topic'"),
    ('{"partitions":[{"topic":"t","partition":-1}]}', "'partition' of t must be an integer >= 0"),
    ('{"partitions":[{"topic":"t","partition":0},{"topic":"t","partition":0}]}', "t-0 is listed twice"),
])
def test_leader_election_file_errors_named(text, message):
    from appliance.cli.leader_election import parse_partitions_file
    from appliance.cli.main import CliError
    with pytest.raises(CliError, match=message):
        parse_partitions_file(text)


def test_tools_on_a_standalone_broker(tmp_path):
    """leader-election answers as on a one-broker Kafka cluster (no election is needed);
    reassign-partitions, which writes ZooKeeper, says there is no cluster in one line, exit 1,
    no traceback."""
    with BrokerProcess(tmp_path) as b:
        r = _tool("leader-election", "--bootstrap-server", b.bootstrap, "--election-type", "preferred",
                  "--all-topic-partitions")
        assert (r.returncode, r.stdout, r.stderr) == (0, "", ""), r.stderr
        _tool("topics", "--bootstrap-server", b.bootstrap, "--create", "--topic", "t", "--partitions", "1")
        r = _tool("leader-election", "--bootstrap-server", b.bootstrap, "--election-type", "preferred",
                  "--topic", "t", "--partition", "0")
        assert r.returncode == 0 and "Valid replica already elected for partitions t-0" in r.stdout, r.stderr
        r = _tool("reassign-partitions", "--bootstrap-server", b.bootstrap, "--verify",
                  "--reassignment-json-file", _write(tmp_path, "p.json", {"partitions": [
                      {"topic": "t", "partition": 0, "replicas": [0]}]}))
        assert r.returncode == 1 and "is not in a cluster" in r.stderr and "Traceback" not in r.stderr, r.stderr
