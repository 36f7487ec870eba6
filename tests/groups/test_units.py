"""Unit tests: Java's String.hashCode routing, the state-machine table, the __consumer_offsets
record formats, and the coordinator driven directly (its own append/respond callbacks in memory,
its own clock) so timer behaviour is exact."""

from __future__ import annotations

import struct

import pytest
from kafka.protocol.old.consumer_protocol import (
    ConsumerProtocolMemberAssignment_v0,
    ConsumerProtocolMemberMetadata_v0,
)

from appliance.coordinator import offsets_schema as schema
from appliance.coordinator.consumer_protocol import decode_assignment, encode_assignment
from appliance.coordinator.coordinator import GroupCoordinator
from appliance.coordinator.group import TRANSITIONS, Group, GroupState, IllegalTransition
from appliance.coordinator.routing import java_string_hash, offsets_partition_for
from appliance.errors import ErrorCode
from appliance.protocol.registry import API_BY_KEY
from appliance.records.batch import decode_records
from tests.groups.raw import subscription

S = GroupState


# -- routing ------------------------------------------------------------------------------

@pytest.mark.parametrize("text,expected", [
    ("", 0),
    ("a", 97),
    ("hello", 99162322),
    ("Hello World", -862545276),          # a widely quoted Java value
    ("Aa", 2112), ("BB", 2112),           # the classic hashCode collision
    ("polygenelubricants", -2**31),       # Java Puzzlers: hashes to Integer.MIN_VALUE
    ("\U0001F600", 0xD83D * 31 + 0xDE00),  # outside the BMP: two UTF-16 code units
])
def test_java_string_hash_known_values(text, expected):
    assert java_string_hash(text) == expected


def _java_hash_by_definition(s: str) -> int:
    """s[0]*31^(n-1) + ... + s[n-1] over UTF-16 code units, wrapped to a signed 32-bit int."""
    units = struct.unpack(f">{len(s.encode('utf-16-be')) // 2}H", s.encode("utf-16-be"))
    n = len(units)
    total = sum(u * pow(31, n - 1 - i) for i, u in enumerate(units)) % 2**32
    return total - 2**32 if total >= 2**31 else total


@pytest.mark.parametrize("group", ["console-consumer-12345", "my-group", "ÄÖÜ-gruppe", "x" * 300])
def test_java_string_hash_matches_definition(group):
    assert java_string_hash(group) == _java_hash_by_definition(group)


def test_offsets_partition_uses_kafka_abs():
    # Kafka's Utils.abs(Integer.MIN_VALUE) is 0 (it masks the sign bit), not MIN_VALUE
    assert offsets_partition_for("polygenelubricants", 50) == 0
    h = _java_hash_by_definition("console-consumer-12345")
    assert offsets_partition_for("console-consumer-12345", 50) == (h & 0x7FFFFFFF) % 50
    assert offsets_partition_for("Hello World", 50) == (-862545276 & 0x7FFFFFFF) % 50


# -- state machine ------------------------------------------------------------------------

# Kafka's GroupMetadata: each state and the states it may be entered from
KAFKA_VALID_PREVIOUS = {
    S.PREPARING_REBALANCE: {S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY},
    S.COMPLETING_REBALANCE: {S.PREPARING_REBALANCE},
    S.STABLE: {S.COMPLETING_REBALANCE},
    S.DEAD: {S.STABLE, S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE, S.EMPTY, S.DEAD},
    S.EMPTY: {S.PREPARING_REBALANCE},
}
ALL = [S.EMPTY, S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE, S.STABLE, S.DEAD]


def test_transition_table_matches_kafka():
    for to, previous in KAFKA_VALID_PREVIOUS.items():
        assert {s for s in ALL if to in TRANSITIONS[s]} == previous, to


@pytest.mark.parametrize("frm", ALL)
@pytest.mark.parametrize("to", ALL)
def test_transition_enforced(frm, to):
    g = Group("g", state=frm)
    if frm in KAFKA_VALID_PREVIOUS[to]:
        g.transition(to, 5)
        assert g.state == to and g.state_timestamp_ms == 5
    else:
        with pytest.raises(IllegalTransition):
            g.transition(to, 5)
        assert g.state == frm


# -- __consumer_offsets record formats ----------------------------------------------------

def _kstr(s: str) -> bytes:
    raw = s.encode()
    return struct.pack(">h", len(raw)) + raw


