"""reassign-partitions' library: Kafka's JSON files, --generate / --execute / --verify against
a real ZooKeeper with a real controller; bad files and requests name what is wrong. And the
controller's side of AlterPartitionReassignments / ListPartitionReassignments (start, redirect,
cancel, bad input), which shares its path with the znode."""

import json
import random
import threading

import pytest

from appliance.cluster import events as ev
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
from appliance.errors import ErrorCode
from tests.cluster.harness import FakeBroker, force_isr, settled_controller, wait_for


@pytest.fixture
def three(zk_connect):
    bs = [FakeBroker(zk_connect, i, 10000).start() for i in (0, 1, 2)]
    client = open_session(ZkSettings(zk_connect, 30000, 30000))
    store = ZkStore(client)
    settled_controller(bs)
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


# -- AlterPartitionReassignments / ListPartitionReassignments as the controller runs them --------

def _controller(bs):
    return settled_controller(bs).controller


def _ask(bs, make):
    """Put the event ``make(reply)`` on the active controller and return its reply."""
    got = []
    done = threading.Event()

    def reply(body):
        got.append(body)
        done.set()

    _controller(bs).put(make(reply))
    assert done.wait(30), "the controller did not reply"
    return got[0]


def _alter(bs, moves, **kw):
    return _ask(bs, lambda reply: ev.AlterPartitionReassignments(moves, reply, **kw))


def _listed(bs, partitions=None):
    return _ask(bs, lambda reply: ev.ListPartitionReassignments(partitions, reply))


def _stop_deletes(bs, broker_id, tp):
    return [r for b in bs for r in b.channel.requests(5, broker_id) if r.delete_partitions
            and any(t.name == tp.topic and tp.partition in t.partition_indexes for t in r.topics)]


def test_api_starts_lists_and_cancels_back_to_the_original_replicas(three):
    bs, store = three
    tp = TopicPartition("c", 0)
    store.create_topic("c", {0: (0,)})
    wait_for(lambda: store.partition_state(tp))
    assert _alter(bs, {tp: (0, 1, 2)}) == {tp: (ErrorCode.NONE, None)}
    assert store.assignment("c").adding == {0: (1, 2)}
    assert _listed(bs) == {tp: ((0, 1, 2), (1, 2), ())}
    assert _listed(bs, {TopicPartition("c", 5)}) == {}  # only the asked partitions are listed
    assert verify(store, {tp: (0, 1, 2)}) == {tp: IN_PROGRESS}
    # the same target again changes nothing; a new controller would find it in the topic znode
    assert _alter(bs, {tp: (0, 1, 2)}) == {tp: (ErrorCode.NONE, None)}

    assert _alter(bs, {tp: None}) == {tp: (ErrorCode.NONE, None)}  # cancel: replica 0 is in sync
    wait_for(lambda: (a := store.assignment("c")) and a.partitions == {0: (0,)} and not a.adding)
    assert _listed(bs) == {}
    s = store.partition_state(tp)
    assert s.leader == 0 and s.isr == (0,)
    for b in (1, 2):  # the replicas it was adding are stopped and deleted
        wait_for(lambda b=b: _stop_deletes(bs, b, tp), what=f"StopReplica(delete) to broker {b}")
    assert _alter(bs, {tp: None})[tp][0] == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
    assert verify(store, {tp: (0,)}) == {tp: COMPLETE}


def test_api_redirects_a_reassignment_in_progress(three):
    """[0] -> [0,1] still catching up, then -> [0,2]: broker 1's new replica is dropped at once,
    broker 2's added; the original stays the original."""
    bs, store = three
    tp = TopicPartition("r", 0)
    store.create_topic("r", {0: (0,)})
    wait_for(lambda: store.partition_state(tp))
    assert _alter(bs, {tp: (0, 1)}) == {tp: (ErrorCode.NONE, None)}
    assert _alter(bs, {tp: (0, 2)}) == {tp: (ErrorCode.NONE, None)}
    a = store.assignment("r")
    assert a.partitions == {0: (0, 2)} and a.adding == {0: (2,)} and not a.removing.get(0)
    wait_for(lambda: _stop_deletes(bs, 1, tp), what="StopReplica(delete) to broker 1")
    force_isr(store, tp, [0, 2])
    wait_for(lambda: verify(store, {tp: (0, 2)}) == {tp: COMPLETE})


def test_api_bad_input_gets_kafkas_errors_and_changes_nothing(three):
    bs, store = three
    tp = TopicPartition("b", 0)
    store.create_topic("b", {0: (0, 1)})
    wait_for(lambda: store.partition_state(tp))
    before = store.assignment("b"), store.partition_state(tp)
    got = _alter(bs, {TopicPartition("b", 4): (0,), TopicPartition("zz", 0): (1,), tp: (1, 1)})
    assert got[TopicPartition("b", 4)][0] == got[TopicPartition("zz", 0)][0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert got[tp] == (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                       "Duplicate replica ids in partition reassignment replica list: [1, 1]")
    assert _alter(bs, {tp: (0, 7)})[tp] == (
        ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Some brokers specified for partition reassignment are not alive: [7]")
    assert _alter(bs, {tp: ()})[tp][0] == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert _alter(bs, {tp: (-1, 0)})[tp][0] == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert _alter(bs, {tp: (0, 1, 2)}, same_replication_factor=True)[tp][0] == ErrorCode.INVALID_REPLICATION_FACTOR
    assert (store.assignment("b"), store.partition_state(tp)) == before
    assert _listed(bs) == {}


def test_api_cancel_of_a_znode_reassignment_clears_the_znode(three):
    """One path: a reassignment written to /admin/reassign_partitions is cancelled through the
    API, and the znode entry goes, so it cannot start again."""
    bs, store = three
    tp = TopicPartition("z", 0)
    store.create_topic("z", {0: (0,)})
    wait_for(lambda: store.partition_state(tp))
    execute(store, {tp: (1, 2)})
    wait_for(lambda: _listed(bs) == {tp: ((1, 2, 0), (1, 2), (0,))})
    assert _alter(bs, {tp: None}) == {tp: (ErrorCode.NONE, None)}
    wait_for(lambda: store.reassignment() == {} and store.assignment("z").partitions == {0: (0,)})
    assert _listed(bs) == {}
    assert store.partition_state(tp).leader == 0
