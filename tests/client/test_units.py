"""Client pieces that need no broker: murmur2, assignors, subscription bytes, config checks,
and what a client pointed at nothing says."""

from __future__ import annotations

import random
import time

import pytest

from appliance.client import Consumer, KafkaConnectionError, Producer, SimpleConsumer
from appliance.client.assignors import RangeAssignor, RoundRobinAssignor, StickyAssignor
from appliance.client.partitioner import murmur2, partition_for
from appliance.client.subscription import (
    Subscription,
    decode_sticky_user_data,
    decode_subscription,
    encode_sticky_user_data,
    encode_subscription,
)
from appliance.errors import InvalidConfigError

# Kafka's UtilsTest.testMurmur2 vectors (clients/src/test/java/org/apache/kafka/common/utils).
KAFKA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize("key,expected", list(KAFKA_MURMUR2.items()))
def test_murmur2_matches_kafka_utils_test(key, expected):
    assert murmur2(key) == expected


def test_partition_for_matches_kafka_python_java_vectors():
    # kafka-python's test_murmur2_java_compatibility (values taken from the Java partitioner)
    for key, part in [(b"", 681), (b"a", 524), (b"ab", 434), (b"abc", 107), (b"123456789", 566), (b"\x00 ", 742)]:
        assert partition_for(key, 1000) == part


def test_partition_for_matches_kafka_python_murmur2():
    from kafka.partitioner.default import murmur2 as kp_murmur2

    rnd = random.Random(7)
    for _ in range(500):
        key = rnd.randbytes(rnd.randrange(0, 40))
        assert murmur2(key) & 0x7FFFFFFF == kp_murmur2(key) & 0x7FFFFFFF


# --- subscription bytes ------------------------------------------------------------------------

def test_subscription_roundtrip_v0_v1():
    owned = [("a", [0, 2]), ("b", [1])]
    s1 = decode_subscription(encode_subscription(["a", "b"], b"ud", owned))
    assert s1 == Subscription(1, ["a", "b"], b"ud", owned, -1)
    s0 = decode_subscription(encode_subscription(["x"], None, version=0))
    assert s0 == Subscription(0, ["x"], None, [], -1)


def test_subscription_matches_aiokafka_encoding():
    from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata

    theirs = ConsumerProtocolMemberMetadata(0, ["t1", "t2"], b"xyz").encode()
    assert encode_subscription(["t1", "t2"], b"xyz", version=0) == theirs
    assert decode_subscription(theirs).topics == ["t1", "t2"]


def test_subscription_rejects_garbage():
    with pytest.raises(ValueError):
        decode_subscription(b"\x00\x01\x7f\xff\xff\xff")


def test_sticky_user_data_matches_java_layout_as_aiokafka_writes_it():
    # Java's StickyAssignor writes the struct without a version prefix, as aiokafka does
    from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyAssignorUserDataV1

    ours = encode_sticky_user_data([("t", [0, 3])], 7)
    theirs = StickyAssignorUserDataV1([("t", [0, 3])], 7).encode()
    assert ours == theirs
    assert decode_sticky_user_data(theirs) == ([("t", [0, 3])], 7)


# --- assignors ---------------------------------------------------------------------------------

def _subs(members: dict[str, list[str]], owned: dict[str, list] | None = None, gen: int = -1) -> dict:
    owned = owned or {}
    return {m: Subscription(1, ts, None, owned.get(m, []), gen) for m, ts in members.items()}


def _flatten(result: dict) -> list[tuple[str, str, int]]:
    return [(m, t, p) for m, ts in result.items() for t, ps in ts.items() for p in ps]


def _check_exactly_once(result: dict, members: dict[str, list[str]], counts: dict[str, int]) -> None:
    seen = [(t, p) for _, t, p in _flatten(result)]
    want = [(t, p) for t, n in counts.items() if any(t in s for s in members.values()) for p in range(n)]
    assert sorted(seen) == sorted(want)
    for m, t, _ in _flatten(result):
        assert t in members[m]


def test_range_assignor_matches_kafka_example():
    # Kafka's RangeAssignor javadoc: C0, C1; t0, t1 with 3 partitions each.
    r = RangeAssignor().assign(_subs({"C0": ["t0", "t1"], "C1": ["t0", "t1"]}), {"t0": 3, "t1": 3})
    assert r == {"C0": {"t0": [0, 1], "t1": [0, 1]}, "C1": {"t0": [2], "t1": [2]}}


def test_roundrobin_assignor_matches_kafka_examples():
    r = RoundRobinAssignor().assign(_subs({"C0": ["t0", "t1"], "C1": ["t0", "t1"]}), {"t0": 3, "t1": 3})
    assert r == {"C0": {"t0": [0, 2], "t1": [1]}, "C1": {"t0": [1], "t1": [0, 2]}}
    # unequal subscriptions (javadoc's second example): C0 t0; C1 t0,t1; C2 t0,t1,t2
    r = RoundRobinAssignor().assign(_subs({"C0": ["t0"], "C1": ["t0", "t1"], "C2": ["t0", "t1", "t2"]}),
                                    {"t0": 1, "t1": 2, "t2": 3})
    assert r == {"C0": {"t0": [0]}, "C1": {"t1": [0]}, "C2": {"t1": [1], "t2": [0, 1, 2]}}