def test_offset_key_layout_and_round_trip():
    k = schema.OffsetKey("grp", "topic-ä", 7)
    raw = schema.encode_offset_key(k)
    assert raw == struct.pack(">h", 1) + _kstr("grp") + _kstr("topic-ä") + struct.pack(">i", 7)
    assert schema.decode_key(raw) == k
    # version 0 keys (older Kafka) have the same fields
    assert schema.decode_key(struct.pack(">h", 0) + raw[2:]) == k


def test_group_key_layout_and_round_trip():
    raw = schema.encode_group_key(schema.GroupKey("grp"))
    assert raw == struct.pack(">h", 2) + _kstr("grp")
    assert schema.decode_key(raw) == schema.GroupKey("grp")


def test_offset_value_round_trip_and_old_versions():
    v = schema.OffsetValue(123456789012, 4, "meta data", 1700000000123)
    raw = schema.encode_offset_value(v)
    assert raw == (struct.pack(">hqi", 3, 123456789012, 4) + _kstr("meta data")
                   + struct.pack(">q", 1700000000123))
    assert schema.decode_offset_value(raw) == v
    # v1 (offset, metadata, commit ts, expire ts): no leader epoch
    v1 = struct.pack(">hq", 1, 42) + _kstr("m") + struct.pack(">qq", 1000, 2000)
    assert schema.decode_offset_value(v1) == schema.OffsetValue(42, -1, "m", 1000)


def test_group_value_round_trip():
    members = (
        schema.MemberValue("m-1", None, "cid", "/127.0.0.1", 30000, 10000, b"\x00sub", b"\x00asg"),
        schema.MemberValue("m-2", "static-2", "cid2", "/10.0.0.2", 60000, 6000, b"", b"x" * 1000),
    )
    v = schema.GroupValue("consumer", 17, "range", "m-1", 1700000000000, members)
    assert schema.decode_group_value(schema.encode_group_value(v)) == v
    empty = schema.GroupValue("consumer", 18, None, None, 5, ())
    assert schema.decode_group_value(schema.encode_group_value(empty)) == empty


@pytest.mark.parametrize("cut", [1, 3, 9, 15])
def test_truncated_records_raise_schema_error(cut):
    raw = schema.encode_offset_value(schema.OffsetValue(1, 2, "abc", 3))
    with pytest.raises(schema.SchemaError):
        schema.decode_offset_value(raw[:cut])
    key = schema.encode_offset_key(schema.OffsetKey("g", "t", 1))
    with pytest.raises(schema.SchemaError):
        schema.decode_key(key[:min(cut, len(key) - 1)])


def test_unknown_key_version_raises():
    with pytest.raises(schema.SchemaError):
        schema.decode_key(struct.pack(">h", 9) + _kstr("g"))


def test_consumer_assignment_matches_kafka_python():
    ours = encode_assignment([("t1", [0, 2]), ("t2", [5])], b"ud")
    theirs = ConsumerProtocolMemberAssignment_v0(0, [("t1", [0, 2]), ("t2", [5])], b"ud").encode()
    assert ours == theirs
    assert decode_assignment(theirs) == [("t1", [0, 2]), ("t2", [5])]
    with pytest.raises(ValueError):
        decode_assignment(b"\x00\x00\x7f\xff\xff\xff")


def test_raw_subscription_matches_kafka_python():
    # the tests' raw members must send subscriptions real clients' assignors can read
    assert subscription(["a", "bb"]) == ConsumerProtocolMemberMetadata_v0(0, ["a", "bb"], b"").encode()


# -- the coordinator driven directly --------------------------------------------------------

