"""Cluster mode end to end with real processes: one ZooKeeper, three `appliance serve` brokers.

A topic with 6 partitions, replication factor 3 and min.insync.replicas=2 takes an acks=all
idempotent confluent-kafka producer; the whole process group of a broker that leads partitions
is SIGKILLed mid-stream. New leaders come within the session timeout + 5 s, the producer
carries on, every acknowledged record is read exactly once and in order (kafka-python and
kcat), and the killed broker restarts, rejoins the ISR and ends with segment files
byte-identical to the others'. Then, on the same cluster: the CLI's --create/--describe, one group
coordinator for members bootstrapped at different brokers, a fetch from an unknown replica id,
controlled shutdown under load, an immediate restart after SIGKILL, and last the controller's
broker and a second broker killed (NOT_ENOUGH_REPLICAS, nothing visible past the HW). Also:
a duplicate broker.id and an unreachable ZooKeeper exit with code 3.

The topics are module fixtures, made by the first test that needs them: each test also runs
alone (``-k``), on a cluster that has seen none of the others.
"""

from __future__ import annotations

import functools
import os
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from appliance.cluster.previous_session import SESSION_FILE
from tests.broker.wire import RawConnection, metadata_body
from tests.broker_process import BrokerProcess
from tests.cluster.harness import cluster_metadata as _metadata
from tests.cluster.harness import kill_brokers, start_brokers, wait_for, wait_joined

_wait = functools.partial(wait_for, step=0.2)  # Metadata polls: 5 a second is plenty

SESSION_MS = 6000
LONG_SESSION_MS = 15000  # test_broker_restarted_at_once_after_sigkill_closes_its_old_session
TOPIC = "events"
PARTITIONS = 6
OFFSETS_PARTITIONS = 3


def _broker(workdir: Path, connect: str, broker_id: int, port: int | None = None,
            session_ms: int = SESSION_MS) -> BrokerProcess:
    workdir.mkdir(exist_ok=True)
    return BrokerProcess(workdir, port=port, overrides={
        "zookeeper.connect": connect, "broker.id": str(broker_id),
        "zookeeper.session.timeout.ms": str(session_ms), "num.network.threads": "1",
        "replica.lag.time.max.ms": "10000",
        # no 3 s wait for more members before a group's first rebalance (Kafka's own tests set
        # 0 too): the group tests here join about five times
        "group.initial.rebalance.delay.ms": "0",
        # Kafka's 50 would put 50 more partitions on every broker: a restart after SIGKILL
        # then recovers for longer than the session timeout the restart test races against
        "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS)})


@pytest.fixture(scope="module")
def cluster(zk_server, tmp_path_factory):
    connect = f"{zk_server.connect}/r{uuid.uuid4().hex[:10]}"
    root = tmp_path_factory.mktemp("cluster")
    brokers = {i: _broker(root / f"b{i}", connect, i) for i in range(3)}
    try:
        start_brokers(brokers.values())
        boot = ",".join(b.bootstrap for b in brokers.values())
        _wait(lambda: len(_metadata(boot).brokers) == 3, 60, "three registered brokers")
        yield {"connect": connect, "root": root, "brokers": brokers, "boot": boot}
    finally:
        kill_brokers(brokers.values())


def test_duplicate_broker_id_refused_with_exit_3(cluster, tmp_path):
    dup = _broker(tmp_path / "dup", cluster["connect"], 1)
    dup._log = open(dup.log_path, "ab")
    args = [os.sys.executable, "-m", "appliance.cli.main", "serve"]
    for k, v in dup.overrides.items():
        args += ["--override", f"{k}={v}"]
    proc = subprocess.run(args, stdout=dup._log, stderr=subprocess.STDOUT, timeout=120,
                          start_new_session=True)
    dup._log.close()
    assert proc.returncode == 3, dup.log()
    assert "broker.id 1" in dup.log() or "id 1" in dup.log(), dup.log()


def test_replication_factor_above_live_brokers_refused(cluster):
    admin = AdminClient({"bootstrap.servers": cluster["boot"]})  # kept alive while we wait
    fut = admin.create_topics([NewTopic("too-many", 1, 4)])["too-many"]
    with pytest.raises(Exception) as e:
        fut.result(30)
    assert "INVALID_REPLICATION_FACTOR" in str(e.value)


def _leaders(boot: str) -> dict[int, int]:
    md = _metadata(boot)
    t = md.topics.get(TOPIC)
    if t is None or t.error is not None:
        return {}
    return {p.id: p.leader for p in t.partitions.values()}


def _read_kafka_python(boot: str, ends: dict[int, int]) -> dict[int, list[bytes]]:
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(bootstrap_servers=boot, enable_auto_commit=False, consumer_timeout_ms=5000)
    tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    c.assign(tps)
    c.seek_to_beginning(*tps)
    out: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + 120
    while any(len(out[p]) < ends[p] for p in out) and time.monotonic() < deadline:
        for tp, msgs in c.poll(timeout_ms=1000).items():
            out[tp.partition] += [m.value for m in msgs]
    c.close()
    return out


def _read_kcat(boot: str, partition: int, end: int) -> list[bytes]:
    if end == 0:
        return []
    r = subprocess.run(["kcat", "-C", "-b", boot, "-t", TOPIC, "-p", str(partition), "-o", "beginning",
                        "-c", str(end), "-e", "-q", "-f", "%s\n"], capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


@pytest.fixture(scope="module")
def events(cluster) -> str:
    """TOPIC, made once for the module by whichever test needs it first, so that each test
    can also run alone (``-k``); the module's tests share it in their order."""
    boot = cluster["boot"]
    admin = AdminClient({"bootstrap.servers": boot})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})])[TOPIC].result(60)
    _wait(lambda: len(_leaders(boot)) == PARTITIONS and all(v >= 0 for v in _leaders(boot).values()),
          60, "leaders of every partition")
    return TOPIC


