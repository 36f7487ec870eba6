"""Transactions in appliance.client, against a real broker and real other clients:
appliance.client's transactional producer commits (read_committed consumers, ours and
confluent-kafka's, see the records once) and aborts (read_committed sees none,
read_uncommitted sees them); a second instance fences the first (ProducerFencedError);
send_offsets_to_transaction commits the group's offset only with the commit; our read_committed
consumer reads confluent-kafka's interleaved committed and aborted transactions; a refused batch
makes the transaction abortable; the coordinator's timeout fences; and the client-side errors
for calls out of order."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer as CfConsumer
from confluent_kafka import Producer as CfProducer

from appliance.client import AdminClient, Consumer, Producer, TopicPartition
from appliance.client.transactions import (
    ProducerFencedError,
    TransactionAbortableError,
    TransactionStateError,
)
from appliance.errors import InvalidConfigError, MessageTooLargeError
from tests.broker.clients import create_topic
from tests.broker_process import BrokerProcess


@pytest.fixture
def topic(module_broker, topic_name):
    create_topic(module_broker.bootstrap, topic_name, 2)
    return topic_name


def _producer(broker, tid: str | None = None, **extra) -> Producer:
    conf = {"bootstrap.servers": broker.bootstrap, **extra}
    if tid is not None:
        conf["transactional.id"] = tid
    return Producer(conf)


def _read(broker, topic: str, isolation: str, settle: float = 1.5) -> list[bytes]:
    """Every value of both partitions an appliance.client consumer with ``isolation`` reads,
    until nothing new came for ``settle`` s."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "isolation.level": isolation,
                  "auto.offset.reset": "earliest"})
    try:
        c.assign([(topic, 0), (topic, 1)])
        got: list[bytes] = []
        quiet_until = time.monotonic() + settle
        deadline = time.monotonic() + 30
        while time.monotonic() < min(quiet_until, deadline):
            recs = c.poll(0.3)
            if recs:
                got += [r.value for r in recs]
                quiet_until = time.monotonic() + settle
        return got
    finally:
        c.close()


