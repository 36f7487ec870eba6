"""confluent-kafka consumers in one group: the partitions are split, a member joining and one
leaving rebalance the group, and with synchronous commits after processing nothing is skipped."""

from __future__ import annotations

import threading
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from tests.broker.clients import create_topic
from tests.groups.raw import connect, describe

PARTITIONS = 6


def _consumer(bootstrap: str, group: str) -> Consumer:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "session.timeout.ms": 6000,
                  "heartbeat.interval.ms": 200, "partition.assignment.strategy": "range",
                  "fetch.wait.max.ms": 50, "topic.metadata.refresh.interval.ms": 1000})
    return c


class _Processing:
    """Polls every consumer in turn; records each (partition, offset) processed and commits the
    batch's next offsets synchronously after processing it."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.processed: set[tuple[int, int]] = set()
        self.commit_failures = 0

    def poll(self, consumers: list[Consumer]) -> None:
        for c in consumers:
            msgs = c.consume(200, 0.05)
            nxt: dict[int, int] = {}
            for m in msgs:
                assert m.error() is None, m.error()
                self.processed.add((m.partition(), m.offset()))
                nxt[m.partition()] = m.offset() + 1
            if nxt:
                try:
                    c.commit(offsets=[TopicPartition(self.topic, p, o) for p, o in nxt.items()],
                             asynchronous=False)
                except KafkaException:
                    # a rebalance took the partitions away: the new owner re-reads from the last
                    # commit, which is exactly the at-least-once contract being tested
                    self.commit_failures += 1


def _split(consumers: list[Consumer]) -> list[set[int]]:
    return [{tp.partition for tp in c.assignment()} for c in consumers]


def _is_partitioned(parts: list[set[int]]) -> bool:
    return sum(len(p) for p in parts) == PARTITIONS and set().union(*parts) == set(range(PARTITIONS))


def _wait_split(proc: _Processing, consumers: list[Consumer], timeout: float, extra=lambda parts: True
                ) -> list[set[int]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        proc.poll(consumers)
        parts = _split(consumers)
        if _is_partitioned(parts) and all(parts) and extra(parts):
            return parts
    raise AssertionError(f"no full split within {timeout} s: {_split(consumers)}")


def test_split_rebalance_and_no_record_skipped(group_broker):
    bs = group_broker.bootstrap
    topic, group = "rebalance-t", "rebalance-g"
    create_topic(bs, topic, PARTITIONS)
    produced: set[tuple[int, int]] = set()
    errors: list = []
    stop = threading.Event()

    def produce() -> None:
        p = Producer({"bootstrap.servers": bs, "linger.ms": 2})

        def done(err, msg) -> None:
            if err is not None:
                errors.append(err)
            else:
                produced.add((msg.partition(), msg.offset()))
        i = 0
        while not stop.is_set() and i < 6000:
            p.produce(topic, b"v%d" % i, b"k%d" % i, partition=i % PARTITIONS, on_delivery=done)
            p.poll(0)
            i += 1
            if i % 50 == 0:
                time.sleep(0.02)  # keep producing through every rebalance below
        assert p.flush(30) == 0

    producer = threading.Thread(target=produce)
    producer.start()
    proc = _Processing(topic)
    consumers = [_consumer(bs, group) for _ in range(3)]
    closed: list[Consumer] = []
    try:
        for c in consumers:
            c.subscribe([topic])
        parts = _wait_split(proc, consumers, 30)
        assert sorted(len(p) for p in parts) == [2, 2, 2]   # range over 6 partitions and 3 members
        with connect(group_broker.port) as conn:
            d = describe(conn, group)
            assert (d.group_state, len(d.members)) == ("Stable", 3)
            ids_before = {m.member_id for m in d.members}
        assert {c.memberid() for c in consumers} == ids_before

        fourth = _consumer(bs, group)
        fourth.subscribe([topic])
        consumers.append(fourth)
        parts = _wait_split(proc, consumers, 30, extra=lambda ps: len(ps[3]) > 0)
        assert sorted(len(p) for p in parts) == [1, 1, 2, 2]

        leaving = consumers.pop(1)
        leaving.close()  # LeaveGroup: the rest rebalance at once, not after a session timeout
        closed.append(leaving)
        t0 = time.monotonic()
        parts = _wait_split(proc, consumers, 30)
        assert time.monotonic() - t0 < 5.5, "the leave should not wait for the 6 s session timeout"
        assert sorted(len(p) for p in parts) == [2, 2, 2]
        with connect(group_broker.port) as conn:
            d = describe(conn, group)
            assert (d.group_state, len(d.members)) == ("Stable", 3)
            assert {m.member_id for m in d.members} == {c.memberid() for c in consumers}

        producer.join(60)
        assert not producer.is_alive() and not errors, errors[:3]
        assert len(produced) == 6000
        deadline = time.monotonic() + 30
        while not produced <= proc.processed and time.monotonic() < deadline:
            proc.poll(consumers)
        missing = produced - proc.processed
        assert not missing, f"{len(missing)} records never processed, e.g. {sorted(missing)[:5]}"
        # and the group's committed offsets reached the end of every partition
        committed = consumers[0].committed([TopicPartition(topic, p) for p in range(PARTITIONS)], 10)
        ends = {p: max(o for q, o in produced if q == p) + 1 for p in range(PARTITIONS)}
        assert {tp.partition: tp.offset for tp in committed} == ends
    finally:
        stop.set()
        producer.join(60)
        for c in consumers:
            c.close()