def test_leader_killed_no_acknowledged_record_lost(cluster, events):
    boot, brokers = cluster["boot"], cluster["brokers"]

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
            p.produce(TOPIC, value=b"%d-%08d" % (i % PARTITIONS, i), partition=i % PARTITIONS,
                      on_delivery=on_delivery)
            i += 1
            p.poll(0)
            if i % 50 == 0:
                time.sleep(0.01)
        assert p.flush(150) == 0

    t = threading.Thread(target=produce)
    t.start()
    try:
        _wait(lambda: len(acked) > 500, 60, "acknowledged records before the kill")
        md = _metadata(boot)
        leads = _leaders(boot)
        victim = next(b for b in sorted(set(leads.values())) if b != md.controller_id)
        epochs = _leader_epochs(brokers[md.controller_id].port)
        assert {p: leader for p, (leader, _) in epochs.items()} == leads
        assert all(e >= 0 for _, e in epochs.values()), epochs
        killed_at = time.monotonic()
        brokers[victim].kill()
        before = len(acked)
        survivors = ",".join(b.bootstrap for i, b in brokers.items() if i != victim)
        _wait(lambda: (ls := _leaders(survivors)) and all(v >= 0 and v != victim for v in ls.values()),
              SESSION_MS / 1000 + 30, "new leaders")
        took = time.monotonic() - killed_at
        print(f"new leaders {took:.1f} s after the SIGKILL")
        assert took <= SESSION_MS / 1000 + 5
        # Metadata v7+ carries each leadership's epoch (KIP-320): every moved partition's has
        # grown, and every survivor answers the same once the controller's update reached it
        moved = {p for p, b in leads.items() if b == victim}
        assert moved
        def agreed() -> dict[int, tuple[int, int]] | None:
            first, second = (_leader_epochs(b.port) for i, b in brokers.items() if i != victim)
            return first if first == second and all(first[p][0] != victim for p in moved) else None
        now = _wait(agreed, 30, "the survivors to answer the new leaders alike")
        assert all(now[p][1] > epochs[p][1] for p in moved), (epochs, now)
        _wait(lambda: len(acked) > before + 500, 60, "the producer to carry on")
    finally:
        stop.set()
        t.join(200)
    assert not errors, errors[:5]

    # every acknowledged record exactly once, in order per partition
    survivors = ",".join(b.bootstrap for i, b in brokers.items() if i != victim)
    ends = {p: 1 + max(o for q, o, _ in acked if q == p) for p in range(PARTITIONS)}
    got = _read_kafka_python(survivors, ends)
    for p in range(PARTITIONS):
        values = got[p]
        assert len(values) == len(set(values)), f"partition {p} has duplicates"
        assert values == sorted(values), f"partition {p} out of order"
        mine = {v for q, _, v in acked if q == p}
        assert mine <= set(values), f"partition {p} lost {len(mine - set(values))} acknowledged records"
        assert _read_kcat(survivors, p, len(values)) == values[:len(values)]

    # the killed broker comes back, truncates, catches up and rejoins every ISR
    b = brokers[victim]
    brokers[victim] = _broker(b.workdir, cluster["connect"], victim, port=b.port).start()

    def all_in_isr():
        t = _metadata(boot).topics.get(TOPIC)
        return t is not None and all(victim in p.isrs for p in t.partitions.values())
    _wait(all_in_isr, 90, f"broker {victim} back in every ISR")
    wait_joined(brokers.values(), 3)  # the ISR can name it before it has joined

    # replicas byte-identical (nothing is produced now, so the high watermark is the log end)
    def identical(p: int) -> bool:
        files = [Path(x.log_dirs[0]) / f"{TOPIC}-{p}" / "00000000000000000000.log" for x in brokers.values()]
        data = [f.read_bytes() if f.exists() else None for f in files]
        return data[0] is not None and len(data[0]) > 0 and all(d == data[0] for d in data)
    for p in range(PARTITIONS):
        _wait(lambda p=p: identical(p), 60, f"identical replicas of partition {p}")


