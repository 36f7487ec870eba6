"""The source reads committed data only by default (kafka.isolation.level=read_committed): a
confluent-kafka transactional producer's committed transactions, never its aborted ones nor an
open one; read_uncommitted reads every data record up to the high watermark. In place (mmap,
the .txnindex files) and over the wire (Fetch isolation level 1) give the same rows."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from tests.spark.conftest import create_topic, produce

TOPIC = "spark-txn"


def _values(df) -> list[str]:
    return sorted(bytes(r.value).decode() for r in df.select("value").collect())


@pytest.fixture(scope="module")
def written(broker):
    """Interleaved committed and aborted transactions, plain records between them, and one
    transaction left open while the tests read. Yields (committed, aborted, open) values."""
    create_topic(broker, TOPIC, 2)
    committed, aborted, still_open = [], [], []
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "spark-txn-1",
                  "linger.ms": 5})
    p.init_transactions(30)
    for t in range(6):
        p.begin_transaction()
        vals = [f"t{t}-{i}" for i in range(40)]
        for i, v in enumerate(vals):
            p.produce(TOPIC, v.encode(), key=b"k%d" % i, partition=i % 2)
        p.flush(30)
        plain = [f"plain-{t}-{i}" for i in range(5)]
        produce(broker, TOPIC, ({"value": v.encode(), "partition": i % 2}
                                for i, v in enumerate(plain)))
        committed += plain
        if t % 3 == 1:
            p.abort_transaction(30)
            aborted += vals
        else:
            p.commit_transaction(30)
            committed += vals
    opener = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "spark-txn-open",
                       "transaction.timeout.ms": 300000})
    opener.init_transactions(30)
    opener.begin_transaction()
    still_open = [f"open-{i}" for i in range(10)]
    for i, v in enumerate(still_open):
        opener.produce(TOPIC, v.encode(), partition=i % 2)
    opener.flush(30)
    after = [f"after-open-{i}" for i in range(4)]
    produce(broker, TOPIC, ({"value": v.encode(), "partition": i % 2} for i, v in enumerate(after)))
    try:
        yield committed, aborted, still_open + after
    finally:
        opener.abort_transaction(30)


def test_in_place_reads_committed_by_default_and_everything_with_read_uncommitted(
        spark, broker, written):
    committed, aborted, above_lso = written
    base = (spark.read.format("appliance").option("log.dirs", ",".join(broker.log_dirs))
            .option("shm.name", f"appliance-test-{broker.port}").option("subscribe", TOPIC))
    # the open transaction's records and the plain records after it are above the LSO
    assert _values(base.load()) == sorted(committed)
    got = _values(base.option("kafka.isolation.level", "read_uncommitted").load())
    assert got == sorted(committed + aborted + above_lso)


def test_remote_reads_committed_by_default_and_everything_with_read_uncommitted(
        spark, broker, written):
    committed, aborted, above_lso = written
    base = (spark.read.format("appliance").option("kafka.bootstrap.servers", broker.bootstrap)
            .option("subscribe", TOPIC).option("read.chunk.bytes", "4096"))
    assert _values(base.load()) == sorted(committed)
    got = _values(base.option("kafka.isolation.level", "READ_UNCOMMITTED").load())
    assert got == sorted(committed + aborted + above_lso)
    with pytest.raises(Exception, match="kafka.isolation.level"):
        base.option("kafka.isolation.level", "serializable").load().collect()
