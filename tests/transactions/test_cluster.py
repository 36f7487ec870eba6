"""The transaction coordinator in a 3-broker cluster (real ZooKeeper, real brokers):
FindCoordinator key_type=1 names the same broker through every broker, that broker is the leader
of the id's ``__transaction_state`` partition (RF 3), every transaction API sent to another
broker answers NOT_COORDINATOR (the client looks again) and to the leader is served, fencing
works, and confluent-kafka's transactional producer bootstrapped from the whole cluster
initialises, commits and aborts (EndTxn answered)."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from appliance.coordinator.routing import TXN_TOPIC, txn_partition_for
from tests.broker.wire import RawConnection, metadata_body
from tests.cluster.harness import cluster_broker, start_brokers, wait_for, wait_joined
from tests.transactions.helpers import add_partitions, end_txn, init_pid

TOPIC = "txn-cluster"
TXN_PARTITIONS = 5
NOT_COORDINATOR = 16


@pytest.fixture(scope="module")
def cluster(zk_server, tmp_path_factory):
    connect = f"{zk_server.connect}/x{uuid.uuid4().hex[:10]}"
    root = tmp_path_factory.mktemp("txncluster")
    brokers = {i: cluster_broker(root / f"b{i}", connect, i, overrides={
        "transaction.state.log.num.partitions": str(TXN_PARTITIONS),
        "offsets.topic.num.partitions": "3"}) for i in range(3)}
    try:
        start_brokers(brokers.values())
        wait_joined(brokers.values(), 3)
        boot = ",".join(b.bootstrap for b in brokers.values())
        admin = AdminClient({"bootstrap.servers": boot})
        for f in admin.create_topics([NewTopic(TOPIC, 3, 3)]).values():
            f.result(60)
        yield {"brokers": brokers, "boot": boot}
    finally:
        for b in brokers.values():
            try:
                b.stop()
            except Exception:
                b.kill()


def _coordinator_through_each(cluster, tid: str) -> set[int]:
    """The node FindCoordinator(key_type=1) names, asked of every broker (retried while the
    topic is made and its leaders elected)."""
    found = set()
    for b in cluster["brokers"].values():
        c = RawConnection(b.port)
        try:
            r = wait_for(lambda c=c: (r := c.request(10, 3, {"key": tid, "key_type": 1})).error_code == 0 and r,
                         30, "a transaction coordinator")
            found.add(r.node_id)
        finally:
            c.sock.close()
    return found


def _leader_of(cluster, tid: str) -> int:
    c = RawConnection(cluster["brokers"][0].port)
    try:
        md = c.request(3, 9, metadata_body([TXN_TOPIC]))
    finally:
        c.sock.close()
    (topic,) = md.topics
    assert topic.is_internal and len(topic.partitions) == TXN_PARTITIONS
    part = next(p for p in topic.partitions if p.partition_index == txn_partition_for(tid, TXN_PARTITIONS))
    assert len(part.replica_nodes) == 3
    return part.leader_id


def test_coordinator_is_the_partitions_leader_through_every_broker(cluster):
    tids = [f"cl-{i}" for i in range(6)]
    for tid in tids:
        (node,) = _coordinator_through_each(cluster, tid)
        assert node == _leader_of(cluster, tid)


def test_requests_through_every_broker(cluster):
    tid = "cl-route"
    (node,) = _coordinator_through_each(cluster, tid)
    for bid, b in cluster["brokers"].items():
        c = RawConnection(b.port)
        try:
            r = init_pid(c, tid)
            if bid != node:
                assert r.error_code == NOT_COORDINATOR
                assert add_partitions(c, tid, 0, 0, {TOPIC: [0]}) == {(TOPIC, 0): NOT_COORDINATOR}
                assert end_txn(c, tid, 0, 0, True) == NOT_COORDINATOR
        finally:
            c.sock.close()
    c = RawConnection(cluster["brokers"][node].port)
    try:
        first = init_pid(c, tid)
        assert first.error_code == 0
        second = init_pid(c, tid)
        assert (second.producer_id, second.producer_epoch) == (first.producer_id, first.producer_epoch + 1)
        assert add_partitions(c, tid, first.producer_id, first.producer_epoch, {TOPIC: [0]}) == {(TOPIC, 0): 90}
        assert add_partitions(c, tid, second.producer_id, second.producer_epoch, {TOPIC: [0, 1, 2]}) == {
            (TOPIC, 0): 0, (TOPIC, 1): 0, (TOPIC, 2): 0}
        assert add_partitions(c, tid, second.producer_id, second.producer_epoch, {"nope": [0]}) == {("nope", 0): 3}
    finally:
        c.sock.close()


def test_confluent_producer_in_the_cluster(cluster):
    first = Producer({"bootstrap.servers": cluster["boot"], "transactional.id": "cl-cf"})
    first.init_transactions(30)
    first.begin_transaction()
    first.produce(TOPIC, b"committed", partition=1)
    first.commit_transaction(30)
    # the decision replicated, its markers written by the leaders: the next instance initialises
    (node,) = _coordinator_through_each(cluster, "cl-cf")
    coordinator = cluster["brokers"][node]

    def markers_sent() -> bool:
        c = RawConnection(coordinator.port)
        try:
            return init_pid(c, "cl-cf", retry_concurrent=False).error_code == 0
        finally:
            c.sock.close()

    wait_for(markers_sent, 30, "the commit's markers sent", step=0.5)
    other = Producer({"bootstrap.servers": cluster["boot"], "transactional.id": "cl-cf-abort"})
    other.init_transactions(30)
    other.begin_transaction()
    other.produce(TOPIC, b"aborted", partition=2)
    other.abort_transaction(30)
    # a new instance of an id fences the old one
    zombie = Producer({"bootstrap.servers": cluster["boot"], "transactional.id": "cl-fence"})
    zombie.init_transactions(30)
    fresh = Producer({"bootstrap.servers": cluster["boot"], "transactional.id": "cl-fence"})
    fresh.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(TOPIC, b"zombie", partition=0)
    with pytest.raises(KafkaException) as info:
        zombie.commit_transaction(30)
    assert info.value.args[0].code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                         KafkaError.INVALID_PRODUCER_EPOCH)


def test_txn_offset_commit_through_every_broker(cluster):
    """TxnOffsetCommit goes to the group's coordinator; any other broker answers NOT_COORDINATOR."""
    group = "cl-eos-group"
    coordinators = set()
    for b in cluster["brokers"].values():
        c = RawConnection(b.port)
        try:
            r = wait_for(lambda c=c: (r := c.request(10, 3, {"key": group, "key_type": 0})).error_code == 0 and r,
                         30, "a group coordinator")
            coordinators.add(r.node_id)
        finally:
            c.sock.close()
    (node,) = coordinators
    body = {"transactional_id": "cl-eos", "group_id": group, "producer_id": 9, "producer_epoch": 0,
            "generation_id": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 5,
                                                       "committed_leader_epoch": -1, "committed_metadata": ""}]}]}
    for bid, b in cluster["brokers"].items():
        c = RawConnection(b.port)
        try:
            r = c.request(28, 3, body)
            code = r.topics[0].partitions[0].error_code
            assert code == (0 if bid == node else NOT_COORDINATOR), (bid, node, code)
        finally:
            c.sock.close()


