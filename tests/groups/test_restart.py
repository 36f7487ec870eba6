"""A group resumes from its committed offsets after the consumers restart, after the broker is
stopped with SIGTERM, and after the whole broker is SIGKILLed and started again on the same dirs."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.broker.clients import create_topic
from tests.broker_process import running
from tests.groups.conftest import GROUP_OVERRIDES
from tests.groups.raw import RawMember, connect, describe, wait_for
from tests.groups.test_clients import _produce

PARTS = 3


def _consumer(bs: str, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": bs, "group.id": group, "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, "session.timeout.ms": 6000,
                     "heartbeat.interval.ms": 200, "fetch.wait.max.ms": 50})


def _consume(bs: str, group: str, topic: str, want: int, timeout: float = 30,
             commit: bool = True) -> list[tuple[int, int]]:
    """Consume exactly ``want`` records in the group, committing each batch's next offsets
    synchronously."""
    c = _consumer(bs, group)
    c.subscribe([topic])
    got: list[tuple[int, int]] = []
    try:
        deadline = time.monotonic() + timeout
        while len(got) < want and time.monotonic() < deadline:
            msgs = c.consume(want - len(got), 0.1)
            nxt = {}
            for m in msgs:
                assert m.error() is None, m.error()
                got.append((m.partition(), m.offset()))
                nxt[m.partition()] = m.offset() + 1
            if nxt and commit:
                c.commit(offsets=[TopicPartition(topic, p, o) for p, o in nxt.items()],
                         asynchronous=False)
    finally:
        c.close()
    return got


def kill_broker(b) -> None:
    """SIGKILL the whole broker and wait until every worker is gone: a dying network worker's
    SO_REUSEPORT socket would otherwise accept (then reset) the restarted broker's first
    connections. (A zombie is gone: its sockets are closed.)"""
    pids = b.worker_pids("appliance")
    b.kill()
    deadline = time.monotonic() + 10
    while any(running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.02)


def _next_offsets(got: list[tuple[int, int]]) -> dict[int, int]:
    """The offset to commit per partition read (partitions not read have no commit)."""
    out: dict[int, int] = {}
    for p, o in got:
        out[p] = max(out.get(p, 0), o + 1)
    return out


@pytest.mark.parametrize("how", ["consumers", "sigterm", "sigkill"])
def test_group_resumes_from_committed_offsets(broker_factory, how):
    b = broker_factory(overrides=GROUP_OVERRIDES).start()
    topic, group = "resume-t", "resume-g"
    create_topic(b.bootstrap, topic, PARTS)
    produced = _produce(b.bootstrap, topic, 600, PARTS)
    first = _consume(b.bootstrap, group, topic, 250)
    assert len(first) == 250
    committed = _next_offsets(first)
    if how == "sigterm":
        assert b.stop() == 0
        b.start()
    elif how == "sigkill":
        kill_broker(b)
        b.start()
    with connect(b.port) as conn:
        r = conn.request(9, {"group_id": group, "topics": [
            {"name": topic, "partition_indexes": list(range(PARTS))}]})
        assert {p.partition_index: p.committed_offset for p in r.topics[0].partitions} == \
            {p: committed.get(p, -1) for p in range(PARTS)}
        assert describe(conn, group).group_state == "Empty"
    second = _consume(b.bootstrap, group, topic, 350)
    # each partition continues exactly at its commit: nothing skipped, nothing read twice
    for p in range(PARTS):
        offs = [o for q, o in second if q == p]
        if offs:
            start = committed.get(p, 0)
            assert offs == list(range(start, start + len(offs)))
    assert set(first) | set(second) == produced
    assert len(second) == 350


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_stable_group_survives_broker_restart_then_expires(broker_factory, how):
    """Members and generation come back from __consumer_offsets; a member that never heartbeats
    again is removed one session timeout later."""
    b = broker_factory(overrides=GROUP_OVERRIDES).start()
    create_topic(b.bootstrap, "stable-t", 2)
    # long enough to outlast a restart on a loaded machine, short enough to expire in the test
    m = RawMember(b.port, "stable-g", ["stable-t"], session_timeout_ms=8000)
    m.join()
    m.sync({m.member_id: [("stable-t", [0, 1])]})
    assert m.commit({("stable-t", 0): 7, ("stable-t", 1): 9}) == {("stable-t", 0): 0, ("stable-t", 1): 0}
    m.close()
    if how == "sigterm":
        b.stop()
    else:
        kill_broker(b)
    b.start()
    with connect(b.port) as conn:
        d = describe(conn, "stable-g")
        assert d.group_state == "Stable" and [x.member_id for x in d.members] == [m.member_id]
        wait_for(lambda: describe(conn, "stable-g").group_state == "Empty", 30, "the member to expire")
        assert describe(conn, "stable-g").members == []
    again = RawMember(b.port, "stable-g", ["stable-t"])
    assert again.fetch([("stable-t", 0), ("stable-t", 1)]) == {("stable-t", 0): 7, ("stable-t", 1): 9}
    again.join()
    assert again.generation == m.generation + 2  # +1 when the expired member left, +1 now
    again.close()
