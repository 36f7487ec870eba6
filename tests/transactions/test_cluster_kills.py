"""Transactions across broker deaths in a 3-broker cluster (real ZooKeeper, real brokers),
confluent-kafka's transactional producer bootstrapped from the whole cluster, topics of RF 2
and RF 3 (min.insync.replicas 2), readers through every broker.

- The transaction coordinator's broker SIGKILLed mid-transaction: the producer's commit either
  completes on the new coordinator (the leader that takes over the id's ``__transaction_state``
  partition) or fails, and then an abort or a new instance's init_transactions ends the
  transaction. Either way the transaction is all or nothing, the LSO reaches the high watermark
  on every partition, read_committed readers never see what was aborted, and nothing committed
  before is lost.
- The same with the producer gone too: a new instance's init_transactions, on the new
  coordinator, aborts the open transaction.
- A partition leader stopped (SIGSTOP) between the commit and its marker: EndTxn is answered once
  PrepareCommit is replicated (as Kafka's coordinator; the markers follow), so the commit returns
  while the coordinator still owes the stopped leader its marker (a new instance of the id is
  answered CONCURRENT_TRANSACTIONS). The leader is then SIGKILLed, a new one elected, the
  coordinator's marker sender finds it, the marker lands there, the LSO advances and every
  committed record is read once.

``__transaction_state`` has RF 2 (min.isr 1) here, so that the stopped leader can be a broker
that holds no replica of the coordinator's partition: the EndTxn is then not held until the
stopped broker leaves that partition's ISR, and the window between the commit and the marker is
the stopped broker's whole ZooKeeper session.
"""

from __future__ import annotations

import os
import signal
import time
import uuid

import pytest
from confluent_kafka import Consumer, ElectionType, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from appliance.coordinator.routing import TXN_TOPIC, txn_partition_for
from appliance.errors import ErrorCode
from tests.broker.txn_wire import list_latest
from tests.broker.wire import RawConnection, metadata_body
from tests.cluster.harness import cluster_broker, kill_brokers, start_brokers, wait_for, wait_joined
from tests.transactions.helpers import init_pid

PARTITIONS = 3
TXN_PARTITIONS = 3
TIMEOUT_S = 60


@pytest.fixture(scope="module")
def cluster(zk_server, tmp_path_factory):
    connect = f"{zk_server.connect}/k{uuid.uuid4().hex[:10]}"
    root = tmp_path_factory.mktemp("txnkills")
    brokers = {i: cluster_broker(root / f"b{i}", connect, i, overrides={
        "transaction.state.log.num.partitions": str(TXN_PARTITIONS),
        "transaction.state.log.replication.factor": "2", "transaction.state.log.min.isr": "1",
        "offsets.topic.num.partitions": "3"}) for i in range(3)}
    try:
        start_brokers(brokers.values())
        wait_joined(brokers.values(), 3)
        yield brokers
    finally:
        kill_brokers(brokers.values())
        for b in brokers.values():
            b.release_shm()


def _boot(brokers) -> str:
    return ",".join(b.bootstrap for b in brokers.values())


def _topics(brokers, name: str) -> dict[str, int]:
    """Two topics, RF 2 and RF 3 (min.insync.replicas 2), of PARTITIONS partitions: name -> RF."""
    topics = {f"{name}-rf2": 2, f"{name}-rf3": 3}
    admin = AdminClient({"bootstrap.servers": _boot(brokers)})
    news = [NewTopic(t, PARTITIONS, rf, config={"min.insync.replicas": "2"} if rf == 3 else {})
            for t, rf in topics.items()]
    for f in admin.create_topics(news).values():
        f.result(60)
    for b in brokers.values():  # every broker knows every partition's leader
        wait_for(lambda b=b: all(leader >= 0 for t in topics for leader in _leaders(b, t).values()),
                 60, f"leaders of {sorted(topics)} known to {b.bootstrap}", step=0.2)
    return topics


def _metadata(b, topic: str):
    with RawConnection(b.port) as c:
        md = c.request(3, 9, metadata_body([topic]))
    return md


def _leaders(b, topic: str) -> dict[int, int]:
    """partition -> leader in broker ``b``'s metadata (-1: none, or the topic not known yet)."""
    (t,) = _metadata(b, topic).topics
    if t.error_code:
        return {p: -1 for p in range(PARTITIONS)}
    return {p.partition_index: p.leader_id for p in t.partitions}


