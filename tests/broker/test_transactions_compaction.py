"""Transactions meet the log's housekeeping on a real broker: the cleaner compacts a topic written
by a confluent-kafka transactional producer (aborted data removed, committed data compacted,
what read_committed and read_uncommitted consumers read stays right, across a SIGKILL), and
DeleteRecords past an open transaction's first offset keeps the LSO at the log start."""

from __future__ import annotations

import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.broker.clients import create_topic
from tests.broker.txn_wire import list_latest
from tests.broker.wire import RawConnection
from tests.broker_process import BrokerProcess

KEYS = 10


def _read(bootstrap: str, topic: str, committed: bool, idle_s: float = 2.0) -> list[tuple]:
    """(offset, key, value) of every record a confluent-kafka consumer reads from the log start."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "txc", "enable.auto.commit": False,
                  "isolation.level": "read_committed" if committed else "read_uncommitted",
                  "fetch.wait.max.ms": 100})
    out: list[tuple] = []
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        last = time.monotonic()
        while time.monotonic() - last < idle_s:
            for m in c.consume(1000, 0.3):
                assert m.error() is None, m.error()
                out.append((m.offset(), m.key(), m.value()))
                last = time.monotonic()
    finally:
        c.close()
    return out


def test_cleaner_removes_aborted_transactions_and_compacts_committed_ones(tmp_path):
    with BrokerProcess(tmp_path, overrides={"log.cleaner.backoff.ms": "200"}) as b:
        create_topic(b.bootstrap, "txc", 1, {"cleanup.policy": "compact", "segment.bytes": "4096",
                                            "min.cleanable.dirty.ratio": "0.01",
                                            "segment.ms": "500", "file.delete.delay.ms": "0"})
        p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "txc-1",
                      "linger.ms": 5})
        p.init_transactions(30)
        latest: dict[bytes, bytes] = {}
        aborted: set[bytes] = set()
        for r in range(12):  # the last round commits, so the producer's last batch is committed
            p.begin_transaction()
            vals = {b"k%d" % k: b"r%02d-k%d-" % (r, k) + b"x" * 60 for k in range(KEYS)}
            for k, v in vals.items():
                p.produce("txc", v, k, partition=0)
            assert p.flush(30) == 0
            if r % 3 == 1:
                p.abort_transaction(30)
                aborted |= set(vals.values())
            else:
                p.commit_transaction(30)
                latest.update(vals)
        # Another producer aborts as its last write to the partition: the cleaner keeps a
        # producer's last batch whole (Kafka keeps it empty), with its marker and its entry in
        # the cleaned segment's .txnindex, which read_committed fetches must still find
        last = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "txc-2"})
        last.init_transactions(30)
        last.begin_transaction()
        last.produce("txc", b"last-aborted", b"k0", partition=0)
        assert last.flush(30) == 0  # written: abort_transaction purges what is not sent yet
        last.abort_transaction(30)
        # (the cleaner runs meanwhile: the segments roll every 4 KiB, so no count is exact here)
        assert not {v for _, _, v in _read(b.bootstrap, "txc", committed=True)} & aborted
        time.sleep(1.0)  # segment.ms passes: the next append rolls the active segment
        tail = Producer({"bootstrap.servers": b.bootstrap})
        tail.produce("txc", b"tail", b"tail", partition=0)
        tail.flush(10)
        latest[b"tail"] = b"tail"

        def compacted() -> list[tuple]:
            deadline = time.monotonic() + 40
            while True:
                recs = _read(b.bootstrap, "txc", committed=False, idle_s=1.0)
                if not {v for _, _, v in recs} & aborted and len(recs) <= 2 * KEYS + 2:
                    return recs
                assert time.monotonic() < deadline, f"not cleaned: {len(recs)} records"
                time.sleep(0.5)

        uncommitted = compacted()
        committed = _read(b.bootstrap, "txc", committed=True)
        assert b"last-aborted" in {v for _, _, v in uncommitted}
        assert committed == [r for r in uncommitted if r[2] != b"last-aborted"]
        for recs in (committed, [r for r in uncommitted if r[2] != b"last-aborted"]):
            assert {k: v for _, k, v in recs} == latest      # the latest committed value per key
            assert not {v for _, _, v in recs} & aborted     # the cleaner removed aborted data
            offsets = [o for o, _, _ in recs]
            assert offsets == sorted(offsets)
        b.kill()
        b.release_shm()
        b.start()
        assert _read(b.bootstrap, "txc", committed=True) == committed
        assert _read(b.bootstrap, "txc", committed=False) == uncommitted


def test_delete_records_past_an_open_transaction(tmp_path):
    with BrokerProcess(tmp_path) as b:
        create_topic(b.bootstrap, "txd", 1, {})
        plain = Producer({"bootstrap.servers": b.bootstrap})
        txn = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "txd-1"})
        txn.init_transactions(30)
        plain.produce("txd", b"p0", partition=0)
        plain.produce("txd", b"p1", partition=0)
        plain.flush(10)
        txn.begin_transaction()
        txn.produce("txd", b"o0", partition=0)               # offset 2 opens the transaction
        txn.flush(10)
        plain.produce("txd", b"p3", partition=0)
        plain.produce("txd", b"p4", partition=0)
        plain.flush(10)
        with RawConnection(b.port) as conn:
            assert list_latest(conn, "txd", committed=True) == 2
            admin = AdminClient({"bootstrap.servers": b.bootstrap})
            fut = admin.delete_records([TopicPartition("txd", 0, 4)])
            assert fut[TopicPartition("txd", 0, 4)].result(30).low_watermark == 4
            # Kafka's rule: the LSO is max(first unstable offset, log start offset)
            assert list_latest(conn, "txd", committed=True) == 4
            assert _read(b.bootstrap, "txd", committed=True, idle_s=1.0) == []
            assert [v for _, _, v in _read(b.bootstrap, "txd", committed=False, idle_s=1.0)] \
                == [b"p4"]
            txn.produce("txd", b"o1", partition=0)
            txn.commit_transaction(30)
            # the coordinator writes the markers after answering EndTxn (as Kafka's does)
            deadline = time.monotonic() + 20
            while list_latest(conn, "txd", committed=True) == 4 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert list_latest(conn, "txd", committed=True) == 7   # o1 at 5, the marker at 6
            assert [v for _, _, v in _read(b.bootstrap, "txd", committed=True)] == [b"p4", b"o1"]
        b.kill()
        b.release_shm()
        b.start()
        with RawConnection(b.port) as conn:
            assert list_latest(conn, "txd", committed=True) == 7
        assert [v for _, _, v in _read(b.bootstrap, "txd", committed=True)] == [b"p4", b"o1"]
