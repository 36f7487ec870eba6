"""Shared helpers for the real-client tests: admin shortcuts, a deterministic message set, and
readers that pull a topic back through each client library."""

from __future__ import annotations

import random
import subprocess
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

__all__ = ["create_topic", "expected_value", "produce_numbered", "consume_confluent",
           "consume_kafka_python", "consume_kcat", "check_numbered", "HEADER_KEY"]

HEADER_KEY = "seq"
_ALPHABET = bytes(range(0x21, 0x7F))  # printable, no space/tab/newline: survives kcat's text output


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict | None = None) -> None:
    """Create a topic through confluent-kafka's AdminClient; raises on any error."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(name, partitions, 1, config=config or {})],
                              operation_timeout=10)[name]
    fut.result(timeout=20)


def expected_value(seq: int, size: int = 100) -> bytes:
    """The value message ``seq`` carries: its number, then ``size`` bytes of pseudo-random text."""
    rnd = random.Random(seq)
    prefix = b"%08d:" % seq
    return prefix + bytes(rnd.choices(_ALPHABET, k=size - len(prefix)))


def produce_numbered(bootstrap: str, topic: str, count: int, partitions: int,
                     compression: str = "none", **extra: object) -> None:
    """Produce messages 0..count-1 with confluent-kafka, message i to partition i % partitions,
    key b'k<i>' and header seq=<i>. Asserts every delivery succeeded."""
    conf = {"bootstrap.servers": bootstrap, "compression.type": compression, "linger.ms": 5,
            "batch.num.messages": 10000, "queue.buffering.max.messages": 200000,
            "acks": "all", **extra}
    p = Producer(conf)
    errors: list = []
    delivered = [0]

    def on_delivery(err, msg) -> None:
        if err is not None:
            errors.append(err)
        else:
            delivered[0] += 1

    for i in range(count):
        while True:
            try:
                p.produce(topic, expected_value(i), b"k%d" % i, partition=i % partitions,
                          headers=[(HEADER_KEY, b"%d" % i)], on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.05)
        if i % 1000 == 0:
            p.poll(0)
    left = p.flush(60)
    assert left == 0, f"{left} messages not delivered"
    assert not errors, errors[:5]
    assert delivered[0] == count


def consume_confluent(bootstrap: str, topic: str, partitions: int, count: int,
                      timeout: float = 60.0) -> dict[int, list[tuple[int, bytes | None, bytes, list]]]:
    """Read ``count`` messages from the start of every partition with confluent-kafka (assign,
    no group): {partition: [(offset, key, value, headers)]} in delivery order."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused-assign-only",
                  "enable.auto.commit": False, "enable.auto.offset.store": False,
                  "fetch.wait.max.ms": 100})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: dict[int, list] = {p: [] for p in range(partitions)}
        got = 0
        deadline = time.monotonic() + timeout
        while got < count and time.monotonic() < deadline:
            for m in c.consume(10000, 0.5):
                assert m.error() is None, m.error()
                out[m.partition()].append((m.offset(), m.key(), m.value(), m.headers() or []))
                got += 1
        return out
    finally:
        c.close()


def consume_kafka_python(bootstrap: str, topic: str, partitions: int, count: int,
                         timeout: float = 60.0) -> dict[int, list[tuple[int, bytes | None, bytes, list]]]:
    """As consume_confluent, with kafka-python's KafkaConsumer (group_id=None, assign)."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                      auto_offset_reset="earliest", fetch_max_wait_ms=100)
    try:
        tps = [KTP(topic, p) for p in range(partitions)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        out: dict[int, list] = {p: [] for p in range(partitions)}
        got = 0
        deadline = time.monotonic() + timeout
        while got < count and time.monotonic() < deadline:
            for tp, msgs in c.poll(timeout_ms=500, max_records=50000).items():
                for m in msgs:
                    out[tp.partition].append((m.offset, m.key, m.value, list(m.headers)))
                    got += 1
        return out
    finally:
        c.close()


def consume_kcat(bootstrap: str, topic: str, partitions: int
                 ) -> dict[int, list[tuple[int, bytes | None, bytes, list]]]:
    """Read every partition from the beginning to its end with ``kcat -C -e``; headers are
    parsed from kcat's ``%h`` (name=value,...)."""
    out: dict[int, list] = {}
    for p in range(partitions):
        res = subprocess.run(["kcat", "-b", bootstrap, "-C", "-t", topic, "-p", str(p),
                              "-o", "beginning", "-e", "-q", "-f", "%o\t%k\t%s\t%h\n"],
                             capture_output=True, timeout=120, check=True)
        rows = []
        for line in res.stdout.split(b"\n"):
            if not line:
                continue
            off, key, value, hdrs = line.split(b"\t")
            headers = [(k.decode(), v) for k, _, v in (h.partition(b"=") for h in hdrs.split(b","))]
            rows.append((int(off), key, value, headers))
        out[p] = rows
    return out


def check_numbered(got: dict[int, list], count: int, partitions: int) -> None:
    """Every message 0..count-1 present once, in its partition, in order, byte-identical."""
    total = 0
    for p, rows in got.items():
        expect_seqs = list(range(p, count, partitions))
        seqs = [int(v[:8]) for _, _, v, _ in rows]
        if seqs != expect_seqs:
            first = next((i for i, (a, b) in enumerate(zip(seqs, expect_seqs, strict=False)) if a != b),
                         min(len(seqs), len(expect_seqs)))
            raise AssertionError(f"partition {p}: {len(seqs)} of {len(expect_seqs)} messages, "
                                 f"first mismatch at index {first}")
        offsets = [o for o, _, _, _ in rows]
        assert offsets == list(range(len(rows))), f"partition {p}: offsets not dense from 0"
        for _off, key, value, headers in rows:
            seq = int(value[:8])
            assert value == expected_value(seq)
            assert key == b"k%d" % seq
            assert [(k, bytes(v)) for k, v in headers] == [(HEADER_KEY, b"%d" % seq)]
        total += len(rows)
    assert total == count
