"""Group consumers of every client library: kcat -G, kafka-python, aiokafka, and all three
together with confluent-kafka in one group (they share the "range" assignor)."""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time

from confluent_kafka import Consumer, Producer

from tests.broker.clients import create_topic
from tests.groups.raw import connect, describe


def _produce(bootstrap: str, topic: str, count: int, partitions: int, start: int = 0
             ) -> set[tuple[int, int]]:
    """Produce ``count`` records round-robin over partitions; the (partition, offset) of each."""
    out: set[tuple[int, int]] = set()
    errors: list = []
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})

    def done(err, msg) -> None:
        if err is not None:
            errors.append(err)
        else:
            out.add((msg.partition(), msg.offset()))
    for i in range(start, start + count):
        p.produce(topic, b"v%d" % i, b"k%d" % i, partition=i % partitions, on_delivery=done)
    assert p.flush(30) == 0 and not errors, errors[:3]
    return out


def _kcat_group(bootstrap: str, group: str, topic: str) -> list[tuple[int, int]]:
    # no -o: in -G mode kcat seeks every assigned partition to -o, overriding the committed
    # offsets; auto.offset.reset only applies where the group has none, which is what we test
    res = subprocess.run(
        ["kcat", "-b", bootstrap, "-G", group, "-e", "-q", "-X", "auto.offset.reset=earliest",
         "-X", "partition.assignment.strategy=range", "-X", "heartbeat.interval.ms=200",
         "-f", "%p %o\n", topic],
        capture_output=True, timeout=60, check=True)
    return [tuple(map(int, line.split())) for line in res.stdout.decode().splitlines() if line.strip()]


def test_kcat_group_consumes_then_resumes(group_broker):
    bs = group_broker.bootstrap
    topic, group = "kcat-t", "kcat-g"
    create_topic(bs, topic, 3)
    first = _produce(bs, topic, 300, 3)
    got = _kcat_group(bs, group, topic)
    assert sorted(got) == sorted(first)
    assert _kcat_group(bs, group, topic) == []  # offsets were committed: nothing new
    more = _produce(bs, topic, 45, 3, start=300)
    assert sorted(_kcat_group(bs, group, topic)) == sorted(more)


def _kafka_python_consumer(bs: str, group: str, topic: str):
    from kafka import KafkaConsumer
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    return KafkaConsumer(topic, bootstrap_servers=bs, group_id=group, enable_auto_commit=False,
                         auto_offset_reset="earliest", session_timeout_ms=6000,
                         heartbeat_interval_ms=200, fetch_max_wait_ms=50,
                         partition_assignment_strategy=[RangePartitionAssignor])


def _kp_drain(c, want: int, timeout: float = 30) -> list[tuple[int, int]]:
    got: list[tuple[int, int]] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        for tp, msgs in c.poll(timeout_ms=200).items():
            got += [(tp.partition, m.offset) for m in msgs]
        if got:
            c.commit()
    return got


def test_kafka_python_group_consumer(group_broker):
    bs = group_broker.bootstrap
    topic, group = "kp-t", "kp-g"
    create_topic(bs, topic, 3)
    first = _produce(bs, topic, 200, 3)
    c = _kafka_python_consumer(bs, group, topic)
    try:
        assert sorted(_kp_drain(c, 200)) == sorted(first)
        assert {tp.partition for tp in c.assignment()} == {0, 1, 2}
    finally:
        c.close()
    more = _produce(bs, topic, 30, 3, start=200)
    c = _kafka_python_consumer(bs, group, topic)
    try:
        got = _kp_drain(c, 30)
        got += _kp_drain(c, 1, timeout=1.0)  # nothing beyond the new records arrives
        assert sorted(got) == sorted(more)
    finally:
        c.close()


async def _aiokafka_run(bs: str, group: str, topic: str, want: int, timeout: float = 30
                        ) -> list[tuple[int, int]]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor
    c = AIOKafkaConsumer(topic, bootstrap_servers=bs, group_id=group, enable_auto_commit=False,
                         auto_offset_reset="earliest", session_timeout_ms=6000,
                         heartbeat_interval_ms=200, fetch_max_wait_ms=50,
                         partition_assignment_strategy=(RangePartitionAssignor,))
    await c.start()
    got: list[tuple[int, int]] = []
    try:
        deadline = time.monotonic() + timeout
        while len(got) < want and time.monotonic() < deadline:
            for tp, msgs in (await c.getmany(timeout_ms=200)).items():
                got += [(tp.partition, m.offset) for m in msgs]
            if got:
                await c.commit()
    finally:
        await c.stop()
    return got


