"""read_committed through every client library we name (kafka-python, aiokafka, kcat, and
confluent-kafka as the writer): over committed, aborted and one still-open transaction on two
partitions, each reader gets exactly the committed records, once, in order, and none of the open
transaction's until it commits; read_uncommitted readers get everything."""

from __future__ import annotations

import asyncio
import subprocess

import pytest
from aiokafka import AIOKafkaConsumer
from confluent_kafka import Producer
from kafka import KafkaConsumer, TopicPartition

from tests.broker.clients import create_topic
from tests.broker_process import BrokerProcess

TOPIC = "txn-readers"


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """A broker, and what a transactional producer wrote: (broker, committed values per
    partition, aborted values, the producer whose last transaction is still open)."""
    with BrokerProcess(tmp_path_factory.mktemp("txnreaders")) as b:
        create_topic(b.bootstrap, TOPIC, 2)
        p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "readers",
                      "transaction.timeout.ms": 60000})
        p.init_transactions(30)
        committed: dict[int, list[bytes]] = {0: [], 1: []}
        aborted: list[bytes] = []
        for i in range(6):
            p.begin_transaction()
            values = [(part, b"t%d-%d-%d" % (i, part, j)) for part in (0, 1) for j in range(3)]
            for part, v in values:
                p.produce(TOPIC, v, partition=part)
            p.flush(30)  # on the broker before the marker: an abort must hide written data
            if i % 2 == 0:
                p.commit_transaction(30)
                for part, v in values:
                    committed[part].append(v)
            else:
                p.abort_transaction(30)
                aborted += [v for _, v in values]
        p.begin_transaction()
        for part in (0, 1):
            p.produce(TOPIC, b"open-%d" % part, partition=part)
        p.flush(30)
        yield b, committed, aborted, p
        p.abort_transaction(30)


def _kafka_python(b: BrokerProcess, isolation: str) -> dict[int, list[bytes]]:
    c = KafkaConsumer(bootstrap_servers=b.bootstrap, isolation_level=isolation, group_id=None,
                      enable_auto_commit=False, auto_offset_reset="earliest", consumer_timeout_ms=3000)
    try:
        c.assign([TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)])
        got: dict[int, list[bytes]] = {0: [], 1: []}
        for m in c:
            got[m.partition].append(m.value)
        return got
    finally:
        c.close()


def _aiokafka(b: BrokerProcess, isolation: str) -> dict[int, list[bytes]]:
    async def read() -> dict[int, list[bytes]]:
        c = AIOKafkaConsumer(bootstrap_servers=b.bootstrap, isolation_level=isolation,
                             enable_auto_commit=False, auto_offset_reset="earliest")
        await c.start()
        try:
            from aiokafka import TopicPartition as Tp
            c.assign([Tp(TOPIC, 0), Tp(TOPIC, 1)])
            got: dict[int, list[bytes]] = {0: [], 1: []}
            while True:
                batch = await c.getmany(timeout_ms=2000)
                if not batch:
                    return got
                for tp, msgs in batch.items():
                    got[tp.partition] += [m.value for m in msgs]
        finally:
            await c.stop()
    return asyncio.run(read())


def _kcat(b: BrokerProcess, isolation: str) -> dict[int, list[bytes]]:
    got: dict[int, list[bytes]] = {}
    for part in (0, 1):
        out = subprocess.run(["kcat", "-C", "-b", b.bootstrap, "-t", TOPIC, "-p", str(part), "-o", "beginning",
                              "-e", "-q", "-X", f"isolation.level={isolation}", "-f", "%s\\n"],
                             capture_output=True, timeout=60)
        assert out.returncode == 0, out.stderr
        got[part] = out.stdout.split(b"\n")[:-1]
    return got


READERS = {"kafka-python": _kafka_python, "aiokafka": _aiokafka, "kcat": _kcat}


@pytest.mark.parametrize("reader", READERS)
def test_read_committed_sees_each_committed_record_once_and_nothing_else(written, reader):
    b, committed, aborted, _ = written
    assert READERS[reader](b, "read_committed") == committed


@pytest.mark.parametrize("reader", READERS)
def test_read_uncommitted_sees_every_record(written, reader):
    b, committed, aborted, _ = written
    got = READERS[reader](b, "read_uncommitted")
    flat = [v for part in (0, 1) for v in got[part]]
    assert sorted(flat) == sorted([v for part in (0, 1) for v in committed[part]] + aborted
                                  + [b"open-0", b"open-1"])


def test_the_open_transaction_appears_once_committed(written):
    b, committed, aborted, p = written
    p.commit_transaction(30)
    p.begin_transaction()  # the fixture's teardown aborts this one
    want = {part: committed[part] + [b"open-%d" % part] for part in (0, 1)}
    for reader in READERS.values():
        assert reader(b, "read_committed") == want