@pytest.mark.parametrize("assignor", [RangeAssignor(), RoundRobinAssignor(), StickyAssignor()])
def test_assignors_assign_every_partition_once(assignor):
    rnd = random.Random(3)
    for _ in range(50):
        topics = [f"t{i}" for i in range(rnd.randrange(1, 4))]
        counts = {t: rnd.randrange(1, 9) for t in topics}
        members = {f"m{i}": rnd.sample(topics, rnd.randrange(1, len(topics) + 1)) for i in range(rnd.randrange(1, 6))}
        _check_exactly_once(assignor.assign(_subs(members), counts), members, counts)


def test_sticky_is_balanced_and_keeps_partitions_when_a_member_leaves():
    members = {"a": ["t"], "b": ["t"], "c": ["t"]}
    first = StickyAssignor().assign(_subs(members), {"t": 9})
    assert sorted(len(v["t"]) for v in first.values()) == [3, 3, 3]
    owned = {m: [("t", v["t"])] for m, v in first.items()}
    del members["b"]
    second = StickyAssignor().assign(_subs(members, owned, gen=1), {"t": 9})
    _check_exactly_once(second, members, {"t": 9})
    assert sorted(len(v["t"]) for v in second.values()) == [4, 5]
    for m in ("a", "c"):
        assert set(first[m]["t"]) <= set(second[m]["t"])  # nobody lost what it had
    # roundrobin in the same situation moves partitions between the survivors
    rr = RoundRobinAssignor().assign(_subs(members), {"t": 9})
    assert not all(set(first[m]["t"]) <= set(rr[m]["t"]) for m in ("a", "c"))


def test_sticky_reads_kafka_user_data_and_resolves_double_claims_by_generation():
    members = {"a": Subscription(0, ["t"], encode_sticky_user_data([("t", [0, 1])], 3), []),
               "b": Subscription(0, ["t"], encode_sticky_user_data([("t", [1, 2])], 4), [])}
    r = StickyAssignor().assign(members, {"t": 4})
    assert 0 in r["a"]["t"] and {1, 2} <= set(r["b"]["t"])
    assert sorted(r["a"]["t"] + r["b"]["t"]) == [0, 1, 2, 3]


def test_sticky_new_member_takes_share_without_reshuffling_others():
    owned = {"a": [("t", [0, 1, 2, 3, 4, 5])]}
    r = StickyAssignor().assign(_subs({"a": ["t"], "b": ["t"]}, owned, gen=2), {"t": 6})
    assert len(r["a"]["t"]) == 3 and len(r["b"]["t"]) == 3
    assert set(r["a"]["t"]) < {0, 1, 2, 3, 4, 5}


# --- configuration and bad input ---------------------------------------------------------------

@pytest.mark.parametrize("cls,conf,needle", [
    (Producer, {"acks": "2"}, "acks='2'"),
    (Producer, {"linger.ms": -1}, "linger.ms=-1"),
    (Producer, {"batch.size": "big"}, "batch.size='big'"),
    (Producer, {"compression.type": "brotli"}, "compression.type='brotli'"),
    (Producer, {"producer.type": "maybe"}, "producer.type='maybe'"),
    (Producer, {"queue.enqueue.timeout.ms": -5}, "queue.enqueue.timeout.ms=-5"),
    (Producer, {"lingr.ms": 5}, "lingr.ms=5: unknown key"),
    (Producer, {"enable.idempotence": True, "acks": 1}, "acks=1"),
    (Consumer, {"auto.offset.reset": "smallest"}, "auto.offset.reset='smallest'"),
    (Consumer, {"partition.assignment.strategy": "fair"}, "partition.assignment.strategy='fair'"),
    (Consumer, {"heartbeat.interval.ms": 20000, "session.timeout.ms": 10000}, "heartbeat.interval.ms=20000"),
    (Consumer, {"enable.auto.commit": "yes"}, "enable.auto.commit='yes'"),
])
def test_invalid_config_names_key_and_value(cls, conf, needle):
    with pytest.raises(InvalidConfigError) as ei:
        cls({"bootstrap.servers": "127.0.0.1:1", **conf})
    assert needle in str(ei.value)


def test_missing_bootstrap_is_a_config_error():
    with pytest.raises(InvalidConfigError, match="bootstrap.servers"):
        Producer({})


def test_config_accepts_aliases_strings_and_kwargs():
    # nothing listens on port 1; the producer only connects when it first needs metadata
    p = Producer({"bootstrap.servers": "127.0.0.1:1", "queue.buffering.max.ms": "7", "acks": "all",
                  "request.required.acks": "all"}, batch_size="1000", producer_type="sync")
    try:
        assert p.linger == 0.007 and p.acks == -1 and p.batch_size == 1000 and p.sync
    finally:
        p.close()


@pytest.mark.parametrize("make", [
    lambda: Producer(bootstrap_servers="127.0.0.1:1", socket_connection_setup_timeout_ms=1000).send("t", b"x"),
    lambda: SimpleConsumer("127.0.0.1:1", socket_connection_setup_timeout_ms=1000).fetch("t", 0, 0),
    lambda: Consumer(bootstrap_servers="127.0.0.1:1", socket_connection_setup_timeout_ms=1000).assign([("t", 0)]),
])
def test_pointed_at_nothing_fails_fast_naming_the_address(make):
    t = time.monotonic()
    with pytest.raises(KafkaConnectionError, match=r"cannot connect to 127\.0\.0\.1:1 within 1 s"):
        make()
    assert time.monotonic() - t < 5
