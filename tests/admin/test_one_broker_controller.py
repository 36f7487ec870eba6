"""ElectLeaders and the reassignment APIs on a standalone broker (issue 42: every API a cluster
serves is served standalone too): a real broker, kafka-python's and confluent-kafka's admin
clients and the raw wire, answered as a one-broker Kafka cluster answers — no election is ever
needed, the only assignment is this broker, nothing is ever being reassigned."""

from __future__ import annotations

import pytest
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient

from appliance.errors import ErrorCode
from tests.broker.wire import RawConnection

TOPIC = "one-broker"


@pytest.fixture(scope="module")
def broker(module_broker):
    admin = AdminClient({"bootstrap.servers": module_broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 3, 1)])[TOPIC].result(30)
    return module_broker


def test_every_broker_advertises_the_controllers_admin_apis(broker):
    with RawConnection(broker.port) as c:
        r = c.request(18, 3, {"client_software_name": "t", "client_software_version": "1"})
    advertised = {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}
    assert advertised[43] == (0, 1) and advertised[45] == (0, 1) and advertised[46] == (0, 0)


@pytest.mark.parametrize("version", (0, 1))
def test_elect_leaders_needs_no_election_on_one_broker(broker, version):
    body = {"topic_partitions": [{"topic": TOPIC, "partitions": [0, 2, 9]},
                                 {"topic": "no-such-topic", "partitions": [0]}], "timeout_ms": 5000}
    if version:
        body["election_type"] = 1  # unclean: still nothing to do
    with RawConnection(broker.port) as c:
        r = c.request(43, version, body)
        everything = c.request(43, version, {**body, "topic_partitions": None})
        odd = c.request(43, 1, {**body, "election_type": 7})
    codes = {(t.topic, p.partition_id): p.error_code for t in r.replica_election_results
             for p in t.partition_result}
    assert codes == {(TOPIC, 0): ErrorCode.ELECTION_NOT_NEEDED, (TOPIC, 2): ErrorCode.ELECTION_NOT_NEEDED,
                     (TOPIC, 9): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                     ("no-such-topic", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert everything.replica_election_results == []
    assert odd.error_code == ErrorCode.INVALID_REQUEST


def test_kafka_python_admin_elects_lists_and_reassigns(broker):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        result = admin.elect_leaders(0, {TOPIC: [0, 1]}, raise_errors=False)
        codes = {(t.topic, p.partition_id): p.error_code for t in result.replica_election_results
                 for p in t.partition_result}
        assert codes == {(TOPIC, 0): ErrorCode.ELECTION_NOT_NEEDED, (TOPIC, 1): ErrorCode.ELECTION_NOT_NEEDED}
        assert admin.list_partition_reassignments() == {}
        answer = admin.alter_partition_reassignments({
            TopicPartition(TOPIC, 0): [broker_id(broker)],   # what it has: accepted, nothing moves
            TopicPartition(TOPIC, 1): [broker_id(broker), 5],  # a broker that is not there
            TopicPartition(TOPIC, 2): None,                  # cancel: nothing in progress
        })
        assert admin.list_partition_reassignments({TOPIC: [0, 1, 2]}) == {}
    finally:
        admin.close()
    assert {tp.partition: err.__name__ if err else None for tp, err in answer.items()} == {
        0: None, 1: "InvalidReplicationAssignmentError", 2: "NoReassignmentInProgressError"}


def broker_id(broker) -> int:
    return int(broker.overrides.get("broker.id", 0))


def test_reassignment_answers_per_partition(broker):
    me = broker_id(broker)
    body = {"timeout_ms": 5000, "topics": [{"name": TOPIC, "partitions": [
        {"partition_index": 0, "replicas": [me]},
        {"partition_index": 1, "replicas": [me, 5]},
        {"partition_index": 2, "replicas": None},
    ]}, {"name": "no-such-topic", "partitions": [{"partition_index": 0, "replicas": [me]}]}]}
    with RawConnection(broker.port) as c:
        r = c.request(45, 0, body)
        dup = c.request(45, 0, {"timeout_ms": 5000, "topics": [{"name": TOPIC, "partitions": [
            {"partition_index": 0, "replicas": [me, me]}, {"partition_index": 1, "replicas": []}]}]})
        listed = c.request(46, 0, {"timeout_ms": 5000, "topics": None})
    assert r.error_code == 0
    codes = {(t.name, p.partition_index): p.error_code for t in r.responses for p in t.partitions}
    assert codes == {(TOPIC, 0): 0, (TOPIC, 1): ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                     (TOPIC, 2): ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                     ("no-such-topic", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert [p.error_code for p in dup.responses[0].partitions] == [ErrorCode.INVALID_REPLICA_ASSIGNMENT] * 2
    assert listed.error_code == 0 and listed.topics == []


def test_confluent_kafka_elect_leaders(broker):
    from confluent_kafka import ElectionType

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    got = admin.elect_leaders(ElectionType.PREFERRED, [CTP(TOPIC, 0)]).result(30)
    [(tp, error)] = got.items()
    assert (tp.topic, tp.partition) == (TOPIC, 0)
    assert error is not None and error.code() == ErrorCode.ELECTION_NOT_NEEDED