def _whole(brokers) -> None:
    """Wait until every partition of the cluster has all its replicas in its ISR, as each broker
    says: a broker restarted by a test has caught up everywhere, so the next test's kill leaves
    every ISR at least min.insync.replicas (a partition whose ISR is the killed broker and one
    still catching up would refuse acks=all writes, or go offline)."""
    def whole() -> bool:
        for b in brokers.values():
            with RawConnection(b.port) as c:
                md = c.request(3, 9, metadata_body(None))
            if any(set(p.isr_nodes) != set(p.replica_nodes) or p.leader_id < 0
                   for t in md.topics for p in t.partitions):
                return False
        return True
    wait_for(whole, TIMEOUT_S, "every replica in its ISR", step=0.3)


def _coordinator(brokers, tid: str) -> int:
    """The node every broker names as ``tid``'s transaction coordinator (FindCoordinator
    key_type=1 asked of each), retried while the topic is made and its leaders elected."""
    found = set()
    for b in brokers.values():
        with RawConnection(b.port) as c:
            r = wait_for(lambda c=c: (r := c.request(10, 3, {"key": tid, "key_type": 1})).error_code == 0 and r,
                         60, "a transaction coordinator", step=0.2)
            found.add(r.node_id)
    (node,) = found
    return node


def _txn_replicas(b, tid: str) -> list[int]:
    (t,) = _metadata(b, TXN_TOPIC).topics
    p = next(p for p in t.partitions if p.partition_index == txn_partition_for(tid, TXN_PARTITIONS))
    return list(p.replica_nodes)


def _producer(brokers, tid: str, **extra) -> Producer:
    p = Producer({"bootstrap.servers": _boot(brokers), "transactional.id": tid, "linger.ms": 5,
                  "transaction.timeout.ms": 60000, **extra})
    p.init_transactions(TIMEOUT_S)
    return p


def _produce(p: Producer, topics, tag: str, per_partition: int = 20,
             only: dict[str, list[int]] | None = None) -> set[bytes]:
    """``per_partition`` records to every partition of ``topics`` (or those ``only`` names),
    flushed; their values."""
    values = set()
    for t in topics:
        for part in (only or {}).get(t, range(PARTITIONS)):
            for i in range(per_partition):
                v = f"{tag}-{t}-{part}-{i}".encode()
                p.produce(t, v, partition=part)
                values.add(v)
    assert p.flush(TIMEOUT_S) == 0
    return values


def _stable(live, topics) -> None:
    """Wait until the LSO equals the high watermark on every partition of ``topics``, each asked
    of its leader as the live brokers' metadata names it: no transaction is left undecided."""
    def settled() -> bool:
        for t in topics:
            leaders = _leaders(live[0], t)
            for part, leader in leaders.items():
                b = next((b for b in live if int(b.overrides["broker.id"]) == leader), None)
                if b is None:
                    return False
                try:
                    with RawConnection(b.port) as c:
                        if list_latest(c, t, True, part) != list_latest(c, t, False, part):
                            return False
                except (AssertionError, OSError):  # not the leader (any more), not serving yet
                    return False
        return True
    wait_for(settled, TIMEOUT_S, "the LSO at the high watermark everywhere", step=0.3)


def _read(b, topics, committed: bool, expect: int) -> list[bytes]:
    """Every value of ``topics`` read from the start by a consumer bootstrapped from broker
    ``b`` alone: until ``expect`` came and then 1 s more, or nothing for 3 s."""
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": f"r-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 100,
                  "isolation.level": "read_committed" if committed else "read_uncommitted"})
    out: list[bytes] = []
    try:
        c.assign([TopicPartition(t, p, 0) for t in topics for p in range(PARTITIONS)])
        last, deadline = time.monotonic(), time.monotonic() + TIMEOUT_S
        while time.monotonic() - last < (1.0 if len(out) >= expect else 3.0) and time.monotonic() < deadline:
            for m in c.consume(1000, 0.3):
                if m.error() is None:
                    out.append(m.value())
                    last = time.monotonic()
    finally:
        c.close()
    return out


def _check_reads(live, topics, committed: set[bytes], aborted: set[bytes]) -> None:
    """Through every live broker: read_committed sees ``committed`` once each and nothing of
    ``aborted``; read_uncommitted sees both (what was aborted was written)."""
    for b in live:
        got = _read(b, topics, True, len(committed))
        assert sorted(got) == sorted(committed), (b.bootstrap, len(got), len(committed),
                                                  len(set(got) & aborted))
    everything = _read(live[0], topics, False, len(committed) + len(aborted))
    assert set(everything) == committed | aborted


def _same_partition(tid: str, prefix: str) -> str:
    """Another transactional id of ``tid``'s ``__transaction_state`` partition (the same
    coordinator, the same replicas)."""
    return next(f"{prefix}-{i}" for i in range(1000)
                if txn_partition_for(f"{prefix}-{i}", TXN_PARTITIONS) == txn_partition_for(tid, TXN_PARTITIONS))


