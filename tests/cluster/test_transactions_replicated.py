"""Transactions replicated (KIP-98, the log side): on three real brokers, RF 3, a transaction
aborted and one committed through WriteTxnMarkers sent to the leader (answered once the high
watermark passed the marker); the leader SIGKILLed; a read_committed consumer on the new leader
still skips the aborted records, because the followers' producer state and .txnindex were
built from the replicated batches and markers."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from appliance.errors import ErrorCode
from tests.broker.txn_wire import TxnDriver, list_latest, values_confluent
from tests.broker.wire import RawConnection
from tests.cluster.harness import (
    cluster_broker,
    cluster_metadata,
    kill_brokers,
    start_brokers,
    wait_for,
    wait_joined,
)

TOPIC = "txn-replicated"


def _leader(boot: str) -> int:
    """The partition's leader in ``boot``'s metadata; -1 while that broker does not know the
    topic yet (UpdateMetadata still on its way)."""
    topic = cluster_metadata(boot).topics.get(TOPIC)
    return topic.partitions[0].leader if topic is not None else -1


def test_aborted_records_stay_hidden_after_the_leader_dies(tmp_path, zk_connect):
    brokers = [cluster_broker(Path(tmp_path) / f"b{i}", zk_connect, i, overrides={
        "offsets.topic.num.partitions": "1", "replica.lag.time.max.ms": "10000"}) for i in range(3)]
    start_brokers(brokers)
    try:
        wait_joined(brokers, 3)
        admin = AdminClient({"bootstrap.servers": brokers[0].bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 3, config={"min.insync.replicas": "2"})])[TOPIC].result(30)
        wait_for(lambda: _leader(brokers[0].bootstrap) >= 0, 30, "a leader")
        leader = brokers[_leader(brokers[0].bootstrap)]
        with RawConnection(leader.port) as conn:
            plain, t = TxnDriver(conn, TOPIC), TxnDriver(conn, TOPIC)
            assert plain.send([b"p0"], transactional=False) == (0, 0)
            assert t.send([b"a0", b"a1"]) == (0, 1)
            assert t.end(commit=False) == 0               # 3: answered once replicated
            assert t.send([b"c0"]) == (0, 4)
            assert t.end(commit=True) == 0                # 5
            assert plain.send([b"p1"], transactional=False) == (0, 6)
            assert t.send([b"o0"]) == (0, 7)              # left open: the LSO stays at 7
            assert list_latest(conn, TOPIC, committed=True) == 7
        follower = next(b for b in brokers if b is not leader)
        with RawConnection(follower.port) as conn:        # only the leader writes markers
            t.conn = conn
            assert t.end(commit=False) == ErrorCode.NOT_LEADER_OR_FOLLOWER
        leader.kill()
        rest = [b for b in brokers if b is not leader]
        boot = rest[0].bootstrap
        wait_for(lambda: _leader(boot) not in (-1, brokers.index(leader)), 60, "a new leader")
        new = brokers[_leader(boot)]
        # the new leader's own txn index holds the aborted transaction
        d = Path(new.log_dirs[0]) / f"{TOPIC}-0"
        assert list(d.glob("*.txnindex"))
        with RawConnection(new.port) as conn:
            wait_for(lambda: list_latest(conn, TOPIC, committed=False) == 8, 30, "the new HW")
            assert list_latest(conn, TOPIC, committed=True) == 7
        assert values_confluent(boot, TOPIC, committed=True) == [b"p0", b"c0", b"p1"]
        assert values_confluent(boot, TOPIC, committed=False) == [b"p0", b"a0", b"a1", b"c0", b"p1", b"o0"]
    finally:
        kill_brokers(brokers)
