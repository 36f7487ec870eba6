"""Transactions driven on the wire by a test, without a transaction coordinator: an idempotent
producer id from InitProducerId, transactional batches in raw Produce requests, and the markers
a coordinator would send (WriteTxnMarkers) sent by the test itself."""

from __future__ import annotations

import subprocess
import time

from confluent_kafka import Consumer, TopicPartition

from appliance.records.batch import build_batch
from tests.broker.wire import RawConnection, produce_body

__all__ = ["TxnDriver", "marker_body", "values_confluent", "values_kafka_python", "values_kcat",
           "list_latest"]

PRODUCE_V = 8
MARKERS_V = 1
LIST_OFFSETS_V = 5


def marker_body(pid: int, epoch: int, commit: bool, topic: str, partitions: list[int],
                coordinator_epoch: int = 0) -> dict:
    return {"markers": [{"producer_id": pid, "producer_epoch": epoch, "transaction_result": commit,
                         "topics": [{"name": topic, "partition_indexes": partitions}],
                         "coordinator_epoch": coordinator_epoch}]}


class TxnDriver:
    """One producer id's batches and markers on one connection to one partition."""

    def __init__(self, conn: RawConnection, topic: str, partition: int = 0) -> None:
        self.conn, self.topic, self.partition = conn, topic, partition
        r = conn.request(22, 1, {"transactional_id": None, "transaction_timeout_ms": 60000})
        assert r.error_code == 0, r
        self.pid, self.epoch = r.producer_id, r.producer_epoch
        self.seq = 0

    def send(self, values: list[bytes], transactional: bool = True) -> tuple[int, int]:
        """(error code, base offset) of one batch of ``values``."""
        b = build_batch([(None, v) for v in values], producer_id=self.pid, producer_epoch=self.epoch,
                        base_sequence=self.seq, is_transactional=transactional)
        r = self.conn.request(0, PRODUCE_V, produce_body(self.topic, self.partition, b, acks=-1))
        p = r.responses[0].partition_responses[0]
        if p.error_code == 0:
            self.seq += len(values)
        return p.error_code, p.base_offset

    def end(self, commit: bool, epoch: int | None = None, partition: int | None = None,
            topic: str | None = None) -> int:
        """The error code of this producer's marker on the partition."""
        r = self.conn.request(27, MARKERS_V, marker_body(
            self.pid, self.epoch if epoch is None else epoch, commit, topic or self.topic,
            [self.partition if partition is None else partition]))
        return r.markers[0].topics[0].partitions[0].error_code


def list_latest(conn: RawConnection, topic: str, committed: bool, partition: int = 0) -> int:
    r = conn.request(2, LIST_OFFSETS_V, {
        "replica_id": -1, "isolation_level": 1 if committed else 0,
        "topics": [{"name": topic, "partitions": [{"partition_index": partition, "current_leader_epoch": -1,
                                                     "timestamp": -1}]}]})
    p = r.topics[0].partitions[0]
    assert p.error_code == 0, p
    return p.offset


def values_confluent(bootstrap: str, topic: str, committed: bool, idle_s: float = 3.0) -> list[bytes]:
    """Every value a confluent-kafka consumer reads from the start until nothing came for
    ``idle_s`` seconds."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "txn-test", "enable.auto.commit": False,
                  "isolation.level": "read_committed" if committed else "read_uncommitted",
                  "fetch.wait.max.ms": 100})
    out: list[bytes] = []
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        last = time.monotonic()
        while time.monotonic() - last < idle_s:
            for m in c.consume(1000, 0.3):
                assert m.error() is None, m.error()
                out.append(m.value())
                last = time.monotonic()
    finally:
        c.close()
    return out


def values_kafka_python(bootstrap: str, topic: str, committed: bool, idle_s: float = 3.0) -> list[bytes]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                      auto_offset_reset="earliest", fetch_max_wait_ms=100,
                      isolation_level="read_committed" if committed else "read_uncommitted")
    out: list[bytes] = []
    try:
        tp = KTP(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        last = time.monotonic()
        while time.monotonic() - last < idle_s:
            for msgs in c.poll(timeout_ms=300).values():
                out.extend(m.value for m in msgs)
                if msgs:
                    last = time.monotonic()
    finally:
        c.close()
    return out


def values_kcat(bootstrap: str, topic: str, committed: bool) -> list[bytes]:
    """kcat -C -e from the beginning: to the end of the partition (the LSO for read_committed)."""
    res = subprocess.run(["kcat", "-b", bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning",
                          "-e", "-q", "-X",
                          f"isolation.level={'read_committed' if committed else 'read_uncommitted'}",
                          "-f", "%s\n"], capture_output=True, timeout=60, check=True)
    return [line for line in res.stdout.split(b"\n") if line]