def _transactions_elsewhere(b, avoid: int, topics, p: Producer, count: int,
                            tag: str = "elsewhere") -> tuple[float, set[bytes]]:
    """Seconds ``p`` takes for ``count`` transactions on the partitions of which broker ``avoid``
    holds no replica (as broker ``b`` knows them: acks=all would wait for it); the values
    committed."""
    targets = [(t, part.partition_index) for t in topics for part in _metadata(b, t).topics[0].partitions
               if avoid not in part.replica_nodes]
    assert targets
    values = set()
    start = time.monotonic()
    for i in range(count):
        p.begin_transaction()
        for t, part in targets:
            v = f"{tag}-{t}-{part}-{i}".encode()
            p.produce(t, v, partition=part)
            values.add(v)
        p.commit_transaction(TIMEOUT_S)
    return time.monotonic() - start, values


def _coordinator_killed_mid_transaction(cluster, tid: str):
    """Topics named after ``tid``, a committed transaction, then one written but not decided
    when the coordinator's broker is SIGKILLed: (topics, producer, coordinator id, the
    committed values, the undecided values, the killed broker, the live brokers)."""
    topics = _topics(cluster, tid)
    node = _coordinator(cluster, tid)
    p = _producer(cluster, tid)
    p.begin_transaction()
    before = _produce(p, topics, "before")
    p.commit_transaction(TIMEOUT_S)
    p.begin_transaction()
    mid = _produce(p, topics, "mid")  # written, not decided
    victim = cluster[node]
    victim.kill()
    return topics, p, node, before, mid, victim, [b for i, b in cluster.items() if i != node]


def test_coordinator_killed_mid_transaction(cluster):
    tid = "coord-kill"
    topics, p, node, before, mid, victim, live = _coordinator_killed_mid_transaction(cluster, tid)
    try:
        outcome = None
        try:
            p.commit_transaction(TIMEOUT_S)
            outcome = "committed"
        except KafkaException as e:
            err = e.args[0]
            if err.txn_requires_abort():
                p.abort_transaction(TIMEOUT_S)
                outcome = "aborted"
            else:  # fatal, or out of time: a new instance ends it (commit if decided, else abort)
                p = _producer(cluster, tid)
        # the id works on: a new transaction commits through the new coordinator
        p.begin_transaction()
        after = _produce(p, topics, "after", per_partition=5)
        p.commit_transaction(TIMEOUT_S)
        _stable(live, topics)
        got = set(_read(live[0], topics, True, len(before) + len(after)))
        mid_committed = mid <= got
        assert mid_committed or not (mid & got), "a transaction half committed"
        if outcome is not None:
            assert mid_committed == (outcome == "committed"), outcome
        committed = before | after | (mid if mid_committed else set())
        print(f"coordinator {node} killed mid-transaction: the client said {outcome or 'nothing sure'}, "
              f"the transaction {'committed' if mid_committed else 'aborted'}")
        _check_reads(live, topics, committed, set() if mid_committed else mid)
    finally:
        victim.start()
        wait_joined(cluster.values(), 3)
        _whole(cluster)
    _stable(list(cluster.values()), topics)
    assert sorted(_read(victim, topics, True, len(committed))) == sorted(committed)


def test_coordinator_killed_then_a_new_instance_takes_over(cluster):
    """The coordinator's broker SIGKILLed with a transaction open, and the producer gone with it
    (a new instance starts elsewhere): its init_transactions, served by the new coordinator,
    aborts the open transaction; nothing of it is read committed, the LSO reaches the HW."""
    tid = "coord-new"
    topics, p, _, before, mid, victim, live = _coordinator_killed_mid_transaction(cluster, tid)
    try:
        fresh = _producer(cluster, tid)  # fences p, aborts its transaction
        fresh.begin_transaction()
        after = _produce(fresh, topics, "after", per_partition=5)
        fresh.commit_transaction(TIMEOUT_S)
        _stable(live, topics)
        _check_reads(live, topics, before | after, mid)
    finally:
        victim.start()
        wait_joined(cluster.values(), 3)
        _whole(cluster)