class Harness:
    """A GroupCoordinator with in-memory persistence and a hand-moved clock."""

    def __init__(self, delay_ms: int = 0, partitions: int = 4, **config: int) -> None:
        self.now = 1_000_000
        self.log: dict[int, list[bytes]] = {}
        self.answers: dict[object, dict] = {}
        cfg = {"group.initial.rebalance.delay.ms": delay_ms, "group.min.session.timeout.ms": 100,
               "group.max.session.timeout.ms": 100_000, "offsets.retention.minutes": 10080,
               "offset.metadata.max.bytes": 4096, "offsets.retention.check.interval.ms": 600_000,
               **{k.replace("_", "."): v for k, v in config.items()}}
        self.coord = GroupCoordinator(cfg, partitions, append=self._append, respond=self._respond,
                                      partition_exists=lambda t, p: t == "t" and 0 <= p < 6,
                                      now_ms=lambda: self.now)
        for p in range(partitions):
            self.coord.load(p, ())

    def _append(self, partition: int, batch: bytes) -> None:
        self.log.setdefault(partition, []).append(batch)

    def _respond(self, token: object, body: dict) -> None:
        self.answers[token] = body

    def call(self, api_key: int, version: int, body: dict, token: object = None):
        """Encode and decode ``body`` through our protocol module, as the disk worker does."""
        api = API_BY_KEY[api_key]
        req = api.decode_request(version, api.encode_request(version, body))
        return self.coord.handle(api_key, version, req, token, "cid", "/127.0.0.1")

    def join(self, member_id: str, token: object, session_ms: int = 1000) -> dict | None:
        return self.call(11, 5, {"group_id": "g", "session_timeout_ms": session_ms,
                                 "rebalance_timeout_ms": 5000, "member_id": member_id,
                                 "group_instance_id": None, "protocol_type": "consumer",
                                 "protocols": [{"name": "range", "metadata": subscription(["t"])}]},
                         token)

    def records(self, partition: int):
        return [r for b in self.log.get(partition, []) for r in decode_records(b)]


def _join_two(h: Harness) -> tuple[str, str]:
    ids = []
    for tok in ("a", "b"):
        r = h.join("", tok)
        assert r["error_code"] == ErrorCode.MEMBER_ID_REQUIRED
        ids.append(r["member_id"])
    for mid, tok in zip(ids, ("a", "b"), strict=True):
        assert h.join(mid, tok) is None  # held until the initial delay passes
    return ids[0], ids[1]


def test_initial_delay_then_generation_and_sync():
    h = Harness(delay_ms=300)
    a, b = _join_two(h)
    g = h.coord.groups["g"]
    assert g.state == S.PREPARING_REBALANCE and not h.answers
    h.now += 299
    h.coord.poll()
    assert not h.answers
    h.now += 1
    h.coord.poll()
    assert g.state == S.COMPLETING_REBALANCE and g.generation == 1
    leader = h.answers["a"]["leader"]
    assert leader == h.answers["b"]["leader"] == a
    assert len(h.answers["a"]["members"]) == 2 and h.answers["b"]["members"] == []
    # follower syncs first and waits; the leader's assignment releases both
    sync = {"group_id": "g", "generation_id": 1, "group_instance_id": None}
    assert h.call(14, 3, {**sync, "member_id": b, "assignments": []}, "sb") is None
    asg = {a: encode_assignment([("t", [0, 1, 2])]), b: encode_assignment([("t", [3, 4, 5])])}
    r = h.call(14, 3, {**sync, "member_id": a,
                       "assignments": [{"member_id": m, "assignment": v} for m, v in asg.items()]}, "sa")
    assert r is None and g.state == S.STABLE
    assert bytes(h.answers["sb"]["assignment"]) == asg[b]
    assert bytes(h.answers["sa"]["assignment"]) == asg[a]
    # the stored group metadata reloads into a fresh coordinator as the same Stable group
    part = h.coord.partition_for("g")
    fresh = Harness()
    fresh.coord.load(part, h.records(part))
    g2 = fresh.coord.groups["g"]
    assert (g2.state, g2.generation, g2.leader, set(g2.members)) == (S.STABLE, 1, a, {a, b})
    assert g2.members[b].assignment == asg[b]


def test_session_expiry_by_clock_and_rebalance():
    h = Harness(delay_ms=100)
    a, b = _join_two(h)
    h.now += 100
    h.coord.poll()
    sync = {"group_id": "g", "generation_id": 1, "group_instance_id": None}
    h.call(14, 3, {**sync, "member_id": b, "assignments": []}, "sb")
    h.call(14, 3, {**sync, "member_id": a, "assignments": []}, "sa")
    g = h.coord.groups["g"]
    assert g.state == S.STABLE
    hb = {"group_id": "g", "generation_id": 1}
    for _ in range(3):  # a keeps heartbeating, b goes silent
        h.now += 400
        assert h.call(12, 1, {**hb, "member_id": a})["error_code"] == 0
        h.coord.poll()
    assert set(g.members) == {a}
    assert g.state == S.PREPARING_REBALANCE
    assert h.call(12, 1, {**hb, "member_id": a})["error_code"] == ErrorCode.REBALANCE_IN_PROGRESS
    assert h.call(12, 1, {**hb, "member_id": b})["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.join(a, "a2") is None  # the only member rejoins: generation 2 at once
    assert h.answers["a2"]["generation_id"] == 2 and g.state == S.COMPLETING_REBALANCE


def test_offsets_commit_fetch_and_reload():
    h = Harness()
    commit = {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "",
              "retention_time_ms": -1, "topics": [{"name": "t", "partitions": [
                  {"partition_index": 0, "committed_offset": 10, "committed_metadata": "m0"},
                  {"partition_index": 9, "committed_offset": 5, "committed_metadata": ""}]}]}
    r = h.call(8, 3, commit)
    assert [p["error_code"] for p in r["topics"][0]["partitions"]] == [0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    part = h.coord.partition_for("g")
    fresh = Harness()
    fresh.coord.load(part, h.records(part))
    f = fresh.call(9, 3, {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0, 9]}]})
    got = {p["partition_index"]: (p["committed_offset"], p["metadata"]) for p in f["topics"][0]["partitions"]}
    assert got == {0: (10, "m0"), 9: (-1, "")}
    # delete writes tombstones: reloading afterwards finds no group
    assert h.call(42, 1, {"groups_names": ["g"]})["results"][0]["error_code"] == 0
    again = Harness()
    again.coord.load(part, h.records(part))
    assert "g" not in again.coord.groups