def _leader_epochs(port: int) -> dict[int, tuple[int, int]]:
    """partition -> (leader, leader epoch) of TOPIC as the broker at ``port`` answers Metadata v9."""
    with RawConnection(port) as c:
        md = c.request(3, 9, metadata_body([TOPIC]))
    [t] = md.topics
    return {p.partition_index: (p.leader_id, p.leader_epoch) for p in t.partitions}


class _Producing:
    """An acks=all idempotent confluent-kafka producer writing without pause, in a thread."""

    def __init__(self, boot: str) -> None:
        self.boot = boot
        self.acked: list[tuple[int, int, bytes]] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        p = Producer({"bootstrap.servers": self.boot, "acks": "all", "enable.idempotence": True,
                      "linger.ms": 5, "message.timeout.ms": 120000})
        i = 0
        while not self.stop.is_set():
            p.produce(TOPIC, value=b"c%d-%08d" % (i % PARTITIONS, i), partition=i % PARTITIONS,
                      on_delivery=self._delivered)
            i += 1
            p.poll(0)
            if i % 50 == 0:
                time.sleep(0.01)
        p.flush(150)

    def _delivered(self, err, msg) -> None:
        if err is None:
            self.acked.append((msg.partition(), msg.offset(), msg.value()))
        else:
            self.errors.append(str(err))

    def __enter__(self) -> _Producing:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(200)


