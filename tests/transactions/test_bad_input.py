"""Bad transaction requests on a real broker: each gets Kafka's error code on the wire (or, for an
unparseable request, the closed connection Kafka gives), changes no state, and leaves the
coordinator serving the other producers."""

from __future__ import annotations

import struct
import threading

import pytest

from appliance.protocol.types import write_uvarint
from tests.broker.clients import create_topic
from tests.broker.wire import RawConnection
from tests.broker_process import BrokerProcess
from tests.transactions.helpers import add_partitions, end_txn, find_txn_coordinator, init_pid

TOPIC = "bad-input"
E_UNKNOWN_TOPIC, E_NOT_ATTEMPTED, E_INVALID_EPOCH, E_FENCED = 3, 55, 47, 90
E_INVALID_TXN_STATE, E_MAPPING, E_INVALID_TIMEOUT, E_NOT_AVAILABLE = 48, 49, 50, 15


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("txnbad")) as b:
        create_topic(b.bootstrap, TOPIC, 2)
        yield b


@pytest.fixture
def conn(broker):
    c = RawConnection(broker.port)
    yield c
    c.sock.close()


def _fresh(conn: RawConnection, tid: str) -> tuple[int, int]:
    assert find_txn_coordinator(conn, tid).error_code == 0
    r = init_pid(conn, tid)
    assert r.error_code == 0, r
    return r.producer_id, r.producer_epoch


def _others_unaffected(broker: BrokerProcess, tid: str) -> None:
    """Another producer starts a transaction normally."""
    c = RawConnection(broker.port)
    try:
        pid, epoch = _fresh(c, tid)
        assert add_partitions(c, tid, pid, epoch, {TOPIC: [0]}) == {(TOPIC, 0): 0}
    finally:
        c.sock.close()


def test_end_txn_with_no_transaction(broker, conn):
    pid, epoch = _fresh(conn, "no-txn")
    assert end_txn(conn, "no-txn", pid, epoch, commit=True) == E_INVALID_TXN_STATE
    assert end_txn(conn, "no-txn", pid, epoch, commit=False) == E_INVALID_TXN_STATE
    # nothing changed: the same producer begins a transaction as usual
    assert add_partitions(conn, "no-txn", pid, epoch, {TOPIC: [1]}) == {(TOPIC, 1): 0}
    _others_unaffected(broker, "no-txn-other")


def test_add_partitions_for_unknown_topics(broker, conn):
    pid, epoch = _fresh(conn, "unknown-topic")
    got = add_partitions(conn, "unknown-topic", pid, epoch, {TOPIC: [0, 9], "no-such-topic": [0]})
    assert got == {(TOPIC, 0): E_NOT_ATTEMPTED, (TOPIC, 9): E_UNKNOWN_TOPIC,
                   ("no-such-topic", 0): E_UNKNOWN_TOPIC}
    # none was added: no transaction to end
    assert end_txn(conn, "unknown-topic", pid, epoch, commit=True) == E_INVALID_TXN_STATE
    _others_unaffected(broker, "unknown-topic-other")


@pytest.mark.parametrize("version,code", [(1, E_INVALID_EPOCH), (3, E_FENCED)])
def test_stale_producer_epoch(broker, conn, version, code):
    tid = f"stale-{version}"
    pid, old = _fresh(conn, tid)
    r = init_pid(conn, tid)
    assert (r.producer_id, r.producer_epoch) == (pid, old + 1)
    assert add_partitions(conn, tid, pid, old, {TOPIC: [0]}, version=version) == {(TOPIC, 0): code}
    assert end_txn(conn, tid, pid, old, commit=True, version=version) == code
    # the current epoch is served
    assert add_partitions(conn, tid, pid, old + 1, {TOPIC: [0]}) == {(TOPIC, 0): 0}
    # and an id the coordinator never gave is a mapping error
    assert add_partitions(conn, tid, pid + 12345, old + 1, {TOPIC: [0]}) == {(TOPIC, 0): E_MAPPING}


