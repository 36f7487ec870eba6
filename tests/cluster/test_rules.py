"""Pure parts of the cluster package: replica assignment, election rules, state tables, the
znode JSON formats."""

import random
from collections import Counter

import pytest

from appliance.cluster import zk_paths as zp
from appliance.cluster.assignment import (
    InvalidPartitions,
    InvalidReplicationFactor,
    assign_replicas,
)
from appliance.cluster.election import (
    controlled_shutdown_leader,
    offline_partition_leader,
    preferred_replica_leader,
    reassign_partition_leader,
)
from appliance.cluster.partition_state import VALID_PREVIOUS as PARTITION_TABLE
from appliance.cluster.partition_state import IllegalStateTransition, PartitionState
from appliance.cluster.partition_state import check_transition as check_partition
from appliance.cluster.replica_state import VALID_PREVIOUS as REPLICA_TABLE
from appliance.cluster.replica_state import ReplicaState
from appliance.cluster.replica_state import check_transition as check_replica

# --- assignment ---------------------------------------------------------------------------------


def test_assignment_matches_kafkas_documented_example():
    # AdminUtils' scaladoc: 5 brokers, 10 partitions, 3 replicas, start index 0
    a = assign_replicas(range(5), 10, 3, start_index=0)
    assert a[0] == (0, 1, 2) and a[1] == (1, 2, 3) and a[4] == (4, 0, 1)
    assert a[5] == (0, 2, 3) and a[9] == (4, 1, 2)  # second round: followers shifted by one more
    first = [a[p][0] for p in range(10)]
    assert first == [0, 1, 2, 3, 4, 0, 1, 2, 3, 4]


def test_assignment_spreads_leaders_and_replicas_from_a_random_start():
    rng = random.Random(7)
    for brokers, n, rf in [([0, 1, 2], 6, 3), ([3, 5, 9, 11], 8, 2), ([1, 2, 3, 4, 5], 50, 3)]:
        a = assign_replicas(brokers, n, rf, rng=rng)
        assert sorted(a) == list(range(n))
        assert all(len(set(r)) == rf and set(r) <= set(brokers) for r in a.values())
        leaders = Counter(r[0] for r in a.values())
        assert max(leaders.values()) - min(leaders.values()) <= 1 and len(leaders) == len(brokers)
        per_broker = Counter(b for r in a.values() for b in r)
        assert max(per_broker.values()) - min(per_broker.values()) <= 1
    starts = {assign_replicas([0, 1, 2], 1, 1, rng=random.Random(s))[0][0] for s in range(30)}
    assert starts == {0, 1, 2}  # the first leader is not always the same broker


def test_assignment_continues_numbering_for_added_partitions():
    a = assign_replicas([0, 1, 2], 2, 2, start_index=0, start_partition=4)
    assert sorted(a) == [4, 5]


@pytest.mark.parametrize("n,rf,err", [(0, 1, InvalidPartitions), (3, 0, InvalidReplicationFactor),
                                      (3, 4, InvalidReplicationFactor)])
def test_assignment_errors(n, rf, err):
    with pytest.raises(err, match="larger"):
        assign_replicas([0, 1, 2], n, rf)


# --- election rules -------------------------------------------------------------------------


def test_offline_leader_is_first_live_isr_member_in_replica_order():
    e = offline_partition_leader([3, 1, 2], isr=[2, 1], live={1, 2}, unclean_allowed=False)
    assert (e.leader, e.isr, e.unclean) == (1, (2, 1), False)
    e = offline_partition_leader([1, 2, 3], isr=[1, 2, 3], live={2, 3}, unclean_allowed=False)
    assert (e.leader, e.isr) == (2, (2, 3))  # dead members leave the ISR


def test_unclean_election_only_when_allowed():
    assert offline_partition_leader([1, 2], isr=[1], live={2}, unclean_allowed=False) is None
    e = offline_partition_leader([1, 2], isr=[1], live={2}, unclean_allowed=True)
    assert (e.leader, e.isr, e.unclean) == (2, (2,), True)
    assert offline_partition_leader([1, 2], isr=[1], live=set(), unclean_allowed=True) is None


def test_preferred_reassign_and_shutdown_rules():
    assert preferred_replica_leader([1, 2], isr=[2, 1], live={1, 2}).leader == 1
    assert preferred_replica_leader([1, 2], isr=[2], live={1, 2}) is None  # not in sync
    assert preferred_replica_leader([1, 2], isr=[1, 2], live={2}) is None  # not alive
    assert reassign_partition_leader([4, 5], isr=[1, 5, 4], live={1, 4, 5}).leader == 4
    assert reassign_partition_leader([4, 5], isr=[1], live={1, 4, 5}) is None
    e = controlled_shutdown_leader([1, 2, 3], isr=[1, 2, 3], live={1, 2, 3}, shutting_down={1})
    assert (e.leader, e.isr) == (2, (2, 3))
    assert controlled_shutdown_leader([1, 2], isr=[1], live={1, 2}, shutting_down={1}) is None


# --- state tables ---------------------------------------------------------------------------


