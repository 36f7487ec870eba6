"""The transaction coordinator with real clients on a real broker: confluent-kafka's and
kafka-python's transactional producers initialise, a second instance fences the first, a
transaction commits or aborts (EndTxn answered), and the coordinator's state survives a SIGKILL.

With the partition leaders' side (WriteTxnMarkers, API 27) the markers are written: read_committed
sees the committed records only, and transactional offsets become committed at the marker."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from kafka import KafkaProducer
from kafka.errors import KafkaError as KpError

from tests.broker.clients import create_topic
from tests.broker.wire import RawConnection
from tests.broker_process import BrokerProcess
from tests.cluster.harness import wait_for
from tests.transactions.helpers import find_txn_coordinator, init_pid

TOPIC = "txn-data"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("txn")) as b:
        create_topic(b.bootstrap, TOPIC, 2)
        yield b


def _producer(b: BrokerProcess, tid: str, **extra) -> Producer:
    return Producer({"bootstrap.servers": b.bootstrap, "transactional.id": tid, **extra})


def _raw_epoch(b: BrokerProcess, tid: str) -> tuple[int, int]:
    """(producer id, epoch) a new instance of ``tid`` gets now (it bumps the epoch)."""
    conn = RawConnection(b.port)
    try:
        assert find_txn_coordinator(conn, tid).error_code == 0
        r = init_pid(conn, tid)
        assert r.error_code == 0, r
        return r.producer_id, r.producer_epoch
    finally:
        conn.sock.close()


def test_confluent_init_transactions(broker):
    p = _producer(broker, "cf-init")
    p.init_transactions(20)
    pid, epoch = _raw_epoch(broker, "cf-init")
    assert pid >= 0 and epoch == 1  # the producer had epoch 0 of this id


def test_confluent_second_instance_fences_the_first(broker):
    first = _producer(broker, "cf-fence")
    first.init_transactions(20)
    second = _producer(broker, "cf-fence")
    second.init_transactions(20)
    first.begin_transaction()
    first.produce(TOPIC, b"zombie", partition=0)
    with pytest.raises(KafkaException) as info:
        first.commit_transaction(20)
    err = info.value.args[0]
    assert err.fatal() and err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                          KafkaError.INVALID_PRODUCER_EPOCH), err
    # the new instance is not disturbed
    second.begin_transaction()
    second.produce(TOPIC, b"live", partition=0)
    second.commit_transaction(20)


def test_confluent_abort(broker):
    p = _producer(broker, "cf-abort")
    p.init_transactions(20)
    p.begin_transaction()
    for i in range(5):
        p.produce(TOPIC, b"a%d" % i, partition=i % 2)
    p.abort_transaction(20)


def test_confluent_commit(broker):
    p = _producer(broker, "cf-commit")
    p.init_transactions(20)
    p.begin_transaction()
    for i in range(5):
        p.produce(TOPIC, b"c%d" % i, partition=i % 2)
    p.commit_transaction(20)  # EndTxn answered (PrepareCommit written)


def test_kafka_python_transactional_producer(broker):
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="kp-tx")
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send(TOPIC, b"kp", partition=0)
        p.commit_transaction()
    finally:
        p.close(timeout=5)


def test_kafka_python_second_instance_fences_the_first(broker):
    first = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="kp-fence")
    second = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="kp-fence")
    try:
        first.init_transactions()
        second.init_transactions()
        first.begin_transaction()
        first.send(TOPIC, b"zombie", partition=1)
        with pytest.raises(KpError) as info:
            first.commit_transaction()
        assert "Fenced" in type(info.value).__name__ or "Epoch" in type(info.value).__name__, info.value
    finally:
        first.close(timeout=5)
        second.close(timeout=5)


def test_state_survives_sigkill(tmp_path):
    b = BrokerProcess(tmp_path).start()
    try:
        p = _producer(b, "cf-restart")
        p.init_transactions(20)  # epoch 0
        pid_before, epoch_before = _raw_epoch(b, "cf-restart")  # epoch 1
        assert epoch_before == 1
        del p
        b.kill()
        b.start()
        again = _producer(b, "cf-restart")
        again.init_transactions(30)  # epoch 2, from the reloaded state
        assert _raw_epoch(b, "cf-restart") == (pid_before, 3)
    finally:
        b.stop()


def test_confluent_transactions_in_a_row_and_read_committed(broker):
    topic = "txn-rc"
    create_topic(broker.bootstrap, topic, 1)
    p = _producer(broker, "cf-rows", **{"transaction.timeout.ms": 10000})
    p.init_transactions(20)
    for i, commit in enumerate((True, False, True)):
        p.begin_transaction()
        p.produce(topic, b"v%d" % i)
        (p.commit_transaction if commit else p.abort_transaction)(10)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "rc", "isolation.level": "read_committed",
                  "auto.offset.reset": "earliest"})
    try:
        c.subscribe([topic])
        got = []
        for _ in range(50):
            m = c.poll(0.2)
            if m is not None and not m.error():
                got.append(m.value())
            if len(got) >= 2:
                break
        assert got == [b"v0", b"v2"]
    finally:
        c.close()


def test_new_instance_after_an_open_transaction(broker):
    """The old instance's open transaction is aborted (markers) before the new one is answered."""
    old = _producer(broker, "cf-open")
    old.init_transactions(20)
    old.begin_transaction()
    old.produce(TOPIC, b"open", partition=0)
    old.flush(10)
    new = _producer(broker, "cf-open")
    new.init_transactions(15)
    new.begin_transaction()
    new.produce(TOPIC, b"next", partition=0)
    new.commit_transaction(10)


