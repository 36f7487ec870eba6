"""reassign-partitions' library: Kafka's JSON files, --generate / --execute / --verify against
a real ZooKeeper with a real controller; bad files and requests name what is wrong."""

import json
import random

import pytest

from appliance.cluster.reassignment import (
    COMPLETE,
    FAILED,
    IN_PROGRESS,
    ReassignmentError,
    execute,
    format_reassignment,
    generate,
    parse_reassignment,
    parse_topics_to_move,
    verify,
)
from appliance.cluster.zk_paths import TopicPartition
from appliance.cluster.zk_session import ZkSettings, open_session
from appliance.cluster.zk_store import ZkStore
from tests.cluster.harness import FakeBroker, force_isr, wait_for


@pytest.fixture
def three(zk_connect):
    bs = [FakeBroker(zk_connect, i, 10000).start() for i in (0, 1, 2)]
    client = open_session(ZkSettings(zk_connect, 30000, 30000))
    store = ZkStore(client)
    wait_for(lambda: store.controller_id() != -1)
    yield bs, store
    client.stop()
    client.close()
    for b in bs:
        b.stop()


def test_json_round_trip_in_kafkas_format():
    moves = {TopicPartition("a", 1): (2, 0), TopicPartition("a", 0): (0, 1)}
    text = format_reassignment(moves)
    assert json.loads(text) == {"version": 1, "partitions": [
        {"topic": "a", "partition": 0, "replicas": [0, 1], "log_dirs": ["any", "any"]},
        {"topic": "a", "partition": 1, "replicas": [2, 0], "log_dirs": ["any", "any"]}]}
    assert parse_reassignment(text) == moves
    assert parse_topics_to_move('{"version":1,"topics":[{"topic":"a"},{"topic":"b"}]}') == ["a", "b"]


@pytest.mark.parametrize("text,why", [
    ("{", "not valid JSON"),
    ('{"version":2,"partitions":[]}', "unsupported version 2"),
    ('{"partitions":[]}', "Partition reassignment data file is empty"),
    ('{"partitions":[{"partition":0,"replicas":[1]}]}', "has no 'topic'"),
    ('{"partitions":[{"topic":"a","partition":-1,"replicas":[1]}]}', "'partition' of a"),
    ('{"partitions":[{"topic":"a","partition":0,"replicas":["x"]}]}', "'replicas' of a-0"),
    ('{"partitions":[{"topic":"a","partition":0,"replicas":[]}]}', "Partition replica list cannot be empty"),
    ('{"partitions":[{"topic":"a","partition":0,"replicas":[1,1,2,2]},{"topic":"b","partition":0,"replicas":[3,3]}]}',
     "may not contain duplicate entries: a-0 contains multiple entries for 1,2. b-0 contains multiple entries for 3"),
    ('{"partitions":[{"topic":"a","partition":0,"replicas":[1],"log_dirs":["/d"]}]}', "'log_dirs' of a-0"),
    ('{"partitions":[{"topic":"a","partition":0,"replicas":[1]},{"topic":"a","partition":0,"replicas":[2]}]}',
     "contains duplicate topic partitions: a-0"),
])
def test_bad_reassignment_file_named(text, why):
    with pytest.raises(ReassignmentError, match=why):
        parse_reassignment(text)


def test_generate_execute_verify(three):
    bs, store = three
    store.create_topic("g", {0: (0,), 1: (0,), 2: (0,)})
    for p in range(3):
        wait_for(lambda p=p: store.partition_state(TopicPartition("g", p)))
    current, proposed = generate(store, ["g"], [1, 2], rng=random.Random(1))
    assert current == {TopicPartition("g", p): (0,) for p in range(3)}
    assert set(proposed) == set(current) and all(len(r) == 1 and r[0] in (1, 2) for r in proposed.values())

    moves = {TopicPartition("g", 0): (0, 1, 2)}  # replication factor 1 -> 3
    execute(store, moves)
    with pytest.raises(ReassignmentError, match="There is an existing assignment running"):
        execute(store, moves)
    assert verify(store, moves) == {TopicPartition("g", 0): IN_PROGRESS}
    wait_for(lambda: store.assignment("g").adding == {0: (1, 2)})
    force_isr(store, TopicPartition("g", 0), [0, 1, 2])  # the new replicas caught up
    wait_for(lambda: verify(store, moves) == {TopicPartition("g", 0): COMPLETE})
    assert verify(store, {TopicPartition("g", 1): (2,)}) == {TopicPartition("g", 1): FAILED}


def test_execute_refuses_unknown_partitions_and_brokers_without_writing(three):
    bs, store = three
    store.create_topic("v", {0: (0, 1)})
    with pytest.raises(ReassignmentError, match="non-existent partitions: v-3, zz-0"):
        execute(store, {TopicPartition("v", 3): (0,), TopicPartition("zz", 0): (1,)})
    with pytest.raises(ReassignmentError, match="non-existent brokerIDs: 7"):
        execute(store, {TopicPartition("v", 0): (0, 7)})
    assert store.reassignment() == {}
    with pytest.raises(ReassignmentError, match="topic nope does not exist"):
        generate(store, ["nope"], [0, 1])
    with pytest.raises(ReassignmentError, match=r"not registered: \[9\]"):
        generate(store, ["v"], [0, 9])
    with pytest.raises(ReassignmentError, match="replication factor: 2 larger than available brokers: 1"):
        generate(store, ["v"], [2])


def test_reordered_replicas_move_leadership_to_the_new_first(three):
    """[0,1,2] -> [2,1,0]: no replica added or removed, but the preferred replica changed and is
    in sync, so it leads once the reassignment completes."""
    bs, store = three
    tp = TopicPartition("o", 0)
    store.create_topic("o", {0: (0, 1, 2)})
    wait_for(lambda: (s := store.partition_state(tp)) and s.leader == 0)
    execute(store, {tp: (2, 1, 0)})
    wait_for(lambda: verify(store, {tp: (2, 1, 0)}) == {tp: COMPLETE})
    s = wait_for(lambda: (s := store.partition_state(tp)) and s.leader == 2 and s)
    assert sorted(s.isr) == [0, 1, 2]