def test_partition_table_allows_the_documented_flow_and_nothing_else():
    P = PartitionState
    for a, b in [(P.NON_EXISTENT, P.NEW), (P.NEW, P.ONLINE), (P.ONLINE, P.OFFLINE), (P.OFFLINE, P.ONLINE),
                 (P.ONLINE, P.ONLINE), (P.OFFLINE, P.NON_EXISTENT), (P.NEW, P.OFFLINE)]:
        check_partition("t-0", a, b)
    for a, b in [(P.NON_EXISTENT, P.ONLINE), (P.ONLINE, P.NEW), (P.ONLINE, P.NON_EXISTENT)]:
        with pytest.raises(IllegalStateTransition, match=f"t-0: {a.value} -> {b.value}"):
            check_partition("t-0", a, b)
    assert set(PARTITION_TABLE) == set(P)


def test_replica_table():
    R = ReplicaState
    flow = [R.NON_EXISTENT, R.NEW, R.ONLINE, R.OFFLINE, R.DELETION_STARTED, R.DELETION_SUCCESSFUL, R.NON_EXISTENT]
    for a, b in zip(flow, flow[1:], strict=False):
        check_replica("r", a, b)
    check_replica("r", R.DELETION_STARTED, R.DELETION_INELIGIBLE)
    check_replica("r", R.DELETION_INELIGIBLE, R.OFFLINE)
    for a, b in [(R.ONLINE, R.DELETION_STARTED), (R.NEW, R.NON_EXISTENT), (R.DELETION_SUCCESSFUL, R.ONLINE)]:
        with pytest.raises(IllegalStateTransition):
            check_replica("r", a, b)
    assert set(REPLICA_TABLE) == set(R)


# --- znode formats --------------------------------------------------------------------------


def test_reads_what_kafka_writes():
    # as a Kafka 2.8 broker registers itself (KafkaZkClient.registerBroker)
    kafka = (b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
             b'"endpoints":["PLAINTEXT://kafka1:9092"],"jmx_port":-1,"port":9092,"host":"kafka1",'
             b'"version":5,"timestamp":"1700000000000"}')
    b = zp.decode_broker(1, kafka)
    assert (b.host, b.port, b.endpoints, b.timestamp_ms) == ("kafka1", 9092, ("PLAINTEXT://kafka1:9092",), 1700000000000)
    ssl_only = b'{"endpoints":["SSL://k:9093"],"host":null,"port":-1,"version":4,"jmx_port":-1,"timestamp":"1"}'
    assert zp.decode_broker(2, ssl_only).port == 9093
    assert zp.decode_topic("t", b'{"version":1,"partitions":{"0":[1,2],"1":[2,3]}}').partitions == {0: (1, 2), 1: (2, 3)}
    s = zp.decode_partition_state("t", 0, b'{"controller_epoch":3,"leader":2,"version":1,"leader_epoch":7,"isr":[2,1]}', 4)
    assert s == zp.LeaderIsr(2, 7, (2, 1), 3, 4)
    assert zp.decode_controller(b'{"version":1,"brokerid":2,"timestamp":"1"}') == 2
    assert zp.decode_controller_epoch(b"12") == 12


def test_round_trips_and_exact_json():
    a = zp.TopicAssignment({1: (2, 3), 0: (1, 2)}, adding={0: (2,)})
    assert zp.encode_topic(a) == (b'{"version":2,"partitions":{"0":[1,2],"1":[2,3]},'
                                  b'"adding_replicas":{"0":[2]},"removing_replicas":{}}')
    assert zp.decode_topic("t", zp.encode_topic(a)) == a
    st = zp.LeaderIsr(1, 0, (1, 2), 5)
    assert zp.encode_partition_state(st) == b'{"controller_epoch":5,"leader":1,"version":1,"leader_epoch":0,"isr":[1,2]}'
    tps = {zp.TopicPartition("a", 1), zp.TopicPartition("b", 0)}
    assert zp.decode_partitions(zp.encode_partitions(tps), "/x") == tps
    moves = {zp.TopicPartition("a", 0): (3, 2, 1)}
    assert zp.encode_reassignment(moves) == b'{"version":1,"partitions":[{"topic":"a","partition":0,"replicas":[3,2,1]}]}'
    assert zp.decode_reassignment(zp.encode_reassignment(moves)) == moves
    assert zp.decode_topic_config("t", zp.encode_topic_config({"retention.ms": 5})) == {"retention.ms": "5"}
    info = zp.BrokerInfo(4, "h", 1, rack="r1")
    assert zp.decode_broker(4, zp.encode_broker(info)).rack == "r1"
    assert zp.split_chroot("a:1,b:2/kafka/x") == ("a:1,b:2", "/kafka/x")
    assert zp.split_chroot("a:1") == ("a:1", "")


@pytest.mark.parametrize("call,where", [
    (lambda: zp.decode_topic("t", b"nope"), "/brokers/topics/t"),
    (lambda: zp.decode_topic("t", b'{"partitions":{"x":[1]}}'), "partition 'x'"),
    (lambda: zp.decode_partition_state("t", 1, b'{"leader":"1"}'), "/brokers/topics/t/partitions/1/state"),
    (lambda: zp.decode_reassignment(b'{"partitions":[{"topic":"t","partition":0,"replicas":["a"]}]}'),
     "replicas of t-0"),
    (lambda: zp.decode_controller_epoch(b"x"), "/controller_epoch"),
    (lambda: zp.decode_broker(3, b'{"endpoints":[]}'), "/brokers/ids/3"),
])
def test_bad_znode_data_names_the_path(call, where):
    with pytest.raises(zp.ZnodeFormatError, match=where):
        call()
