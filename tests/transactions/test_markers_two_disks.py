"""A standalone broker with two log dirs (two disk workers): the coordinator writes the markers of
its own disk's partitions in its loop, and sends the other disk's through the WriteTxnMarkers
path (txn_host.py). A transaction over partitions of both disks commits or aborts whole:
read_committed sees every committed record once and nothing aborted, the LSO reaches the high
watermark everywhere, and the same producer goes on (its transactions completed)."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.broker.clients import create_topic
from tests.broker.txn_wire import list_latest
from tests.broker.wire import RawConnection
from tests.broker_process import BrokerProcess
from tests.cluster.harness import wait_for

TOPIC = "two-disks"
PARTITIONS = 6


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("txn2"), num_log_dirs=2, overrides={
            "transaction.state.log.num.partitions": "2"}) as b:
        create_topic(b.bootstrap, TOPIC, PARTITIONS)
        yield b


def _disks_of(b: BrokerProcess) -> set[int]:
    """The log dirs holding a partition of TOPIC."""
    return {i for i, d in enumerate(b.log_dirs) for p in Path(d).glob(f"{TOPIC}-*") if p.is_dir()}


def _read(b: BrokerProcess) -> list[bytes]:
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "two-disks-reader", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "fetch.wait.max.ms": 100})
    out: list[bytes] = []
    try:
        c.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        idle = 0
        while idle < 6:
            msgs = c.consume(1000, 0.3)
            idle = 0 if msgs else idle + 1
            out += [m.value() for m in msgs if m.error() is None]
    finally:
        c.close()
    return out


def test_a_transaction_over_both_disks(broker):
    assert _disks_of(broker) == {0, 1}
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "two-disks", "linger.ms": 5})
    p.init_transactions(30)
    committed: list[bytes] = []
    for round_ in range(3):
        for commit in (True, False):
            p.begin_transaction()
            values = [f"{round_}-{commit}-{part}-{i}".encode() for part in range(PARTITIONS) for i in range(10)]
            for v in values:
                p.produce(TOPIC, v, partition=int(v.split(b"-")[2]))
            if commit:
                p.commit_transaction(30)
                committed += values
            else:
                p.flush(30)
                p.abort_transaction(30)
    with RawConnection(broker.port) as c:
        wait_for(lambda: all(list_latest(c, TOPIC, True, part) == list_latest(c, TOPIC, False, part)
                             for part in range(PARTITIONS)), 30, "the LSO at the high watermark")
    assert sorted(_read(broker)) == sorted(committed)