def test_aiokafka_group_consumer(group_broker):
    bs = group_broker.bootstrap
    topic, group = "aio-t", "aio-g"
    create_topic(bs, topic, 3)
    first = _produce(bs, topic, 200, 3)
    assert sorted(asyncio.run(_aiokafka_run(bs, group, topic, 200))) == sorted(first)
    more = _produce(bs, topic, 30, 3, start=200)
    got = asyncio.run(_aiokafka_run(bs, group, topic, 31, timeout=4))
    assert sorted(got) == sorted(more)


class _Member(threading.Thread):
    """Runs one client's group consumer until told to stop; publishes what it owns and read."""

    def __init__(self, kind: str, bs: str, group: str, topic: str) -> None:
        super().__init__(name=kind, daemon=True)
        self.kind, self.bs, self.group, self.topic = kind, bs, group, topic
        self.parts: set[int] = set()
        self.seen: set[tuple[int, int]] = set()
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            if self.kind == "kafka-python":
                self._run_kafka_python()
            elif self.kind == "aiokafka":
                asyncio.run(self._run_aiokafka())
            else:
                self._run_confluent()
        except BaseException as e:  # surfaced by the test
            self.error = e

    def _run_confluent(self) -> None:
        c = Consumer({"bootstrap.servers": self.bs, "group.id": self.group,
                      "auto.offset.reset": "earliest", "enable.auto.commit": False,
                      "session.timeout.ms": 6000, "heartbeat.interval.ms": 200,
                      "partition.assignment.strategy": "range", "fetch.wait.max.ms": 50})
        c.subscribe([self.topic])
        try:
            while not self.stop.is_set():
                msgs = c.consume(500, 0.1)
                self.seen |= {(m.partition(), m.offset()) for m in msgs if m.error() is None}
                if msgs:
                    c.commit(asynchronous=False)
                self.parts = {tp.partition for tp in c.assignment()}
        finally:
            c.close()

    def _run_kafka_python(self) -> None:
        c = _kafka_python_consumer(self.bs, self.group, self.topic)
        try:
            while not self.stop.is_set():
                recs = c.poll(timeout_ms=100)
                for tp, msgs in recs.items():
                    self.seen |= {(tp.partition, m.offset) for m in msgs}
                if recs:
                    c.commit()
                self.parts = {tp.partition for tp in c.assignment()}
        finally:
            c.close()

    async def _run_aiokafka(self) -> None:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.coordinator.assignors.range import RangePartitionAssignor
        c = AIOKafkaConsumer(self.topic, bootstrap_servers=self.bs, group_id=self.group,
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             session_timeout_ms=6000, heartbeat_interval_ms=200,
                             fetch_max_wait_ms=50, partition_assignment_strategy=(RangePartitionAssignor,))
        await c.start()
        try:
            while not self.stop.is_set():
                recs = await c.getmany(timeout_ms=100)
                for tp, msgs in recs.items():
                    self.seen |= {(tp.partition, m.offset) for m in msgs}
                if recs:
                    await c.commit()
                self.parts = {tp.partition for tp in c.assignment()}
        finally:
            await c.stop()


def test_three_client_libraries_in_one_group(group_broker):
    bs = group_broker.bootstrap
    topic, group = "mixed-t", "mixed-g"
    create_topic(bs, topic, 6)
    members = [_Member(k, bs, group, topic) for k in ("confluent", "kafka-python", "aiokafka")]
    for m in members:
        m.start()
    try:
        # the records go in once the three share the topic: produced before, the first two
        # members could read and commit everything before the third joined, and the partitions
        # it then got held nothing left for it to read (a CI run saw exactly that)
        deadline = time.monotonic() + 45
        while time.monotonic() < deadline:
            parts = [m.parts for m in members]
            if all(len(p) == 2 for p in parts) and set().union(*parts) == set(range(6)):
                break
            assert not any(m.error for m in members), [m.error for m in members]
            time.sleep(0.1)
        else:
            raise AssertionError(f"no split: {[(m.kind, m.parts) for m in members]}")
        produced = _produce(bs, topic, 600, 6)
        while time.monotonic() < deadline + 30:
            if produced <= set().union(*(m.seen for m in members)):
                break
            assert not any(m.error for m in members), [m.error for m in members]
            time.sleep(0.1)
        else:
            raise AssertionError(f"not consumed: {[(m.kind, m.parts, len(m.seen)) for m in members]}")
        with connect(group_broker.port) as conn:
            d = describe(conn, group)
        assert (d.group_state, d.protocol_data, len(d.members)) == ("Stable", "range", 3)
        # the one who owns a partition read all of it
        for m in members:
            assert {p for p, _ in produced if p in m.parts} <= {p for p, _ in m.seen}
    finally:
        for m in members:
            m.stop.set()
        for m in members:
            m.join(30)
    assert not any(m.error for m in members), [m.error for m in members]
