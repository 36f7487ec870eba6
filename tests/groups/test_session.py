"""Session timeout: a member that stops heartbeating is removed after its session timeout and its
partitions go to the members left (a SIGKILLed consumer process; a raw member that just closes)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

from confluent_kafka import Consumer

from tests.broker.clients import create_topic
from tests.groups.raw import RawMember, connect, describe

SESSION_MS = 1500

_CHILD = textwrap.dedent("""
    import sys
    from confluent_kafka import Consumer
    bs, group, topic, session = sys.argv[1:5]
    c = Consumer({"bootstrap.servers": bs, "group.id": group, "session.timeout.ms": int(session),
                  "heartbeat.interval.ms": 200, "partition.assignment.strategy": "range",
                  "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    last = None
    while True:
        c.poll(0.05)
        now = sorted(tp.partition for tp in c.assignment())
        if now != last:
            print("ASSIGNED", ",".join(map(str, now)), flush=True)
            last = now
""")


def _consumer(bs: str, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": bs, "group.id": group, "session.timeout.ms": 6000,
                     "heartbeat.interval.ms": 200, "partition.assignment.strategy": "range",
                     "auto.offset.reset": "earliest"})


def _poll_until(c: Consumer, pred, timeout: float) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        c.poll(0.05)
        if pred({tp.partition for tp in c.assignment()}):
            return time.monotonic() - t0
    raise AssertionError(f"assignment {c.assignment()} never matched within {timeout} s")


def test_sigkilled_consumer_expires_and_partitions_move(group_broker):
    bs = group_broker.bootstrap
    topic, group = "sess-kill-t", "sess-kill-g"
    create_topic(bs, topic, 6)
    child = subprocess.Popen([sys.executable, "-c", _CHILD, bs, group, topic, str(SESSION_MS)],
                             stdout=subprocess.PIPE, text=True)
    c = _consumer(bs, group)
    try:
        c.subscribe([topic])
        child_parts: list[str] = []

        def read_child() -> None:
            for line in child.stdout:
                child_parts.append(line.split()[1] if len(line.split()) > 1 else "")
        threading.Thread(target=read_child, daemon=True).start()
        _poll_until(c, lambda p: len(p) == 3 and child_parts and len(child_parts[-1].split(",")) == 3, 30)
        assert set(child_parts[-1].split(",")) | {str(p) for p in (tp.partition for tp in c.assignment())} \
            == {str(p) for p in range(6)}
        os.kill(child.pid, signal.SIGKILL)  # no LeaveGroup, no more heartbeats
        child.wait(10)
        took = _poll_until(c, lambda p: p == set(range(6)), 20)
        # removed by the session timeout, not before it (and not much after)
        assert SESSION_MS / 1000 * 0.6 < took < SESSION_MS / 1000 + 4, took
        with connect(group_broker.port) as conn:
            d = describe(conn, group)
        assert [m.member_id for m in d.members] == [c.memberid()]
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
        c.close()


def test_raw_member_closing_without_leave_expires(group_broker):
    bs = group_broker.bootstrap
    topic, group = "sess-raw-t", "sess-raw-g"
    create_topic(bs, topic, 6)
    c = _consumer(bs, group)
    try:
        c.subscribe([topic])
        _poll_until(c, lambda p: p == set(range(6)), 30)
        raw = RawMember(group_broker.port, group, [topic], session_timeout_ms=SESSION_MS)
        result: list = []

        def join_and_sync() -> None:
            try:
                raw.join()  # held until the confluent consumer rejoins
                raw.sync()  # the confluent leader assigns
                result.append(raw.assignment)
            except BaseException as e:
                result.append(e)
        t = threading.Thread(target=join_and_sync)
        t.start()
        _poll_until(c, lambda p: len(p) == 3, 30)
        t.join(30)
        assert result and not isinstance(result[0], BaseException), result
        (topic_got, raw_parts), = result[0]
        assert topic_got == topic
        assert set(raw_parts) | {tp.partition for tp in c.assignment()} == set(range(6))
        assert raw.leader == c.memberid()
        raw.close()  # gone without LeaveGroup
        t0 = time.monotonic()
        _poll_until(c, lambda p: p == set(range(6)), 20)
        took = time.monotonic() - t0
        assert SESSION_MS / 1000 * 0.6 < took < SESSION_MS / 1000 + 4, took
    finally:
        c.close()