def test_cli_describe_shows_leader_replicas_isr(cluster):
    r = subprocess.run([os.sys.executable, "-m", "appliance.cli.main", "topics", "--bootstrap-server",
                        cluster["boot"], "--create", "--topic", "cli-made", "--partitions", "2",
                        "--replication-factor", "3"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = _wait(lambda: (d := subprocess.run(
        [os.sys.executable, "-m", "appliance.cli.main", "topics", "--bootstrap-server", cluster["boot"],
         "--describe", "--topic", "cli-made"], capture_output=True, text=True, timeout=120).stdout)
        and d.count("Isr: ") == 2 and all(len(line.split("Isr: ")[1].split(",")) == 3
                                          for line in d.splitlines() if "Isr: " in line) and d, 60, "describe")
    assert "Leader: " in out and "Replicas: " in out


def test_group_members_on_different_brokers_share_one_coordinator(cluster, events):
    """Two consumers of one group, each bootstrapped at a different broker, find the same
    coordinator and split the partitions between them."""
    from confluent_kafka import Consumer
    brokers = list(cluster["brokers"].values())
    consumers = [Consumer({"bootstrap.servers": b.bootstrap, "group.id": "split-group",
                           "auto.offset.reset": "earliest", "session.timeout.ms": 10000})
                 for b in brokers[:2]]
    try:
        for c in consumers:
            c.subscribe([TOPIC])

        def split():
            for c in consumers:
                c.poll(0.2)
            mine = [{tp.partition for tp in c.assignment()} for c in consumers]
            return mine[0] and mine[1] and not (mine[0] & mine[1]) and \
                (mine[0] | mine[1]) == set(range(PARTITIONS))
        _wait(split, 90, "the group to split the partitions", step=0)
    finally:
        for c in consumers:
            c.close()


GROUP_TOPIC = "group-events"
GROUP_PARTITIONS = 3
OFFSETS = "__consumer_offsets"


@pytest.fixture(scope="module")
def group_topic(cluster) -> str:
    """GROUP_TOPIC, made once for the module (as ``events``)."""
    admin = AdminClient({"bootstrap.servers": cluster["boot"]})
    admin.create_topics([NewTopic(GROUP_TOPIC, GROUP_PARTITIONS, 3)])[GROUP_TOPIC].result(60)
    return GROUP_TOPIC


@pytest.fixture(scope="module")
def offsets_topic(cluster) -> str:
    """``__consumer_offsets``, made by a first FindCoordinator and led everywhere."""
    boot, first = cluster["boot"], cluster["brokers"][0]
    _wait(lambda: _group_request(first.bootstrap, 10, 1, {"key": "probe", "key_type": 0}).error_code == 0,
          90, "a coordinator for a first group")
    _wait(lambda: (lead := _offsets_leaders(boot)) and all(v >= 0 for v in lead.values()),
          60, "leaders of __consumer_offsets")
    return OFFSETS


def _offsets_leaders(boot: str) -> dict[int, int]:
    t = _metadata(boot).topics.get(OFFSETS)
    return {} if t is None or t.error is not None else {p.id: p.leader for p in t.partitions.values()}


def _group_led_by(boot: str, broker: int, prefix: str) -> str:
    """A group id whose ``__consumer_offsets`` partition ``broker`` leads now."""
    from appliance.coordinator.routing import offsets_partition_for
    leaders = _offsets_leaders(boot)
    return next(g for i in range(10_000) if leaders.get(offsets_partition_for(
        g := f"{prefix}-{i}", len(leaders))) == broker)


def _group_request(bootstrap: str, api_key: int, version: int, body: dict):
    """One group API request to one broker (no client library: we choose the broker)."""
    import socket

    from appliance.protocol import NEED_DATA, ClientConnection
    host, port = bootstrap.split(":")
    conn = ClientConnection(client_id="test")
    _, frame = conn.send_request(api_key, version, body)
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(frame)
        while (ev := conn.next_event()) is NEED_DATA:
            conn.receive_data(s.recv(1 << 20))
    return ev.body


def _committed_confluent(boot: str, group: str, parts: int) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": boot, "group.id": group, "enable.auto.commit": False})
    try:
        return {tp.partition: tp.offset for tp in
                c.committed([TopicPartition(GROUP_TOPIC, p) for p in range(parts)], timeout=60)}
    finally:
        c.close()


def _consume_confluent(consumer, want: int, timeout: float) -> list:
    got, deadline = [], time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m)
    return got


def _commit_confluent(consumer, timeout: float = 90) -> None:
    """A synchronous commit, retried over the coordinator's move (retriable errors)."""
    from confluent_kafka import KafkaException
    deadline = time.monotonic() + timeout
    while True:
        try:
            consumer.commit(asynchronous=False)
            return
        except KafkaException as e:
            if time.monotonic() > deadline:
                raise
            consumer.poll(0.5)
            last = e
            del last


def test_group_offsets_survive_the_coordinators_broker_killed(cluster, group_topic, offsets_topic):
    """A group's coordinator is the leader of its ``__consumer_offsets`` partition, which is
    replicated: commits made through confluent-kafka and kafka-python survive a SIGKILL of the
    coordinator's whole broker, the clients find the new coordinator, a consumer resumes right
    after the last commit, the live member rejoins; the restarted old coordinator answers
    NOT_COORDINATOR; the topic has replication factor 3."""
    from confluent_kafka import Consumer
    from kafka import KafkaConsumer, TopicPartition

    from appliance.errors import ErrorCode
    boot, brokers = cluster["boot"], cluster["brokers"]
    parts, total = GROUP_PARTITIONS, 600
    prod = Producer({"bootstrap.servers": boot, "acks": "all"})
    for i in range(total):
        prod.produce(GROUP_TOPIC, f"g{i}".encode(), partition=i % parts)
    assert prod.flush(60) == 0

    # pick a victim that leads some of the offsets topic and is not the controller (its
    # failover is another test's)
    controller = _metadata(boot).controller_id
    victim = next(b for b in sorted(set(_offsets_leaders(boot).values())) if b != controller)
    g_conf = _group_led_by(boot, victim, "ck")
    g_kp = _group_led_by(boot, victim, "kp")

    # confluent-kafka: a live member that consumes part and commits
    live = Consumer({"bootstrap.servers": boot, "group.id": g_conf, "enable.auto.commit": False,
                     "auto.offset.reset": "earliest", "session.timeout.ms": 10000})
    live.subscribe([GROUP_TOPIC])
    first = _consume_confluent(live, 250, 90)
    assert len(first) == 250
    _commit_confluent(live)
    before = _committed_confluent(boot, g_conf, parts)
    # kafka-python: commit a position on each partition, then leave
    kp = KafkaConsumer(GROUP_TOPIC, bootstrap_servers=boot, group_id=g_kp, enable_auto_commit=False,
                       auto_offset_reset="earliest", consumer_timeout_ms=60000)
    kp_seen = []
    for m in kp:
        kp_seen.append(m)
        if len(kp_seen) == 300:
            break
    kp.commit()
    kp_committed = {p: kp.committed(TopicPartition(GROUP_TOPIC, p)) for p in range(parts)}
    kp.close()
    assert sum(v for v in kp_committed.values() if v) == 300

    brokers[victim].kill()
    survivors = ",".join(b.bootstrap for i, b in brokers.items() if i != victim)
    _wait(lambda: (lead := _offsets_leaders(survivors)) and victim not in lead.values()
          and all(v >= 0 for v in lead.values()), SESSION_MS / 1000 + 30, "new offsets leaders")

    # every commit made before the kill is there, read through the new coordinators
    assert _committed_confluent(survivors, g_conf, parts) == before
    kp2 = KafkaConsumer(bootstrap_servers=survivors, group_id=g_kp, enable_auto_commit=False)
    assert {p: kp2.committed(TopicPartition(GROUP_TOPIC, p)) for p in range(parts)} == kp_committed
    kp2.close()

    # the live member finds the new coordinator, rejoins and goes on from where it was
    rest = _consume_confluent(live, total - 250, 120)
    read = [(m.partition(), m.offset()) for m in first + rest]
    assert len(set(read)) == len(read) == total, (len(first), len(rest))
    _commit_confluent(live)
    live.close()
    assert _committed_confluent(survivors, g_conf, parts) == {p: total // parts for p in range(parts)}

    # kafka-python resumes exactly after its last commit: nothing committed is read again
    kp3 = KafkaConsumer(GROUP_TOPIC, bootstrap_servers=survivors, group_id=g_kp,
                        enable_auto_commit=False, auto_offset_reset="earliest")
    resumed, deadline = [], time.monotonic() + 120
    while len(resumed) < total - 300 and time.monotonic() < deadline:
        for msgs in kp3.poll(timeout_ms=1000).values():
            resumed += msgs
    kp3.close()
    # a record read again would come first and push the last ones out of this count
    for p in range(parts):
        offsets = sorted(m.offset for m in resumed if m.partition == p)
        assert offsets == list(range(kp_committed[p] or 0, total // parts))

    # the old coordinator, restarted, names the new leaders and refuses the groups it lost
    b = brokers[victim]
    brokers[victim] = _broker(b.workdir, cluster["connect"], victim, port=b.port).start()
    _wait(lambda: (t := _metadata(boot).topics.get(OFFSETS)) is not None
          and all(victim in p.isrs for p in t.partitions.values()), 120, f"broker {victim} in the offsets ISRs")
    wait_joined(brokers.values(), 3)  # the ISR can name it before it has joined
    leaders = _offsets_leaders(boot)
    from appliance.coordinator.routing import offsets_partition_for
    refused = 0
    for g in (g_conf, g_kp):
        leader = leaders[offsets_partition_for(g, len(leaders))]
        found = _group_request(brokers[victim].bootstrap, 10, 1, {"key": g, "key_type": 0})
        assert (found.error_code, found.node_id) == (0, leader)
        if leader != victim:  # (a preferred-leader election may have given one back)
            refused += 1
            answer = _group_request(brokers[victim].bootstrap, 9, 1, {
                "group_id": g, "topics": [{"name": GROUP_TOPIC, "partition_indexes": [0]}]})
            assert answer.topics[0].partitions[0].error_code == ErrorCode.NOT_COORDINATOR
    assert refused

    # the consumer-groups tool, bootstrapped at a broker that coordinates neither group, finds
    # the coordinators (and the partitions' leaders for the lag)
    def tool(*args):
        r = subprocess.run([os.sys.executable, "-m", "appliance.cli.main", "consumer-groups",
                            "--bootstrap-server", brokers[victim].bootstrap, *args],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        return r.stdout
    assert {g_conf, g_kp} <= set(tool("--list").split())
    rows = {int(f[2]): (int(f[3]), int(f[4])) for line in tool("--describe", "--group", g_kp).splitlines()
            if (f := line.split()) and f[0] == g_kp}
    assert rows == {p: (kp_committed[p], total // parts) for p in range(parts) if kp_committed[p] is not None}

    r = subprocess.run([os.sys.executable, "-m", "appliance.cli.main", "topics", "--bootstrap-server",
                        boot, "--describe", "--topic", OFFSETS], capture_output=True, text=True, timeout=120)
    rows = [line for line in r.stdout.splitlines() if "Replicas: " in line]
    assert len(rows) == OFFSETS_PARTITIONS, r.stdout[-2000:]
    assert all(len(line.split("Replicas: ")[1].split()[0].split(",")) == 3 for line in rows), r.stdout[-2000:]


def _cluster_worker(broker: BrokerProcess):
    import psutil
    return next(p for p in psutil.Process(broker.proc.pid).children(recursive=True)
                if "cluster worker" in " ".join(p.cmdline()))


def test_offset_commit_answered_only_once_replicated(cluster, group_topic, offsets_topic):
    """The coordinator holds an OffsetCommit's answer until the followers of the offsets
    partition have the record: with their replica fetchers stopped (SIGSTOP of the cluster
    workers, shorter than the ZooKeeper session) no answer comes and an OffsetFetch does not
    see the offset; the answer comes, successful, once they fetch again."""
    import signal
    boot, brokers = cluster["boot"], cluster["brokers"]
    _wait(lambda: (t := _metadata(boot).topics.get(OFFSETS)) is not None
          and all(len(p.isrs) == 3 for p in t.partitions.values()), 90, "full offsets ISRs")
    leader = sorted(set(_offsets_leaders(boot).values()))[0]
    group = _group_led_by(boot, leader, "held")
    followers = [_cluster_worker(b) for i, b in brokers.items() if i != leader]
    answer: list = []

    def commit():
        answer.append(_group_request(brokers[leader].bootstrap, 8, 2, {
            "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
            "retention_time_ms": -1, "topics": [{"name": GROUP_TOPIC, "partitions": [
                {"partition_index": 0, "committed_offset": 7, "committed_metadata": ""}]}]}))
    for f in followers:
        f.send_signal(signal.SIGSTOP)
    try:
        t = threading.Thread(target=commit, daemon=True)
        t.start()
        t.join(2.5)
        assert not answer, "a commit was answered before any follower had it"
        # and it is not in the coordinator's cache either (Kafka's pending offset commits)
        fetched = _group_request(brokers[leader].bootstrap, 9, 1, {
            "group_id": group, "topics": [{"name": GROUP_TOPIC, "partition_indexes": [0]}]})
        assert fetched.topics[0].partitions[0].committed_offset == -1
    finally:
        for f in followers:
            f.send_signal(signal.SIGCONT)
    t.join(60)
    assert answer and answer[0].topics[0].partitions[0].error_code == 0
    assert _committed_confluent(boot, group, 1) == {0: 7}


def test_follower_fetch_from_an_unknown_replica_id_is_refused(cluster, events):
    from appliance.errors import ErrorCode
    leaders = _leaders(cluster["boot"])
    leader = cluster["brokers"][leaders[0]]
    p = Producer({"bootstrap.servers": cluster["boot"], "acks": "all"})
    p.produce(TOPIC, value=b"replica-fetch-probe", partition=0)  # a high watermark above 0
    assert p.flush(60) == 0
    assert _fetch_as_replica(leader.bootstrap, 42, 0).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    ok = _fetch_as_replica(leader.bootstrap, next(i for i in cluster["brokers"] if i != leaders[0]), 0)
    assert ok.error_code == 0 and ok.high_watermark > 0


def test_controlled_shutdown_moves_leadership_without_loss(cluster, events):
    boot, brokers = cluster["boot"], cluster["brokers"]
    md = _metadata(boot)
    leads = _leaders(boot)
    victim = next(b for b in sorted(set(leads.values())) if b != md.controller_id)
    survivors = ",".join(b.bootstrap for i, b in brokers.items() if i != victim)
    with _Producing(boot) as prod:
        _wait(lambda: len(prod.acked) > 300, 60, "acknowledged records before the stop")
        assert brokers[victim].stop(60) == 0
        assert "controlled shutdown: leadership moved away" in brokers[victim].log()
        assert all(v != victim for v in _leaders(survivors).values())
        before = len(prod.acked)
        _wait(lambda: len(prod.acked) > before + 300, 60, "the producer to carry on")
    assert not prod.errors, prod.errors[:5]
    ends = {p: 1 + max(o for q, o, _ in prod.acked if q == p) for p in range(PARTITIONS)}
    got = _read_kafka_python(survivors, ends)
    for p in range(PARTITIONS):
        assert len(got[p]) == len(set(got[p]))
        assert {v for q, _, v in prod.acked if q == p} <= set(got[p])
    b = brokers[victim]
    brokers[victim] = _broker(b.workdir, cluster["connect"], victim, port=b.port).start()
    _wait(lambda: (t := _metadata(boot).topics.get(TOPIC)) is not None
          and all(victim in p.isrs for p in t.partitions.values()), 90, f"broker {victim} back in every ISR")
    wait_joined(brokers.values(), 3)


def test_broker_restarted_at_once_after_sigkill_closes_its_old_session(cluster, events):
    """Restarted before ZooKeeper expired its previous session, a broker closes that session
    itself (recorded in its log dir) and rejoins at once; without the record (a first start
    after an upgrade) it waits for the expiry instead of refusing its own id. Both times it
    rejoins every ISR."""
    boot, brokers = cluster["boot"], cluster["brokers"]
    victim = next(i for i in brokers if i != _metadata(boot).controller_id)

    def in_every_isr() -> bool:
        t = _metadata(boot).topics.get(TOPIC)
        return t is not None and all(victim in p.isrs for p in t.partitions.values())

    def log_since(offset: int) -> str:
        return brokers[victim].log_path.read_bytes()[offset:].decode(errors="replace")

    def joined_since(offset: int) -> bool:
        return f"broker {victim} joined the cluster" in log_since(offset)

    # first give the victim a long session (15 s: a start-up takes 2-3 s on an idle machine, ~6 s
    # at load 10), so that a start-up slowed down by a loaded machine still comes back before
    # ZooKeeper would expire the session of the broker it replaces
    b = brokers[victim]
    b.kill()  # the restart closes its session, or finds it expired
    mark = b.log_path.stat().st_size
    brokers[victim] = _broker(b.workdir, cluster["connect"], victim, port=b.port, session_ms=LONG_SESSION_MS).start()
    _wait(lambda: joined_since(mark), 120, f"broker {victim} registered again")
    _wait(in_every_isr, 120, f"broker {victim} back in every ISR")

    # SIGKILLed and restarted at once: the new broker closes the killed one's live session and
    # registers without waiting for ZooKeeper
    b = brokers[victim]
    b.kill()
    mark = b.log_path.stat().st_size
    killed = time.monotonic()
    brokers[victim] = _broker(b.workdir, cluster["connect"], victim, port=b.port, session_ms=LONG_SESSION_MS).start()
    _wait(lambda: joined_since(mark), 120, f"broker {victim} registered again")
    print(f"SIGKILL to registered again, the old session closed: {time.monotonic() - killed:.1f} s")
    assert "closed ZooKeeper session" in log_since(mark)
    assert "still held" not in log_since(mark)
    _wait(in_every_isr, 120, f"broker {victim} back in every ISR")

    # without the record, a start-up slowed down by a loaded machine still comes back before
    # ZooKeeper expires the long session of the broker it replaces: it waits for the expiry
    b = brokers[victim]
    b.kill()
    (Path(b.log_dirs[0]) / SESSION_FILE).unlink()  # no record of the session to close
    mark = b.log_path.stat().st_size
    brokers[victim] = _broker(b.workdir, cluster["connect"], victim, port=b.port).start()
    _wait(lambda: "still held by this broker's previous session" in log_since(mark), 30,
          "the restarted broker to wait for its old session")
    _wait(in_every_isr, 120, f"broker {victim} back in every ISR")
    assert brokers[victim].proc.poll() is None
    wait_joined(brokers.values(), 3)


def test_controller_then_a_second_broker_killed(cluster, events):
    """The controller's broker dies: a new controller elects new leaders. A second broker dies:
    the one left is the whole ISR, below min.insync.replicas, so an acks=all produce gets
    NOT_ENOUGH_REPLICAS and nothing new becomes visible. Runs last: it leaves one broker."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP
    from kafka.errors import NotEnoughReplicasError

    boot, brokers = cluster["boot"], cluster["brokers"]
    controller = _metadata(boot).controller_id
    brokers[controller].kill()
    rest = [i for i in brokers if i != controller]
    left = ",".join(brokers[i].bootstrap for i in rest)
    killed_at = time.monotonic()
    _wait(lambda: (ls := _leaders(left)) and all(v in rest for v in ls.values()),
          SESSION_MS / 1000 + 30, "new leaders after the controller died")
    assert time.monotonic() - killed_at <= SESSION_MS / 1000 + 5
    p = Producer({"bootstrap.servers": left, "acks": "all", "enable.idempotence": True})
    for i in range(PARTITIONS):
        p.produce(TOPIC, value=b"after-controller-%d" % i, partition=i)
    assert p.flush(60) == 0

    second, survivor = rest
    # a settled start: both survivors in every ISR as Metadata shows it. A leader announces an
    # ISR change to the controller only after 5 s without another (Kafka's ZooKeeper-mode
    # blackout), so just after a broker rejoined, Metadata may still show the ISR without it;
    # killing it then would leave Metadata's "ISR [survivor]" below stale, not the controller's
    # shrink, and an acks=all produce appended on the grown ISR fails AFTER_APPEND (in Kafka too)
    _wait(lambda: (t := _metadata(left).topics.get(TOPIC)) is not None
          and all(sorted(p.isrs) == sorted(rest) for p in t.partitions.values()),
          60, f"brokers {rest} in every ISR")
    brokers[second].kill()
    only = brokers[survivor].bootstrap
    _wait(lambda: (ls := _leaders(only)) and all(v == survivor for v in ls.values()),
          SESSION_MS / 1000 + 30, f"broker {survivor} leading everything")
    under = _wait(lambda: (r := subprocess.run(
        [os.sys.executable, "-m", "appliance.cli.main", "topics", "--bootstrap-server", only, "--describe",
         "--topic", TOPIC, "--under-replicated-partitions"], capture_output=True, text=True, timeout=60).stdout)
        and r.count("Partition: ") == PARTITIONS and r, 60, "every partition listed as under-replicated")
    assert "PartitionCount" not in under
    # the controller has taken the dead broker out of every ISR (until then an acks=all produce
    # may still be appended and fail with NOT_ENOUGH_REPLICAS_AFTER_APPEND, also Kafka's answer)
    _wait(lambda: all(list(p.isrs) == [survivor] for p in _metadata(only).topics[TOPIC].partitions.values()),
          60, f"ISR [{survivor}] everywhere")
    tps = [KTP(TOPIC, q) for q in range(PARTITIONS)]
    c = KafkaConsumer(bootstrap_servers=only)
    before = c.end_offsets(tps)
    kp = KafkaProducer(bootstrap_servers=only, acks="all", retries=0)
    with pytest.raises(NotEnoughReplicasError):
        kp.send(TOPIC, value=b"must-not-appear", partition=0).get(timeout=30)
    kp.close()
    assert c.end_offsets(tps) == before  # nothing past the high watermark a consumer could see
    c.close()


def test_zookeeper_unreachable_exits_3(tmp_path):
    from tests.broker_process import free_port
    b = _broker(tmp_path / "nozk", f"127.0.0.1:{free_port()}", 7)
    b.overrides["zookeeper.connection.timeout.ms"] = "2000"
    args = [os.sys.executable, "-m", "appliance.cli.main", "serve"]
    for k, v in b.overrides.items():
        args += ["--override", f"{k}={v}"]
    with open(b.log_path, "ab") as log:
        proc = subprocess.run(args, stdout=log, stderr=subprocess.STDOUT, timeout=120, start_new_session=True)
    assert proc.returncode == 3, b.log()
    assert "ZooKeeper" in b.log() or "zookeeper" in b.log(), b.log()


def _fetch_as_replica(bootstrap: str, replica_id: int, partition: int):
    import socket

    from appliance.protocol import NEED_DATA, ClientConnection
    from appliance.protocol.messages import Fetch
    host, port = bootstrap.split(":")
    conn = ClientConnection(client_id="test")
    _, frame = conn.send_request(Fetch.API_KEY, 4, {
        "replica_id": replica_id, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
        "topics": [{"topic": TOPIC, "partitions": [
            {"partition": partition, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]})
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(frame)
        while (ev := conn.next_event()) is NEED_DATA:
            conn.receive_data(s.recv(1 << 20))
    return ev.body.responses[0].partitions[0]