def _read_confluent(broker, topic: str, expected: int) -> list[bytes]:
    c = CfConsumer({"bootstrap.servers": broker.bootstrap, "group.id": f"cf-{uuid.uuid4().hex[:8]}",
                    "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                    "enable.auto.commit": False})
    try:
        c.subscribe([topic])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(got) < expected:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
        end = time.monotonic() + 1.5  # nothing more may come (a duplicate, an aborted record)
        while time.monotonic() < end:
            m = c.poll(0.3)
            if m is not None and m.error() is None:
                got.append(m.value())
        return got
    finally:
        c.close()


def test_commit_seen_once_by_read_committed_consumers(module_broker, topic):
    p = _producer(module_broker, f"tx-commit-{topic}")
    try:
        p.init_transactions(20)
        p.begin_transaction()
        futures = [p.send(topic, b"c%d" % i, partition=i % 2) for i in range(6)]
        p.send_many(topic, [b"bulk0", b"bulk1"], partition=1)
        p.commit_transaction(20)
        assert all(f.done() for f in futures)
    finally:
        p.close()
    expected = sorted([b"c%d" % i for i in range(6)] + [b"bulk0", b"bulk1"])
    assert sorted(_read(module_broker, topic, "read_committed")) == expected
    assert sorted(_read_confluent(module_broker, topic, len(expected))) == expected


def test_abort_hidden_from_read_committed_only(module_broker, topic):
    p = _producer(module_broker, f"tx-abort-{topic}")
    try:
        p.init_transactions(20)
        p.begin_transaction()
        for i in range(4):
            p.send(topic, b"a%d" % i, partition=i % 2)
        p.abort_transaction(20)
        p.begin_transaction()  # the producer goes on after an abort
        p.send(topic, b"after", partition=0)
        p.commit_transaction(20)
    finally:
        p.close()
    assert _read(module_broker, topic, "read_committed") == [b"after"]
    assert sorted(_read(module_broker, topic, "read_uncommitted")) == sorted(
        [b"a0", b"a1", b"a2", b"a3", b"after"])
    assert _read_confluent(module_broker, topic, 1) == [b"after"]


def test_second_instance_fences_the_first(module_broker, topic):
    tid = f"tx-fence-{topic}"
    first, second = _producer(module_broker, tid), _producer(module_broker, tid)
    try:
        first.init_transactions(20)
        first.begin_transaction()
        first.send(topic, b"zombie", partition=0)
        first.flush(20)
        second.init_transactions(30)  # fences the first; its open transaction is aborted
        first.send(topic, b"zombie2", partition=1)
        with pytest.raises(ProducerFencedError):
            first.commit_transaction(20)
        with pytest.raises(ProducerFencedError):  # fatal: nothing more works
            first.begin_transaction()
        second.begin_transaction()
        second.send(topic, b"live", partition=1)
        second.commit_transaction(20)
    finally:
        first.close(5)
        second.close()
    assert _read(module_broker, topic, "read_committed") == [b"live"]


def test_send_offsets_committed_only_with_the_commit(module_broker, topic):
    group = f"eos-{topic}"
    out_topic = f"{topic}-out"
    create_topic(module_broker.bootstrap, out_topic, 2)
    src = _producer(module_broker)
    for i in range(4):
        src.send(topic, b"in%d" % i, partition=0)
    src.close()
    consumer = Consumer({"bootstrap.servers": module_broker.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    p = _producer(module_broker, f"tx-eos-{topic}")
    try:
        consumer.subscribe([topic])
        got: list = []
        deadline = time.monotonic() + 30
        while len(got) < 4 and time.monotonic() < deadline:
            got += consumer.poll(0.5)
        assert [r.value for r in got] == [b"in0", b"in1", b"in2", b"in3"]
        meta = consumer.group_metadata()
        assert meta.group_id == group and meta.generation_id >= 1 and meta.member_id
        p.init_transactions(20)
        tp = TopicPartition(topic, 0)
        # aborted: the group's offset does not move
        p.begin_transaction()
        p.send(out_topic, b"copy-aborted", partition=0)
        p.send_offsets_to_transaction({tp: 2}, meta, 20)
        p.abort_transaction(20)
        assert consumer.committed(tp) is None
        # committed: it does, with the output
        p.begin_transaction()
        for r in got:
            p.send(out_topic, b"copy-" + r.value, partition=0)
        p.send_offsets_to_transaction({tp: 4}, meta, 20)
        assert consumer.committed(tp) is None  # not before the commit
        p.commit_transaction(20)
        deadline = time.monotonic() + 20
        while consumer.committed(tp) != 4 and time.monotonic() < deadline:
            time.sleep(0.2)  # the offset becomes committed when the marker is written
        assert consumer.committed(tp) == 4
    finally:
        p.close()
        consumer.close()
    assert _read(module_broker, out_topic, "read_committed") == [b"copy-in%d" % i for i in range(4)]


def test_read_committed_against_confluent_interleaved(module_broker, topic):
    """Two confluent-kafka transactional producers on the same partitions, their commits and
    aborts interleaved: our read_committed consumer sees exactly the committed records, in
    each partition's order."""
    a = CfProducer({"bootstrap.servers": module_broker.bootstrap, "transactional.id": f"cf-a-{topic}"})
    b = CfProducer({"bootstrap.servers": module_broker.bootstrap, "transactional.id": f"cf-b-{topic}"})
    a.init_transactions(20)
    b.init_transactions(20)
    committed = []
    for rnd in range(4):
        a.begin_transaction()
        b.begin_transaction()
        for i in range(3):
            a.produce(topic, b"a%d-%d" % (rnd, i), partition=i % 2)
            b.produce(topic, b"b%d-%d" % (rnd, i), partition=i % 2)
            a.flush(10)
            b.flush(10)
        if rnd % 2:
            a.commit_transaction(20)
            b.abort_transaction(20)
            committed += [b"a%d-%d" % (rnd, i) for i in range(3)]
        else:
            b.commit_transaction(20)
            a.abort_transaction(20)
            committed += [b"b%d-%d" % (rnd, i) for i in range(3)]
    # one left open: read_committed stops at its first record (the LSO), so what follows it,
    # though committed, is not read yet
    a.begin_transaction()
    a.produce(topic, b"open", partition=0)
    a.flush(10)
    b.begin_transaction()
    b.produce(topic, b"behind-open", partition=0)
    b.commit_transaction(20)
    got = _read(module_broker, topic, "read_committed")
    assert sorted(got) == sorted(committed)
    assert len(got) == len(set(got))
    a.commit_transaction(20)
    got = _read(module_broker, topic, "read_committed")
    assert sorted(got) == sorted(committed + [b"open", b"behind-open"])
    uncommitted = _read(module_broker, topic, "read_uncommitted")
    assert len(uncommitted) == 4 * 6 + 2


def test_a_failed_record_makes_the_transaction_abortable(module_broker, topic_name):
    """A batch the broker refuses for good (MESSAGE_TOO_LARGE: larger than the topic's
    max.message.bytes) fails the transaction: commit refuses, abort works, and the next
    transaction commits (the epoch is bumped after the abort, so the sequence numbers restart
    without a gap the broker would refuse)."""
    create_topic(module_broker.bootstrap, topic_name, 2, {"max.message.bytes": "2000"})
    tid = f"tx-abortable-{topic_name}"
    p = _producer(module_broker, tid)
    admin = AdminClient(module_broker.bootstrap)
    try:
        p.init_transactions(20)
        epoch = admin.describe_transactions([tid])[tid].producer_epoch
        p.begin_transaction()
        ok = p.send(topic_name, b"small", partition=0)
        big = p.send(topic_name, b"x" * 5000, partition=1)
        p.flush(20)
        assert ok.exception(0) is None
        assert isinstance(big.exception(0), MessageTooLargeError)
        with pytest.raises(TransactionAbortableError):
            p.commit_transaction(20)
        with pytest.raises(TransactionAbortableError):
            p.send(topic_name, b"more", partition=0)
        p.abort_transaction(20)
        # bumped: partition 1's sequence 0 went with the refused batch
        assert admin.describe_transactions([tid])[tid].producer_epoch == epoch + 1
        p.begin_transaction()
        p.send(topic_name, b"next", partition=1)
        p.send(topic_name, b"next0", partition=0)
        p.commit_transaction(20)
    finally:
        p.close()
        admin.close()
    assert sorted(_read(module_broker, topic_name, "read_committed")) == [b"next", b"next0"]


def test_calls_out_of_order(module_broker, topic):
    plain = _producer(module_broker)
    try:
        with pytest.raises(TransactionStateError, match="no transactional.id"):
            plain.begin_transaction()
        with pytest.raises(TransactionStateError):
            plain.init_transactions(5)
    finally:
        plain.close()
    p = _producer(module_broker, f"tx-order-{topic}")
    try:
        with pytest.raises(TransactionStateError):
            p.begin_transaction()  # before init_transactions
        with pytest.raises(TransactionStateError):
            p.send(topic, b"x", partition=0)
        p.init_transactions(20)
        with pytest.raises(TransactionStateError):
            p.commit_transaction(5)  # nothing begun
        with pytest.raises(TransactionStateError):
            p.abort_transaction(5)
        with pytest.raises(TransactionStateError):
            p.send(topic, b"x", partition=0)  # outside a transaction
        with pytest.raises(TransactionStateError):
            p.init_transactions(5)  # twice
        p.begin_transaction()
        with pytest.raises(TransactionStateError):
            p.begin_transaction()  # twice
        p.commit_transaction(20)  # an empty transaction commits
    finally:
        p.close()
    with pytest.raises(InvalidConfigError):
        _producer(module_broker, "")
    with pytest.raises(InvalidConfigError):
        _producer(module_broker, "x", acks=1)
    with pytest.raises(InvalidConfigError):
        Consumer({"bootstrap.servers": module_broker.bootstrap, "isolation.level": "read_dirty"})


def test_transaction_past_its_timeout_is_aborted_and_the_producer_fenced(tmp_path):
    """The coordinator aborts a transaction open past transaction.timeout.ms (bumping the
    epoch, as Kafka's): its records never show to read_committed, and the producer that let it
    time out is fenced."""
    overrides = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"}
    with BrokerProcess(tmp_path, overrides=overrides) as b:
        create_topic(b.bootstrap, "slow", 2)
        p = _producer(b, "tx-slow", **{"transaction.timeout.ms": 1000})
        try:
            p.init_transactions(20)
            p.begin_transaction()
            p.send("slow", b"late", partition=0)
            p.flush(20)
            with AdminClient(b.bootstrap) as admin:
                deadline = time.monotonic() + 20
                while admin.describe_transactions(["tx-slow"])["tx-slow"].state != "CompleteAbort":
                    assert time.monotonic() < deadline, "the coordinator did not abort the timed-out transaction"
                    time.sleep(0.2)
            with pytest.raises(ProducerFencedError):
                p.commit_transaction(20)
        finally:
            p.close(5)
        assert _read(b, "slow", "read_committed") == []