def _offsets_of(b: BrokerProcess, group: str, stable: bool) -> dict[int, tuple[int, int]]:
    """partition -> (committed offset, error code) of ``group`` on TOPIC, by OffsetFetch v7."""
    conn = RawConnection(b.port)
    try:
        r = conn.request(9, 7, {"group_id": group, "topics": [{"name": TOPIC, "partition_indexes": [0, 1]}],
                                "require_stable": stable})
        return {p.partition_index: (p.committed_offset, p.error_code) for t in r.topics for p in t.partitions}
    finally:
        conn.sock.close()


def _until_committed(broker, group: str, partition: int, offset: int, timeout: float = 20) -> None:
    """The markers go out after EndTxn's answer: (-1, UNSTABLE_OFFSET_COMMIT) with
    require_stable until the one on the group's partition is written, then the offset."""
    deadline = time.monotonic() + timeout
    while True:
        got = _offsets_of(broker, group, stable=True)[partition]
        if got == (offset, 0):
            return
        assert got == (-1, 88) and time.monotonic() < deadline, got
        time.sleep(0.1)


def test_confluent_send_offsets_to_transaction(broker):
    """AddOffsetsToTxn, then TxnOffsetCommit to the group coordinator: the offsets wait for the
    transaction's marker (until then require_stable answers UNSTABLE_OFFSET_COMMIT), then are
    committed."""
    from confluent_kafka import TopicPartition

    p = _producer(broker, "cf-offsets")
    p.init_transactions(20)
    p.begin_transaction()
    p.produce(TOPIC, b"x", partition=0)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "eos-group"})
    try:
        p.send_offsets_to_transaction([TopicPartition(TOPIC, 0, 42)], c.consumer_group_metadata(), 20)
    finally:
        c.close()
    p.commit_transaction(20)
    _until_committed(broker, "eos-group", 0, 42)


def test_kafka_python_send_offsets_to_transaction(broker):
    from kafka import OffsetAndMetadata, TopicPartition

    p = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="kp-offsets")
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send(TOPIC, b"kp", partition=1)
        p.send_offsets_to_transaction({TopicPartition(TOPIC, 1): OffsetAndMetadata(7, "", -1)}, "kp-eos-group")
        p.commit_transaction()
    finally:
        p.close(timeout=5)
    _until_committed(broker, "kp-eos-group", 1, 7)


def test_committed_offsets_after_the_marker(broker):
    from confluent_kafka import TopicPartition

    p = _producer(broker, "cf-offsets-marked")
    p.init_transactions(20)
    p.begin_transaction()
    p.produce(TOPIC, b"y", partition=1)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "eos-marked"})
    try:
        p.send_offsets_to_transaction([TopicPartition(TOPIC, 1, 77)], c.consumer_group_metadata(), 20)
    finally:
        c.close()
    p.commit_transaction(20)
    deadline = time.monotonic() + 10
    while _offsets_of(broker, "eos-marked", stable=True)[1] != (77, 0):
        assert time.monotonic() < deadline, "the offset never became committed"
        time.sleep(0.2)


def test_coordinator_aborts_a_transaction_past_its_timeout(tmp_path):
    """transaction.timeout.ms passes with the transaction open: the coordinator aborts it with a
    bumped epoch (Kafka's rule), so the producer's commit is fenced; the id serves a new instance."""
    b = BrokerProcess(tmp_path, overrides={
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"}).start()
    try:
        create_topic(b.bootstrap, TOPIC, 1)
        p = _producer(b, "cf-timeout", **{"transaction.timeout.ms": 1500})
        p.init_transactions(20)
        p.begin_transaction()
        p.produce(TOPIC, b"late", partition=0)
        p.flush(10)
        time.sleep(3)
        with pytest.raises(KafkaException) as info:
            p.commit_transaction(10)
        assert info.value.args[0].code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                             KafkaError.INVALID_PRODUCER_EPOCH), info.value
        conn = RawConnection(b.port)
        try:
            def initialised() -> bool:
                r = conn.request(22, 4, {"transactional_id": "cf-timeout", "transaction_timeout_ms": 60000,
                                         "producer_id": -1, "producer_epoch": -1})
                # CONCURRENT_TRANSACTIONS while the timeout abort's markers are being written
                assert r.error_code in (0, 51), r
                return r.error_code == 0
            wait_for(initialised, 30, "a new instance after the coordinator's abort completed", step=0.5)
        finally:
            conn.sock.close()
    finally:
        b.stop()


def test_markers_resume_after_sigkill(tmp_path):
    """A commit decided (PrepareCommit in the log) when the broker is SIGKILLed: the restarted
    coordinator resumes its markers, and the next instance of the id initialises."""
    b = BrokerProcess(tmp_path).start()
    try:
        create_topic(b.bootstrap, TOPIC, 1)
        p = _producer(b, "cf-resume")
        p.init_transactions(20)
        p.begin_transaction()
        p.produce(TOPIC, b"decided", partition=0)
        p.commit_transaction(20)
        b.kill()
        b.start()
        again = _producer(b, "cf-resume")
        again.init_transactions(20)
    finally:
        b.stop()