@pytest.mark.parametrize("check_ms, expired_at_ms", [(600_000, 600_000), (90_000, 90_000)])
def test_offsets_expire_on_the_retention_check_interval(check_ms, expired_at_ms):
    """offsets.retention.check.interval.ms: an empty group's offsets older than
    offsets.retention.minutes go at the first check after that, not before."""
    h = Harness(offsets_retention_minutes=1, offsets_retention_check_interval_ms=check_ms)
    start = h.now
    h.coord.poll()  # the first check, with nothing to expire
    h.call(8, 3, {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "",
                  "retention_time_ms": -1, "topics": [{"name": "t", "partitions": [
                      {"partition_index": 0, "committed_offset": 10, "committed_metadata": ""}]}]})
    for t in range(0, 700_000, 30_000):
        h.now = start + t
        assert h.coord.poll() <= h.now + check_ms
        assert ("g" in h.coord.groups) == (t < expired_at_ms), t


def test_offset_metadata_max_bytes():
    h = Harness(offset_metadata_max_bytes=3)
    r = h.call(8, 3, {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "",
                      "retention_time_ms": -1, "topics": [{"name": "t", "partitions": [
                          {"partition_index": 0, "committed_offset": 1, "committed_metadata": "abc"},
                          {"partition_index": 1, "committed_offset": 1, "committed_metadata": "abcd"}]}]})
    assert [p["error_code"] for p in r["topics"][0]["partitions"]] == [0, ErrorCode.OFFSET_METADATA_TOO_LARGE]


def test_leadership_load_in_steps_and_unload():
    """Cluster mode's lifecycle of one offsets partition: while it loads its groups answer
    COORDINATOR_LOAD_IN_PROGRESS; loaded in several steps it serves what was committed;
    unloaded (leadership lost) it answers NOT_COORDINATOR, also to a member held in JoinGroup."""
    h = Harness()
    commit = {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "",
              "retention_time_ms": -1}
    for p in range(3):  # three commits: three batches to load
        h.call(8, 3, {**commit, "topics": [{"name": "t", "partitions": [
            {"partition_index": p, "committed_offset": 10 + p, "committed_metadata": ""}]}]})
    part = h.coord.partition_for("g")
    records = h.records(part)
    fetch = {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0, 1, 2]}]}
    new = Harness()
    new.coord.unload(part)
    assert new.call(9, 3, fetch)["error_code"] == ErrorCode.NOT_COORDINATOR
    new.coord.begin_load(part)
    assert new.call(9, 3, fetch)["error_code"] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert new.join("", "x")["error_code"] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    new.coord.load_records(part, records[:1])
    new.coord.load_records(part, records[1:])
    assert new.call(9, 3, fetch)["error_code"] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    new.coord.finish_load(part)
    got = new.call(9, 3, fetch)
    assert [p["committed_offset"] for p in got["topics"][0]["partitions"]] == [10, 11, 12]
    # a member waits in JoinGroup (initial delay); the partition is unloaded under it
    slow = Harness(delay_ms=1000)
    mid = slow.join("", "j")["member_id"]
    assert slow.join(mid, "j2") is None
    slow.coord.unload(part)
    assert slow.answers["j2"]["error_code"] == ErrorCode.NOT_COORDINATOR
    assert "g" not in slow.coord.groups
    assert slow.call(9, 3, fetch)["error_code"] == ErrorCode.NOT_COORDINATOR
