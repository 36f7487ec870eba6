"""Bad group requests in raw protocol get Kafka's specific error codes, never a crash; a group
running alongside is not disturbed (its consumer keeps consuming, its generation unchanged)."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Consumer, Producer

from appliance.errors import ErrorCode as E
from tests.broker.clients import create_topic
from tests.groups.raw import RawMember, connect, describe

TOPIC = "bad-t"


class Calm:
    """A confluent consumer (its own thread) and a raw member in two groups that must stay
    untouched by everything the tests throw at the broker."""

    def __init__(self, broker) -> None:
        self.broker = broker
        self.bs = broker.bootstrap
        create_topic(self.bs, "calm-t", 2)
        self.seen: list[bytes] = []
        self.parts: int = 0
        self.mid: str | None = None
        self.stop = threading.Event()
        self.consumer = Consumer({"bootstrap.servers": self.bs, "group.id": "calm-c",
                                  "auto.offset.reset": "earliest", "heartbeat.interval.ms": 200,
                                  "fetch.wait.max.ms": 50})
        self.consumer.subscribe(["calm-t"])
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        self.raw = RawMember(broker.port, "calm-raw", ["calm-t"], session_timeout_ms=30000)
        self.raw.join()
        self.raw.sync({self.raw.member_id: [("calm-t", [0, 1])]})
        self.member_id = self._wait_member()
        self.workers = sorted(broker.worker_pids("appliance"))
        self.n = 0

    def _run(self) -> None:
        # the consumer is used from this thread only: assignment() from another thread while
        # consume() runs blocks in librdkafka
        while not self.stop.is_set():
            for m in self.consumer.consume(100, 0.05):
                if m.error() is None:
                    self.seen.append(m.value())
            self.parts = len(self.consumer.assignment())
            self.mid = self.consumer.memberid()

    def _wait_member(self) -> str:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.parts == 2 and self.mid:
                return self.mid
            time.sleep(0.05)
        raise AssertionError("calm consumer never got its partitions")

    def check(self) -> None:
        """Still the same members and generation, still consuming, no worker restarted."""
        assert self.raw.heartbeat() == 0
        with connect(self.broker.port) as conn:
            d = describe(conn, "calm-c")
        assert (d.group_state, [m.member_id for m in d.members]) == ("Stable", [self.member_id])
        self.n += 1
        value = b"calm-%d" % self.n
        p = Producer({"bootstrap.servers": self.bs})
        p.produce("calm-t", value)
        assert p.flush(10) == 0
        deadline = time.monotonic() + 10
        while value not in self.seen:
            assert time.monotonic() < deadline, "the calm consumer stopped consuming"
            time.sleep(0.02)
        assert self.mid == self.member_id
        assert sorted(self.broker.worker_pids("appliance")) == self.workers

    def close(self) -> None:
        """Safe on a half-built instance (setup failed part way)."""
        if hasattr(self, "thread"):
            self.stop.set()
            self.thread.join(10)
        if hasattr(self, "consumer"):
            self.consumer.close()
        if hasattr(self, "raw"):
            self.raw.leave()
            self.raw.close()


@pytest.fixture(scope="module")
def calm(group_broker):
    create_topic(group_broker.bootstrap, TOPIC, 2)
    c = Calm.__new__(Calm)
    try:
        c.__init__(group_broker)
        yield c
    finally:
        c.close()


@pytest.fixture
def member(group_broker, calm, request):
    """A Stable single-member group of its own; the calm groups are checked afterwards."""
    m = RawMember(group_broker.port, f"bad-{request.node.name}", [TOPIC], session_timeout_ms=5000)
    m.join()
    m.sync({m.member_id: [(TOPIC, [0, 1])]})
    yield m
    m.close()
    calm.check()


def test_commit_unknown_topic_or_partition(member):
    got = member.commit({(TOPIC, 0): 5, (TOPIC, 7): 5, ("no-such-topic", 0): 1, (TOPIC, -1): 1})
    assert got == {(TOPIC, 0): 0, (TOPIC, 7): E.UNKNOWN_TOPIC_OR_PARTITION,
                   ("no-such-topic", 0): E.UNKNOWN_TOPIC_OR_PARTITION,
                   (TOPIC, -1): E.UNKNOWN_TOPIC_OR_PARTITION}
    assert member.fetch([(TOPIC, 0), (TOPIC, 7), ("no-such-topic", 0)]) == {
        (TOPIC, 0): 5, (TOPIC, 7): -1, ("no-such-topic", 0): -1}


def test_stale_generation(member):
    stale = member.generation - 1
    assert set(member.commit({(TOPIC, 0): 1}, generation=stale).values()) == {E.ILLEGAL_GENERATION}
    assert member.conn.request(12, {"group_id": member.group, "generation_id": stale,
                                    "member_id": member.member_id}, version=1).error_code == E.ILLEGAL_GENERATION
    r = member.conn.request(14, {"group_id": member.group, "generation_id": stale + 5,
                                 "member_id": member.member_id, "assignments": []}, version=1)
    assert r.error_code == E.ILLEGAL_GENERATION
    assert member.fetch([(TOPIC, 0)]) == {(TOPIC, 0): -1}
    assert member.heartbeat() == 0  # the member itself is unharmed


def test_unknown_member(member):
    assert set(member.commit({(TOPIC, 0): 1}, member_id="who-is-this").values()) == {E.UNKNOWN_MEMBER_ID}
    c = member.conn
    assert c.request(12, {"group_id": member.group, "generation_id": member.generation,
                          "member_id": "who-is-this"}, version=1).error_code == E.UNKNOWN_MEMBER_ID
    assert c.request(14, {"group_id": member.group, "generation_id": member.generation,
                          "member_id": "who-is-this", "assignments": []}, version=1).error_code == E.UNKNOWN_MEMBER_ID
    assert c.request(13, {"group_id": member.group, "member_id": "who-is-this"},
                     version=1).error_code == E.UNKNOWN_MEMBER_ID
    r = c.request(11, member.join_body(member_id="who-is-this"), version=5)
    assert r.error_code == E.UNKNOWN_MEMBER_ID
    # a member id for a group that does not exist
    r = c.request(11, member.join_body(group_id="bad-never-seen", member_id="who-is-this"), version=5)
    assert r.error_code == E.UNKNOWN_MEMBER_ID
    assert member.heartbeat() == 0


def test_oversized_commit_metadata(member):
    assert member.commit({(TOPIC, 1): 3}, metadata="m" * 4097) == {(TOPIC, 1): E.OFFSET_METADATA_TOO_LARGE}
    assert member.fetch([(TOPIC, 1)]) == {(TOPIC, 1): -1}
    assert member.commit({(TOPIC, 1): 3}, metadata="m" * 4096) == {(TOPIC, 1): 0}
    r = member.conn.request(9, {"group_id": member.group, "topics": [
        {"name": TOPIC, "partition_indexes": [1]}]}, version=3)
    assert r.topics[0].partitions[0].metadata == "m" * 4096


@pytest.mark.parametrize("over,code", [
    ({"protocols": []}, E.INCONSISTENT_GROUP_PROTOCOL),
    ({"protocol_type": ""}, E.INCONSISTENT_GROUP_PROTOCOL),
    ({"protocol_type": "connect"}, E.INCONSISTENT_GROUP_PROTOCOL),          # the group is "consumer"
    ({"protocols": [{"name": "sticky-only", "metadata": b""}]}, E.INCONSISTENT_GROUP_PROTOCOL),
    ({"session_timeout_ms": 299}, E.INVALID_SESSION_TIMEOUT),               # below the minimum
    ({"session_timeout_ms": 1_800_001}, E.INVALID_SESSION_TIMEOUT),         # above the maximum
    ({"group_id": ""}, E.INVALID_GROUP_ID),
])
@pytest.mark.parametrize("new_member", [True, False], ids=["new", "existing"])
def test_bad_joins(member, over, code, new_member):
    body = member.join_body(**over)
    if new_member:
        body["member_id"] = ""
    r = member.conn.request(11, body, version=5)
    assert r.error_code == code
    assert r.generation_id == -1
    assert member.heartbeat() == 0  # no rebalance was started by a rejected join


@pytest.mark.parametrize("api,body", [
    (12, {"generation_id": 1, "member_id": "m"}),
    (13, {"member_id": "m"}),
    (14, {"generation_id": 1, "member_id": "m", "assignments": []}),
])
def test_empty_group_id_on_member_apis(group_broker, calm, api, body):
    with connect(group_broker.port) as conn:
        assert conn.request(api, {"group_id": "", **body}, version=1).error_code == E.INVALID_GROUP_ID
        assert conn.request(10, {"key": "", "key_type": 0}, version=1).error_code == E.INVALID_GROUP_ID
    calm.check()


def test_member_id_required_then_join(group_broker, calm):
    m = RawMember(group_broker.port, "bad-kip394", [TOPIC])
    r = m.conn.request(11, m.join_body(), version=4)
    assert r.error_code == E.MEMBER_ID_REQUIRED and r.member_id and r.generation_id == -1
    with connect(group_broker.port) as conn:
        assert describe(conn, "bad-kip394").members == []  # only pending until it joins again
    r2 = m.conn.request(11, m.join_body(member_id=r.member_id), version=4)
    assert (r2.error_code, r2.member_id, r2.leader, r2.generation_id) == (0, r.member_id, r.member_id, 1)
    # before v4 the coordinator hands out the id and joins at once
    old = RawMember(group_broker.port, "bad-v3-join", [TOPIC])
    r3 = old.conn.request(11, old.join_body(), version=3)
    assert r3.error_code == 0 and r3.member_id and r3.leader == r3.member_id
    m.close()
    old.close()
    calm.check()


def test_heartbeat_during_rebalance(group_broker, calm):
    a = RawMember(group_broker.port, "bad-rebalance", [TOPIC], session_timeout_ms=5000)
    a.join()
    a.sync({a.member_id: [(TOPIC, [0, 1])]})
    b = RawMember(group_broker.port, "bad-rebalance", [TOPIC], session_timeout_ms=5000)
    joined: list = []
    t = threading.Thread(target=lambda: joined.append(b.join()))
    t.start()
    try:
        deadline = time.monotonic() + 10
        while (code := a.heartbeat()) == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert code == E.REBALANCE_IN_PROGRESS
        # a commit for the previous generation is still accepted while preparing the rebalance
        assert a.commit({(TOPIC, 0): 2}) == {(TOPIC, 0): 0}
        a.join()
        t.join(10)
        assert joined and b.generation == a.generation == 2 and a.leader == a.member_id
        assert b.heartbeat() == 0  # CompletingRebalance: heartbeats are fine (Kafka's NONE)
        follower: list = []
        t2 = threading.Thread(target=lambda: follower.append(b.sync()))
        t2.start()
        a.sync({a.member_id: [(TOPIC, [0])], b.member_id: [(TOPIC, [1])]})
        t2.join(10)
        assert b.assignment == [(TOPIC, [1])] and a.assignment == [(TOPIC, [0])]
        assert a.heartbeat() == b.heartbeat() == 0
    finally:
        t.join(10)
        a.close()
        b.close()
    calm.check()


def test_describe_fetch_delete_unknown_groups(group_broker, calm):
    with connect(group_broker.port) as conn:
        d = describe(conn, "bad-no-such-group")
        assert (d.error_code, d.group_state, d.members) == (0, "Dead", [])
        r = conn.request(9, {"group_id": "bad-no-such-group", "topics": [
            {"name": TOPIC, "partition_indexes": [0]}]}, version=3)
        assert (r.error_code, r.topics[0].partitions[0].committed_offset) == (0, -1)
        r = conn.request(42, {"groups_names": ["bad-no-such-group"]}, version=1)
        assert r.results[0].error_code == E.GROUP_ID_NOT_FOUND
    calm.check()