def test_leader_dies_between_the_commit_and_its_marker(cluster):
    topics = _topics(cluster, "leader-kill")
    tid = "leader-kill"
    node = _coordinator(cluster, tid)
    replicas = _txn_replicas(cluster[node], tid)
    (victim_id,) = set(cluster) - set(replicas)  # holds none of the coordinator's partition
    victim = cluster[victim_id]
    led = {t: [part for part, leader in _leaders(cluster[node], t).items() if leader == victim_id] for t in topics}
    assert all(led.values()), led  # new topics: each broker leads one partition of each
    other = _producer(cluster, _same_partition(tid, "leader-kill-other"))
    # before the stop: the other producer learns the topics' metadata (librdkafka asks a broker
    # it is connected to, and one that is stopped holds the question for socket.timeout.ms, 60 s)
    _, warm = _transactions_elsewhere(cluster[node], victim_id, topics, other, 1, tag="warm")
    p = _producer(cluster, tid)
    p.begin_transaction()
    # to the stopped broker's partitions only: the markers it owes are the transaction's only
    # wait (a marker to a partition it follows would wait for it to leave the ISR, in Kafka too)
    values = warm | _produce(p, topics, "txn", only=led)
    os.killpg(victim.proc.pid, signal.SIGSTOP)
    stopped = time.monotonic()
    live = [b for i, b in cluster.items() if i != victim_id]
    try:
        p.commit_transaction(TIMEOUT_S)  # answered once PrepareCommit is replicated
        # the window is real: the decision is made and the stopped leader still owes its marker
        with RawConnection(cluster[node].port) as c:
            assert init_pid(c, tid, retry_concurrent=False).error_code == ErrorCode.CONCURRENT_TRANSACTIONS
        for t, parts in led.items():  # the stopped broker still leads (its session lives on)
            assert all(_leaders(cluster[node], t)[part] == victim_id for part in parts)
        assert time.monotonic() - stopped < 5, "the window closed before the SIGKILL"
        print(f"commit answered {time.monotonic() - stopped:.2f} s after leader {victim_id} stopped, "
              "its marker owed")
        # another id of the same coordinator, on partitions the stopped broker holds no replica
        # of, is not held up by the marker owed to it (each leader's markers go their own way)
        spent, elsewhere = _transactions_elsewhere(cluster[node], victim_id, topics, other, 3)
        values |= elsewhere
        print(f"3 transactions of another id of coordinator {node}: {spent:.2f} s")
        assert spent < 4.0, f"another id's transactions waited {spent:.1f} s behind the stopped leader"
        victim.kill()
        wait_for(lambda: all(_leaders(live[0], t)[part] not in (-1, victim_id)
                             for t, parts in led.items() for part in parts), TIMEOUT_S, "new leaders", step=0.2)
        _stable(live, topics)
        _check_reads(live, topics, values, set())
        # the transaction is complete at the coordinator: the same producer goes on
        p.begin_transaction()
        values |= _produce(p, topics, "next", per_partition=5)
        p.commit_transaction(TIMEOUT_S)
        _stable(live, topics)
    finally:
        if victim.proc.poll() is None:
            victim.kill()
        victim.start()
        wait_joined(cluster.values(), 3)
        _whole(cluster)
    _stable(list(cluster.values()), topics)
    _check_reads(list(cluster.values()), topics, values, set())


def test_a_restarted_broker_routes_ids_by_the_clusters_partition_count(cluster):
    """A broker restarted without a replica of the highest ``__transaction_state`` partition
    counts too few partitions from its own log dirs; it routes ids by the controller's count:
    an id of a partition it leads, which the local count would send elsewhere, is served."""
    _coordinator(cluster, "count")  # the topic made (the first lookup makes it)
    (topic,) = _metadata(cluster[0], TXN_TOPIC).topics
    replicas = {p.partition_index: list(p.replica_nodes) for p in topic.partitions}
    top = max(replicas)
    (bid,) = set(cluster) - set(replicas[top])
    preferred = [p for p, rs in replicas.items() if rs[0] == bid]
    assert preferred, replicas
    local = max(p for p, rs in replicas.items() if bid in rs) + 1  # what its dirs count
    part = preferred[0]
    tid = next(t for t in (f"count-{i}" for i in range(1000))
               if txn_partition_for(t, TXN_PARTITIONS) == part and txn_partition_for(t, local) != part)
    b = cluster[bid]
    b.kill()
    b.start()
    wait_joined(cluster.values(), 3)
    _whole(cluster)
    admin = AdminClient({"bootstrap.servers": _boot(cluster)})
    tp = TopicPartition(TXN_TOPIC, part)
    wait_for(lambda: _elect(admin, tp) and _leaders(b, TXN_TOPIC)[part] == bid, TIMEOUT_S,
             f"broker {bid} leading {TXN_TOPIC}-{part}", step=0.5)
    with RawConnection(b.port) as c:
        r = init_pid(c, tid)
        assert r.error_code == 0, (tid, part, local, r)


def _elect(admin: AdminClient, tp: TopicPartition) -> bool:
    """A preferred leader election of ``tp`` asked (True; its error, if any, is retried)."""
    try:
        admin.elect_leaders(ElectionType.PREFERRED, [tp]).result(30)
    except Exception:  # ELECTION_NOT_NEEDED (already there) or not yet possible: look again
        pass
    return True
