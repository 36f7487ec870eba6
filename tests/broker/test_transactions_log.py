"""The partition leader's side of transactions on a real broker (KIP-98): transactional batches
and WriteTxnMarkers sent on the wire (tests/broker/txn_wire.py), read back by real clients with
read_committed and read_uncommitted, across a SIGKILL and restarts."""

from __future__ import annotations

import threading
import time

from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from appliance.errors import ErrorCode
from tests.broker.clients import create_topic
from tests.broker.txn_wire import (
    TxnDriver,
    list_latest,
    values_confluent,
    values_kafka_python,
    values_kcat,
)
from tests.broker.wire import RawConnection, fetch_body

TOPIC = "txn"
COMMITTED_SO_FAR = [b"p0", b"p1", b"c0", b"c1", b"p2"]
EVERYTHING = [b"p0", b"p1", b"a0", b"a1", b"c0", b"c1", b"p2", b"o0", b"p3"]


def _scene(conn: RawConnection) -> TxnDriver:
    """p0 p1 | a0 a1 ABORT | c0 c1 COMMIT | p2 | o0 (left open) | p3: offsets 0-1, 2-4, 5-7,
    8, 9, 10. The open transaction holds the LSO at 9."""
    plain = TxnDriver(conn, TOPIC)
    t = TxnDriver(conn, TOPIC)
    assert plain.send([b"p0", b"p1"], transactional=False) == (0, 0)
    assert t.send([b"a0", b"a1"]) == (0, 2)
    assert t.end(commit=False) == 0
    assert t.send([b"c0", b"c1"]) == (0, 5)
    assert t.end(commit=True) == 0
    assert plain.send([b"p2"], transactional=False) == (0, 8)
    assert t.send([b"o0"]) == (0, 9)
    assert plain.send([b"p3"], transactional=False) == (0, 10)
    return t


def test_read_committed_clients_and_the_lso(broker):
    create_topic(broker.bootstrap, TOPIC)
    with RawConnection(broker.port) as conn:
        t = _scene(conn)
        assert list_latest(conn, TOPIC, committed=True) == 9
        assert list_latest(conn, TOPIC, committed=False) == 11
        # read_uncommitted: the records to the HW, the real LSO beside it, no aborted list
        p = conn.request(1, 11, fetch_body(TOPIC, 0, 0)).responses[0].partitions[0]
        assert (p.high_watermark, p.last_stable_offset, p.aborted_transactions) == (11, 9, None)
        committed = {**fetch_body(TOPIC, 0, 0), "isolation_level": 1}
        p = conn.request(1, 11, committed).responses[0].partitions[0]
        assert (p.high_watermark, p.last_stable_offset) == (11, 9)
        assert [(a.producer_id, a.first_offset) for a in p.aborted_transactions] == [(t.pid, 2)]
        bs = broker.bootstrap
        # stopped at the LSO while o0's transaction is open; the abort never shows
        assert values_confluent(bs, TOPIC, committed=True) == COMMITTED_SO_FAR
        assert values_kafka_python(bs, TOPIC, committed=True) == COMMITTED_SO_FAR
        assert values_kcat(bs, TOPIC, committed=True) == COMMITTED_SO_FAR
        assert values_confluent(bs, TOPIC, committed=False) == EVERYTHING
        assert values_kcat(bs, TOPIC, committed=False) == EVERYTHING
        assert t.end(commit=False) == 0                    # o0 aborted: the LSO moves to the end
        assert list_latest(conn, TOPIC, committed=True) == 12
        done = [*COMMITTED_SO_FAR, b"p3"]
        assert values_confluent(bs, TOPIC, committed=True) == done
        assert values_kafka_python(bs, TOPIC, committed=True) == done
        assert values_kcat(bs, TOPIC, committed=True) == done


