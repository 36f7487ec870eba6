"""Consumer groups against a real broker: each assignor with our members, a mixed group with
confluent-kafka members, sticky assignments surviving a rebalance, commits and offset reset."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Consumer as CKConsumer

from appliance.client import AdminClient, Consumer, NewTopic, Producer, TopicPartition
from appliance.client.errors import NoOffsetForPartitionError


def _setup(bootstrap: str, topic: str, partitions: int, records: int = 0) -> None:
    with AdminClient(bootstrap) as a:
        a.create_topics([NewTopic(topic, partitions)])
    if records:
        with Producer(bootstrap_servers=bootstrap) as p:
            for i in range(records):
                p.send(topic, b"%d" % i, partition=i % partitions)
            p.flush()


def _consumer(bootstrap: str, group: str, strategy: str = "range", **kw) -> Consumer:
    return Consumer(bootstrap_servers=bootstrap, group_id=group, partition_assignment_strategy=strategy,
                    auto_offset_reset="earliest", heartbeat_interval_ms=300, session_timeout_ms=6000,
                    max_poll_interval_ms=10000, **kw)


def _poll_all_until(consumers: list, cond, timeout: float = 30.0) -> dict:
    """Poll every consumer in turn (each in its own thread, as separate processes would) until
    ``cond(records_by_consumer)`` holds."""
    got: dict[int, list] = {i: [] for i in range(len(consumers))}
    stop = threading.Event()

    def run(i: int, c: Consumer) -> None:
        while not stop.is_set():
            got[i].extend(c.poll(0.2))

    threads = [threading.Thread(target=run, args=(i, c), daemon=True) for i, c in enumerate(consumers)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if cond(got):
                return got
            time.sleep(0.1)
        raise AssertionError(f"condition not met in {timeout} s: {[len(v) for v in got.values()]}, "
                             f"assignments {[c.assignment() for c in consumers]}")
    finally:
        # every poll thread ends before the next call starts its own: a poll may sit in a
        # rebalance (up to max.poll.interval.ms, 10 s here), and a thread left running would go
        # on polling the same consumer beside the next call's, its records lost to that call
        stop.set()
        for t in threads:
            t.join(30)
        assert not any(t.is_alive() for t in threads), "a poll thread did not end"


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "sticky"])
def test_each_assignor_assigns_every_partition_once(module_broker, topic_name, strategy):
    parts = 6
    _setup(module_broker.bootstrap, topic_name, parts, records=120)
    cs = [_consumer(module_broker.bootstrap, f"g-{topic_name}", strategy) for _ in range(3)]
    try:
        for c in cs:
            c.subscribe([topic_name])

        def settled(got):
            seen = {int(r.value) for v in got.values() for r in v}
            return len(seen) == 120 and all(len(c.assignment()) == 2 for c in cs)

        _poll_all_until(cs, settled)
        assigned = sorted(tp for c in cs for tp in c.assignment())
        assert assigned == [TopicPartition(topic_name, p) for p in range(parts)]
        if strategy == "range":
            owned = sorted(sorted(tp.partition for tp in c.assignment()) for c in cs)
            assert owned == [[0, 1], [2, 3], [4, 5]]
    finally:
        for c in cs:
            c.close()


def test_sticky_keeps_assignments_when_a_member_leaves(module_broker, topic_name):
    parts = 6
    _setup(module_broker.bootstrap, topic_name, parts)
    group = f"g-{topic_name}"
    cs = [_consumer(module_broker.bootstrap, group, "sticky") for _ in range(3)]
    for c in cs:
        c.subscribe([topic_name])
    _poll_all_until(cs, lambda got: sum(len(c.assignment()) for c in cs) == parts
                    and all(len(c.assignment()) == 2 for c in cs))
    before = {id(c): set(c.assignment()) for c in cs}
    cs[1].close()
    survivors = [cs[0], cs[2]]
    _poll_all_until(survivors, lambda got: sorted(tp for c in survivors for tp in c.assignment())
                    == [TopicPartition(topic_name, p) for p in range(parts)])
    for c in survivors:
        assert before[id(c)] <= set(c.assignment())  # kept what it had, took a share of the leaver's
        assert len(c.assignment()) == 3
        c.close()


def test_mixed_group_with_confluent_members(module_broker, topic_name):
    parts = 4
    _setup(module_broker.bootstrap, topic_name, parts, records=200)
    group = f"g-{topic_name}"
    ours = _consumer(module_broker.bootstrap, group, "roundrobin")
    ours.subscribe([topic_name])
    ck = CKConsumer({"bootstrap.servers": module_broker.bootstrap, "group.id": group,
                     "partition.assignment.strategy": "roundrobin", "auto.offset.reset": "earliest",
                     "session.timeout.ms": 6000, "heartbeat.interval.ms": 300, "enable.auto.commit": False})
    ck.subscribe([topic_name])
    ck_got: list = []
    ck_assignment: list = []
    stop = threading.Event()

    def ck_loop() -> None:
        while not stop.is_set():
            m = ck.poll(0.2)
            ck_assignment[:] = [tp.partition for tp in ck.assignment()]
            if m is not None and m.error() is None:
                ck_got.append(int(m.value()))

    t = threading.Thread(target=ck_loop, daemon=True)
    t.start()
    try:
        ours_got = _poll_all_until([ours], lambda got: len(ck_assignment) == 2 and len(ours.assignment()) == 2
                                   and len(got[0]) + len(ck_got) >= 200)[0]
    finally:
        stop.set()
        t.join(5)
    mine = sorted(tp.partition for tp in ours.assignment())
    assert sorted(mine + ck_assignment) == list(range(parts))
    assert sorted({int(r.value) for r in ours_got} | set(ck_got)) == list(range(200))
    # (which member read which record depends on who joined first: our member may read every
    # partition alone before confluent's member joins)
    ck.close()
    ours.close()


def test_commits_resume_position_and_listener_hears_rebalance(module_broker, topic_name):
    _setup(module_broker.bootstrap, topic_name, 2, records=40)
    group = f"g-{topic_name}"
    events = []

    class Listener:
        def on_partitions_revoked(self, tps):
            events.append(("revoked", sorted(tps)))

        def on_partitions_assigned(self, tps):
            events.append(("assigned", sorted(tps)))

    c = _consumer(module_broker.bootstrap, group, enable_auto_commit=False, max_poll_records=10)
    c.subscribe([topic_name], listener=Listener())
    recs = []
    while len(recs) < 10:
        recs += c.poll(2.0)
    c.commit_sync()
    positions = {tp: c.position(tp) for tp in c.assignment()}
    assert {tp: c.committed(tp) for tp in c.assignment()} == positions
    done = []
    c.commit_async(callback=lambda offs, err: done.append(err))
    deadline = time.monotonic() + 5
    while not done and time.monotonic() < deadline:
        time.sleep(0.05)
    assert done == [None]
    c.close()
    assert events[0] == ("assigned", [TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)])
    c2 = _consumer(module_broker.bootstrap, group, enable_auto_commit=False)
    c2.subscribe([topic_name])
    rest = []
    while len(rest) < 40 - sum(positions.values()):
        rest += c2.poll(2.0)
    assert {(r.partition, r.offset) for r in rest}.isdisjoint({(r.partition, r.offset) for r in recs})
    assert min(r.offset for r in rest if r.partition == 0) == positions[TopicPartition(topic_name, 0)]
    c2.close()


def test_offset_reset_none_and_latest(module_broker, topic_name):
    _setup(module_broker.bootstrap, topic_name, 1, records=5)
    c = Consumer(bootstrap_servers=module_broker.bootstrap, group_id=f"g-{topic_name}", auto_offset_reset="none")
    c.assign([(topic_name, 0)])
    with pytest.raises(NoOffsetForPartitionError, match="auto.offset.reset=none"):
        c.poll(0.5)
    c.close()
    c = Consumer(bootstrap_servers=module_broker.bootstrap, auto_offset_reset="latest")
    c.assign([(topic_name, 0)])
    assert c.position((topic_name, 0)) == 5
    c.seek((topic_name, 0), 2)
    assert [r.offset for r in c.poll(2.0)] == [2, 3, 4]
    c.close()


def test_pattern_subscription(module_broker, topic_name):
    import re

    for suffix in ("a", "b"):
        _setup(module_broker.bootstrap, f"{topic_name}.{suffix}", 1, records=3)
    c = _consumer(module_broker.bootstrap, f"g-{topic_name}")
    c.subscribe(re.compile(re.escape(topic_name) + r"\..*"))
    got = []
    deadline = time.monotonic() + 20
    while len(got) < 6 and time.monotonic() < deadline:
        got += c.poll(0.5)
    assert sorted({r.topic for r in got}) == [f"{topic_name}.a", f"{topic_name}.b"]
    c.close()


def test_partitions_added_to_a_subscribed_topic_are_assigned(module_broker, topic_name):
    """The leader compares the group's partition counts with its last assignment as often as
    metadata ages, and rebalances when a topic grew (issue 43: the assignment stayed [t-0]);
    two members end up owning the grown topic's partitions once each, and read the new ones."""
    bs = module_broker.bootstrap
    _setup(bs, topic_name, 1, records=2)
    members = [_consumer(bs, f"g-{topic_name}", metadata_max_age_ms=1000) for _ in range(2)]
    for c in members:
        c.subscribe([topic_name])
    _poll_all_until(members, lambda got: sum(len(v) for v in got.values()) == 2)
    with AdminClient(bs) as a:
        a.create_partitions({topic_name: 3})
    with Producer(bootstrap_servers=bs) as p:
        sent = [p.send(topic_name, b"new-%d" % part, partition=part) for part in (1, 2)]
        p.flush()
        assert [(f.result(10).partition, f.result(10).offset) for f in sent] == [(1, 0), (2, 0)]

    def grown(got: dict) -> bool:
        owned = sorted(tp.partition for c in members for tp in c.assignment())
        new = {r.value for v in got.values() for r in v}
        return owned == [0, 1, 2] and {b"new-1", b"new-2"} <= new

    _poll_all_until(members, grown, timeout=20)
    for c in members:
        c.close()