def test_list_and_describe_through_the_cluster(cluster):
    """ListTransactions: each broker answers for the ids whose coordinator it is; the CLI asks
    every broker and prints them all, each with its coordinator; describe finds the coordinator
    whichever broker it bootstraps from."""
    tids = [f"cl-list-{i}" for i in range(6)]
    for tid in tids:
        (node,) = _coordinator_through_each(cluster, tid)
        c = RawConnection(cluster["brokers"][node].port)
        try:
            assert init_pid(c, tid).error_code == 0
        finally:
            c.sock.close()
    leaders = {tid: _leader_of(cluster, tid) for tid in tids}
    assert len(set(leaders.values())) > 1  # the ids are spread: the aggregation is tested
    for bid, b in cluster["brokers"].items():
        c = RawConnection(b.port)
        try:
            r = c.request(66, 1, {"state_filters": ["Empty"], "producer_id_filters": [], "duration_filter": -1})
        finally:
            c.sock.close()
        assert r.error_code == 0
        here = {s.transactional_id for s in r.transaction_states} & set(tids)
        assert here == {t for t, node in leaders.items() if node == bid}
    for b in cluster["brokers"].values():
        out = subprocess.run([sys.executable, "-m", "appliance.cli.main", "transactions", "--bootstrap-server",
                              b.bootstrap, "--list"], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        rows = {cells[0]: cells for cells in (line.split() for line in out.stdout.splitlines()[1:])}
        assert {tid: int(rows[tid][1]) for tid in tids} == leaders
        assert all(rows[tid][3] == "Empty" for tid in tids)
    out = subprocess.run([sys.executable, "-m", "appliance.cli.main", "transactions", "--bootstrap-server",
                          cluster["brokers"][(leaders[tids[0]] + 1) % 3].bootstrap, "describe",
                          "--transactional-id", tids[0]], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    cells = out.stdout.splitlines()[1].split()
    assert cells[0] == str(leaders[tids[0]]) and cells[1] == tids[0] and cells[4] == "Empty"


def test_coordinator_moves_with_the_leadership(cluster):
    """SIGKILL the coordinator's broker: the new leader of the id's partition loads its state from
    the replicated log, and the next instance gets the next epoch of the same producer id."""
    tid = "cl-failover"
    (node,) = _coordinator_through_each(cluster, tid)
    c = RawConnection(cluster["brokers"][node].port)
    try:
        first = init_pid(c, tid)
        assert first.error_code == 0
    finally:
        c.sock.close()
    victim = cluster["brokers"][node]
    victim.kill()
    try:
        others = [b for bid, b in cluster["brokers"].items() if bid != node]

        def served():
            for b in others:
                conn = RawConnection(b.port)
                try:
                    r = conn.request(10, 3, {"key": tid, "key_type": 1})
                    if r.error_code or r.node_id == node:
                        return None
                    if r.port != b.port:
                        continue
                    r = init_pid(conn, tid, retry_concurrent=False)
                    return r if r.error_code == 0 else None
                finally:
                    conn.sock.close()
            return None

        r = wait_for(served, 90, "the transaction coordinator on a new leader", step=0.5)
        assert (r.producer_id, r.producer_epoch) == (first.producer_id, first.producer_epoch + 1)
    finally:
        victim.start()
        wait_joined(cluster["brokers"].values(), 3)