def test_open_transaction_survives_sigkill_and_the_index_restarts(broker):
    create_topic(broker.bootstrap, TOPIC)
    with RawConnection(broker.port) as conn:
        t = _scene(conn)
    broker.kill()
    broker.release_shm()
    broker.start()
    with RawConnection(broker.port) as conn:
        assert list_latest(conn, TOPIC, committed=True) == 9  # still held at o0
        t.conn = conn
        assert t.end(commit=False) == 0
        assert list_latest(conn, TOPIC, committed=True) == 12
    broker.kill()                                          # again: recovery keeps the .txnindex
    broker.release_shm()
    broker.start()
    assert values_confluent(broker.bootstrap, TOPIC, committed=True) == [*COMMITTED_SO_FAR, b"p3"]


def test_bad_input(broker):
    create_topic(broker.bootstrap, TOPIC)
    with RawConnection(broker.port) as conn:
        t = TxnDriver(conn, TOPIC)
        assert t.end(commit=True, topic="nope") == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert t.end(commit=True, partition=5) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert t.send([b"x"]) == (0, 0)
        assert t.end(commit=False, epoch=t.epoch - 1) == ErrorCode.INVALID_PRODUCER_EPOCH
        assert list_latest(conn, TOPIC, committed=False) == 1  # no marker written
        # a transactional batch without a producer id
        anon = TxnDriver.__new__(TxnDriver)
        anon.conn, anon.topic, anon.partition, anon.pid, anon.epoch, anon.seq = conn, TOPIC, 0, -1, -1, -1
        assert anon.send([b"y"])[0] == ErrorCode.INVALID_RECORD
        assert t.end(commit=False) == 0
        assert list_latest(conn, TOPIC, committed=True) == 2


def test_read_committed_long_poll_wakes_when_the_lso_moves(broker):
    create_topic(broker.bootstrap, TOPIC)
    with RawConnection(broker.port) as conn, RawConnection(broker.port) as poller:
        t = _scene(conn)
        r = conn.request(61, 0, {"topics": [{"name": TOPIC, "partition_indexes": [0]}]})
        producers = {a.producer_id: a for a in r.topics[0].partitions[0].active_producers}
        assert producers[t.pid].current_txn_start_offset == 9  # DescribeProducers: o0's
        assert producers[t.pid].coordinator_epoch == 0
        body = fetch_body(TOPIC, 0, 9, max_wait_ms=8000)
        body["isolation_level"] = 1
        answer: list = []
        thread = threading.Thread(target=lambda: answer.append(poller.request(1, 11, body)))
        started = time.monotonic()
        thread.start()
        time.sleep(1.0)
        assert not answer                                  # waiting at the LSO
        assert t.end(commit=False) == 0
        thread.join(10)
        assert time.monotonic() - started < 5              # woken, not timed out
        p = answer[0].responses[0].partitions[0]
        assert p.error_code == 0 and p.last_stable_offset == 12 and p.high_watermark == 12
        assert [(a.producer_id, a.first_offset) for a in p.aborted_transactions] == [(t.pid, 9)]
        assert p.records


def test_markers_need_cluster_action(broker_factory):
    """With ACLs on, a principal without CLUSTER_ACTION on the cluster (here User:ANONYMOUS,
    once an ACL names the cluster) is refused, and no marker is written."""
    b = broker_factory(overrides={"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                                  "allow.everyone.if.no.acl.found": "true"}).start()
    create_topic(b.bootstrap, TOPIC)
    with RawConnection(b.port) as conn:
        t = TxnDriver(conn, TOPIC)
        assert t.send([b"x"]) == (0, 0)
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        fut = admin.create_acls([AclBinding(ResourceType.BROKER, "kafka-cluster",
                                            ResourcePatternType.LITERAL, "User:broker", "*",
                                            AclOperation.CLUSTER_ACTION, AclPermissionType.ALLOW)])
        for f in fut.values():
            f.result(30)
        time.sleep(0.5)                                    # every network worker re-reads the ACLs
        assert t.end(commit=False) == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        assert list_latest(conn, TOPIC, committed=False) == 1
        assert list_latest(conn, TOPIC, committed=True) == 0  # still open: nothing ended it