def test_transaction_timeout_above_the_maximum(broker, conn):
    assert find_txn_coordinator(conn, "too-long-timeout").error_code == 0
    r = init_pid(conn, "too-long-timeout", timeout_ms=900001)
    assert (r.error_code, r.producer_id) == (E_INVALID_TIMEOUT, -1)
    r = init_pid(conn, "too-long-timeout", timeout_ms=900000)
    assert (r.error_code, r.producer_epoch) == (0, 0)  # no state was made by the refused one
    _others_unaffected(broker, "too-long-timeout-other")


def _init_frame_v2(tid_bytes: bytes) -> bytes:
    """InitProducerId v2 (flexible) by hand: a compact string may say more than 32767 bytes."""
    body = bytearray()
    write_uvarint(len(tid_bytes) + 1, body)
    body += tid_bytes + struct.pack(">i", 60000) + b"\x00"
    header = struct.pack(">hhi", 22, 2, 99) + struct.pack(">h", 3) + b"raw" + b"\x00"
    payload = header + bytes(body)
    return struct.pack(">i", len(payload)) + payload


def test_transactional_id_longer_than_kafkas_limit(broker, conn):
    """Kafka's strings are at most 32767 bytes; a longer one does not parse, and Kafka's broker
    closes the connection of a request it cannot parse (InvalidRequestException)."""
    longest = "x" * 32767
    assert find_txn_coordinator(conn, longest).error_code == 0
    r = init_pid(conn, longest)
    assert (r.error_code, r.producer_epoch) == (0, 0)  # at the limit: served
    bad = RawConnection(broker.port)
    try:
        bad.send_raw(_init_frame_v2(b"y" * 32768))
        assert bad.closed_by_peer()
    finally:
        bad.sock.close()
    # the coordinator kept nothing of it, and serves on
    r = init_pid(conn, longest)
    assert (r.error_code, r.producer_epoch) == (0, 1)
    _others_unaffected(broker, "limit-other")


def test_find_coordinator_while_the_topic_is_created(tmp_path):
    """Lookups racing the creation of __transaction_state get COORDINATOR_NOT_AVAILABLE
    (retriable) until its partitions are online, then the coordinator."""
    b = BrokerProcess(tmp_path, overrides={"transaction.state.log.num.partitions": "200"}).start()
    try:
        first: dict[int, int] = {}
        go = threading.Barrier(4)

        def ask(i: int) -> None:
            c = RawConnection(b.port)
            try:
                go.wait()
                first[i] = c.request(10, 3, {"key": f"race-{i}", "key_type": 1}).error_code
            finally:
                c.sock.close()

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert set(first.values()) <= {0, E_NOT_AVAILABLE} and len(first) == 4
        c = RawConnection(b.port)
        try:
            for i in range(4):
                assert find_txn_coordinator(c, f"race-{i}").error_code == 0
        finally:
            c.sock.close()
    finally:
        b.stop()


def test_empty_transactional_id(broker, conn):
    r = conn.request(10, 3, {"key": "", "key_type": 1})
    assert r.error_code == 42  # INVALID_REQUEST
    r = init_pid(conn, "")
    assert r.error_code == 42


def test_unknown_coordinator_key_type(broker, conn):
    assert conn.request(10, 3, {"key": "k", "key_type": 7}).error_code == 42


def test_producer_id_without_epoch(broker, conn):
    """KIP-360's pair comes whole or not at all (Kafka: INVALID_REQUEST)."""
    assert find_txn_coordinator(conn, "half-pair").error_code == 0
    assert init_pid(conn, "half-pair", pid=5, epoch=-1).error_code == 42
    assert init_pid(conn, "half-pair", pid=-1, epoch=2).error_code == 42
    assert init_pid(conn, "half-pair").producer_epoch == 0  # nothing was made before
