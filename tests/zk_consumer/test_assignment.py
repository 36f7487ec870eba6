"""The rebalance's arithmetic and the consumer's znode formats, without ZooKeeper: every member
computes the same owners from the same registrations."""

from __future__ import annotations

import json
import re

import pytest

from appliance.client.zk_consumer.assignment import assign, topic_threads
from appliance.client.zk_consumer.znodes import (
    Registration,
    decode_broker_address,
    decode_partition_count,
    decode_registration,
    default_consumer_id,
    encode_registration,
)


def _all(regs: dict[str, Registration], counts: dict[str, int], strategy: str) -> dict:
    topics = sorted(counts)
    out: dict = {}
    for me in regs:
        out.update(assign(me, regs, topics, counts, strategy))
    return out


def test_range_gives_sorted_threads_consecutive_partitions_first_ones_one_more():
    regs = {"a": Registration({"t": 2}), "b": Registration({"t": 1})}
    assert _all(regs, {"t": 5}, "range") == {("t", 0): "a-0", ("t", 1): "a-0", ("t", 2): "a-1",
                                             ("t", 3): "a-1", ("t", 4): "b-0"}


def test_roundrobin_deals_every_partition_to_the_sorted_threads_in_turn():
    regs = {"b": Registration({"t1": 1, "t2": 1}), "a": Registration({"t1": 1, "t2": 1})}
    assert _all(regs, {"t1": 3, "t2": 2}, "roundrobin") == {
        ("t1", 0): "a-0", ("t1", 1): "b-0", ("t1", 2): "a-0", ("t2", 0): "b-0", ("t2", 1): "a-0"}


def test_every_partition_has_one_owner_with_more_threads_than_partitions():
    regs = {c: Registration({"t": 2}) for c in ("x", "y", "z")}
    owners = _all(regs, {"t": 4}, "range")
    assert sorted(owners) == [("t", p) for p in range(4)]
    assert sorted(owners.values()) == ["x-0", "x-1", "y-0", "y-1"]


def test_a_filter_registration_covers_matching_topics_but_not_internal_ones():
    reg = Registration({"o.*": 2}, "white_list")
    threads = topic_threads("c", reg, ["orders", "other", "__consumer_offsets", "x"], True)
    assert threads == {"orders": ["c-0", "c-1"], "other": ["c-0", "c-1"]}
    black = topic_threads("c", Registration({"o.*": 1}, "black_list"), ["orders", "x", "__consumer_offsets"], True)
    assert black == {"x": ["c-0"]}


def test_registration_znode_round_trips_in_the_documented_shape():
    data = encode_registration(Registration({"t": 3}, "static", 1234))
    assert json.loads(data) == {"version": 1, "subscription": {"t": 3}, "pattern": "static", "timestamp": "1234"}
    assert decode_registration(data, "/x") == Registration({"t": 3}, "static", 1234)
    assert re.fullmatch(r"grp_[^-]+.*-\d{13}-[0-9a-f]{8}", default_consumer_id("grp"))


def test_broker_and_topic_znodes_are_read_as_the_brokers_write_them():
    assert decode_broker_address(1, b'{"host":"h","port":9092,"endpoints":["PLAINTEXT://h:9092"]}') == ("h", 9092)
    assert decode_broker_address(2, b'{"host":null,"port":-1,"endpoints":["SSL://s:9093","INT://i:9094"],'
                                    b'"listener_security_protocol_map":{"SSL":"SSL","INT":"PLAINTEXT"}}') == ("i", 9094)
    with pytest.raises(ValueError, match="no PLAINTEXT listener"):
        decode_broker_address(3, b'{"host":null,"port":-1,"endpoints":["SSL://s:9093"]}')
    assert decode_partition_count("t", b'{"version":2,"partitions":{"0":[1],"1":[2]}}') == 2
