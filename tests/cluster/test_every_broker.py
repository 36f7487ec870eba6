"""Every topic through every broker (issue 41): a real ZooKeeper, three real brokers, topics of
replication factor 1, 2 and 3 with 6 partitions each, so each broker leads some partitions,
follows some and (RF 1, 2) hosts no replica of others.

- Every partition-level request (Produce, Fetch, ListOffsets, DeleteRecords, DescribeProducers)
  sent to each broker answers as Kafka does for that broker's role: the leader serves it, a
  follower and a broker with no replica answer NOT_LEADER_OR_FOLLOWER (retriable: the client
  looks for the leader), and a partition the cluster does not have UNKNOWN_TOPIC_OR_PARTITION.
  Topic-level requests (Metadata, DescribeConfigs) answer alike on every broker.
- Consumer groups (confluent-kafka and kafka-python) commit every partition's offset and read
  all of them back through every broker, across a restart of the consumer and a SIGKILL and
  restart of the coordinator's broker. An OffsetCommit naming a partition that does not exist
  gets UNKNOWN_TOPIC_OR_PARTITION for that partition only.
- CreateTopics then, at once, CreatePartitions (without and with an assignment) through each
  broker: every broker sees the new partitions, a producer writes to each, and a group consumer
  subscribed before the growth picks them up. Bad CreatePartitions get Kafka's errors and
  change nothing.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from appliance.errors import ErrorCode
from appliance.records.batch import build_batch
from tests.broker.wire import RawConnection, fetch_body, metadata_body, produce_body
from tests.cluster.harness import cluster_broker, kill_brokers, start_brokers, wait_for, wait_joined

PARTITIONS = 6
RFS = (1, 2, 3)
OK = 0
NOT_LEADER = int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
UNKNOWN = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
MISSING_PARTITION = 99


def _topic(rf: int) -> str:
    return f"every-rf{rf}"


@pytest.fixture(scope="module")
def cluster(zk_server, tmp_path_factory):
    connect = f"{zk_server.connect}/e{uuid.uuid4().hex[:10]}"
    root = tmp_path_factory.mktemp("every")
    brokers = {i: cluster_broker(root / f"b{i}", connect, i, overrides={
        "offsets.topic.num.partitions": "3", "group.initial.rebalance.delay.ms": "0",
        "replica.lag.time.max.ms": "10000"}) for i in range(3)}
    try:
        start_brokers(brokers.values())
        wait_joined(brokers.values(), 3)
        boot = ",".join(b.bootstrap for b in brokers.values())
        admin = AdminClient({"bootstrap.servers": boot})
        for f in admin.create_topics([NewTopic(_topic(rf), PARTITIONS, rf) for rf in RFS]).values():
            f.result(60)
        yield {"brokers": brokers, "boot": boot}
    finally:
        kill_brokers(brokers.values())


def _metadata(port: int, topics: list[str] | None) -> dict:
    with RawConnection(port) as c:
        return c.request(3, 9, metadata_body(topics))


def _layout(cluster: dict, topic: str) -> tuple[dict[int, tuple[int, list[int]]], int]:
    """partition -> (leader, replicas), and the controller, once every broker agrees on them."""
    def agreed():
        seen = []
        for b in cluster["brokers"].values():
            md = _metadata(b.port, [topic])
            t = md.topics[0]
            if t.error_code or len(t.partitions) != PARTITIONS or any(p.leader_id < 0 for p in t.partitions):
                return None
            seen.append(({p.partition_index: (p.leader_id, sorted(p.replica_nodes)) for p in t.partitions},
                         md.controller_id))
        return seen[0] if all(s == seen[0] for s in seen) else None
    return wait_for(agreed, 60, f"every broker to agree on {topic}'s leaders")


def _role(broker_id: int, leader: int, replicas: list[int]) -> str:
    return "leader" if broker_id == leader else "follower" if broker_id in replicas else "no replica"


def _partition_codes(port: int, topic: str, partition: int) -> dict[str, int]:
    """Each partition-level API's error code for ``topic``/``partition`` at the broker on ``port``."""
    with RawConnection(port) as c:
        r = c.request(0, 7, produce_body(topic, partition, build_batch([(None, b"probe")])))
        produce = r.responses[0].partition_responses[0].error_code
        r = c.request(1, 10, fetch_body(topic, partition, 0))
        fetch = r.responses[0].partitions[0].error_code
        r = c.request(1, 11, fetch_body(topic, partition, 0))
        fetch_v11 = r.responses[0].partitions[0].error_code
        r = c.request(2, 2, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": partition, "timestamp": -1}]}]})
        list_offsets = r.topics[0].partitions[0].error_code
        r = c.request(21, 1, {"topics": [{"name": topic, "partitions": [
            {"partition_index": partition, "offset": 0}]}], "timeout_ms": 5000})
        delete_records = r.topics[0].partitions[0].error_code
        r = c.request(61, 0, {"topics": [{"name": topic, "partition_indexes": [partition]}]})
        describe_producers = r.topics[0].partitions[0].error_code
    return {"Produce": produce, "Fetch": fetch, "Fetch v11": fetch_v11, "ListOffsets": list_offsets,
            "DeleteRecords": delete_records, "DescribeProducers": describe_producers}


@pytest.mark.parametrize("rf", RFS)
def test_partition_requests_answer_by_role_on_every_broker(cluster, rf):
    topic = _topic(rf)
    layout, controller = _layout(cluster, topic)
    roles_seen = set()
    for bid, b in cluster["brokers"].items():
        for p, (leader, replicas) in layout.items():
            role = _role(bid, leader, replicas)
            roles_seen.add(role)
            want = OK if role == "leader" else NOT_LEADER
            codes = _partition_codes(b.port, topic, p)
            where = f"{topic}-{p} at broker {bid} ({role}, controller {controller})"
            expected = dict.fromkeys(codes, want)
            if role == "follower":  # KIP-392: a follower serves a consumer's Fetch v11+
                expected["Fetch v11"] = OK
            assert codes == expected, where
        # a partition and a topic the cluster does not have: unknown on every broker
        codes = _partition_codes(b.port, topic, MISSING_PARTITION)
        assert codes == dict.fromkeys(codes, UNKNOWN), f"{topic}-{MISSING_PARTITION} at broker {bid}"
        codes = _partition_codes(b.port, f"no-such-{rf}", 0)
        assert codes == dict.fromkeys(codes, UNKNOWN), f"no-such-{rf} at broker {bid}"
    want_roles = {"leader"} | ({"follower"} if rf > 1 else set()) | ({"no replica"} if rf < 3 else set())
    assert roles_seen == want_roles


@pytest.mark.parametrize("rf", RFS)
def test_topic_requests_answer_alike_on_every_broker(cluster, rf):
    topic = _topic(rf)
    _layout(cluster, topic)  # Metadata: every broker the same leaders (asserted inside)
    for bid, b in cluster["brokers"].items():
        with RawConnection(b.port) as c:
            r = c.request(32, 1, {"resources": [
                {"resource_type": 2, "resource_name": topic, "configuration_keys": ["cleanup.policy"]},
                {"resource_type": 2, "resource_name": f"no-such-{rf}", "configuration_keys": None}],
                "include_synonyms": False})
        assert [x.error_code for x in r.results] == [OK, UNKNOWN], f"DescribeConfigs at broker {bid}"
        assert [(e.name, e.value) for e in r.results[0].configs] == [("cleanup.policy", "delete")]


def _committed(boot: str, group: str, topic: str, count: int = PARTITIONS) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": boot, "group.id": group})
    try:
        return {tp.partition: tp.offset for tp in
                c.committed([TopicPartition(topic, p) for p in range(count)], timeout=30)}
    finally:
        c.close()


def _produce(boot: str, topic: str, per_partition: int, partitions: int = PARTITIONS) -> None:
    p = Producer({"bootstrap.servers": boot, "acks": "all"})
    for i in range(per_partition * partitions):
        p.produce(topic, b"v%d" % i, partition=i % partitions)
    assert p.flush(60) == 0, "records left unacknowledged"


def _consume_and_commit(boot: str, group: str, topic: str, expect: int) -> dict[int, int]:
    """Consume ``expect`` records as ``group``, commit synchronously; the committed offsets."""
    c = Consumer({"bootstrap.servers": boot, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([topic])
    got: dict[int, int] = {}
    deadline = time.monotonic() + 90
    n = 0
    while n < expect and time.monotonic() < deadline:
        m = c.poll(1.0)
        if m is None or m.error():
            continue
        n += 1
        got[m.partition()] = m.offset() + 1
    assert n == expect, f"consumed {n} of {expect}"
    done = c.commit(asynchronous=False)
    c.close()
    assert all(tp.error is None for tp in done), done
    return {tp.partition: tp.offset for tp in done}


def _coordinator(cluster: dict, group: str) -> int:
    with RawConnection(next(iter(cluster["brokers"].values())).port) as c:
        r = wait_for(lambda: (lambda r: r if r.error_code == 0 else None)(
            c.request(10, 1, {"key": group, "key_type": 0})), 30, "a coordinator")
    return r.node_id


@pytest.mark.parametrize("rf", (1, 2))
def test_group_commits_every_partition_through_every_broker(cluster, rf):
    topic, group = f"commits-rf{rf}", f"commits-rf{rf}"
    admin = AdminClient({"bootstrap.servers": cluster["boot"]})  # kept alive while we wait
    admin.create_topics([NewTopic(topic, PARTITIONS, rf)])[topic].result(60)
    per = 20
    _produce(cluster["boot"], topic, per)
    committed = _consume_and_commit(cluster["boot"], group, topic, per * PARTITIONS)
    assert committed == dict.fromkeys(range(PARTITIONS), per)
    for bid, b in cluster["brokers"].items():  # read back through each broker alone
        assert _committed(b.bootstrap, group, topic) == committed, f"through broker {bid}"

    # a restarted consumer carries on after the commits: it reads only what came after
    _produce(cluster["boot"], topic, 5)
    assert _consume_and_commit(cluster["boot"], group, topic, 5 * PARTITIONS) == \
        dict.fromkeys(range(PARTITIONS), per + 5)

    # the coordinator's broker SIGKILLed and restarted: every commit is still there
    coord = cluster["brokers"][_coordinator(cluster, group)]
    coord.kill()
    coord.start(120)
    wait_joined(cluster["brokers"].values(), 3, 120)
    for bid, b in cluster["brokers"].items():
        assert wait_for(lambda b=b: _committed(b.bootstrap, group, topic) ==
                        dict.fromkeys(range(PARTITIONS), per + 5), 90, f"the commits through broker {bid}")


def test_kafka_python_group_commits_every_partition(cluster):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP
    from kafka.structs import OffsetAndMetadata

    topic, group = _topic(2), "kafka-python-commits"
    for bid, b in cluster["brokers"].items():
        c = KafkaConsumer(bootstrap_servers=b.bootstrap, group_id=group, enable_auto_commit=False)
        try:
            offsets = {KTP(topic, p): OffsetAndMetadata(10 * bid + p + 1, "", -1) for p in range(PARTITIONS)}
            c.commit(offsets)
            for other in cluster["brokers"].values():
                got = _committed(other.bootstrap, group, topic)
                assert got == {p: 10 * bid + p + 1 for p in range(PARTITIONS)}, \
                    f"committed through broker {bid}, read through {other.bootstrap}"
            assert {p: c.committed(KTP(topic, p)) for p in range(PARTITIONS)} == \
                {p: 10 * bid + p + 1 for p in range(PARTITIONS)}
        finally:
            c.close()


def test_offset_commit_of_a_missing_partition_fails_for_it_alone(cluster):
    topic, group = _topic(1), "simple-commit"
    coord = cluster["brokers"][_coordinator(cluster, group)]
    parts = list(range(PARTITIONS)) + [MISSING_PARTITION]
    with RawConnection(coord.port) as c:
        r = wait_for(lambda: (lambda r: r if r.topics[0].partitions[0].error_code == 0 else None)(
            c.request(8, 2, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                             "retention_time_ms": -1, "topics": [{"name": topic, "partitions": [
                                 {"partition_index": p, "committed_offset": 7, "committed_metadata": ""}
                                 for p in parts]}]})), 30, "the coordinator to load")
        codes = {p.partition_index: p.error_code for p in r.topics[0].partitions}
        assert codes == {**dict.fromkeys(range(PARTITIONS), OK), MISSING_PARTITION: UNKNOWN}
    for b in cluster["brokers"].values():
        assert _committed(b.bootstrap, group, topic) == dict.fromkeys(range(PARTITIONS), 7)


def _partition_count(port: int, topic: str) -> int:
    return len(_metadata(port, [topic]).topics[0].partitions)


@pytest.mark.parametrize("via", (0, 1, 2))
def test_create_partitions_at_once_through_each_broker(cluster, via):
    b = cluster["brokers"][via]
    rf = 1 + via % 2  # RF 1 through brokers 0 and 2, RF 2 through broker 1
    topic = f"grow-{via}"
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(topic, 3, rf)])[topic].result(60)
    group = f"grow-group-{via}"
    consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 1000})
    consumer.subscribe([topic])
    try:
        wait_for(lambda: consumer.poll(0.2) is None and consumer.assignment(), 60, "the first assignment")
        # at once, without an assignment, then with one (RF consistent, known brokers)
        admin.create_partitions([NewPartitions(topic, 6)])[topic].result(60)
        others = [i for i in cluster["brokers"] if i != via]
        replicas = [[via, others[0]][:rf], [others[1], via][:rf]]
        admin.create_partitions([NewPartitions(topic, 8, replicas)])[topic].result(60)
        for other in cluster["brokers"].values():
            assert wait_for(lambda o=other: _partition_count(o.port, topic) == 8, 30,
                            f"8 partitions at {other.bootstrap}")
        layout = {p.partition_index: sorted(p.replica_nodes) for p in _metadata(b.port, [topic]).topics[0].partitions}
        assert layout[6] == sorted(replicas[0]) and layout[7] == sorted(replicas[1])
        _produce(b.bootstrap, topic, 10, 8)
        seen: set[int] = set()
        deadline = time.monotonic() + 90
        while len(seen) < 8 and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and not m.error():
                seen.add(m.partition())
        assert seen == set(range(8)), "the group consumer did not pick up the new partitions"
    finally:
        consumer.close()


def test_bad_create_partitions_change_nothing(cluster):
    topic = _topic(2)
    for bid, b in cluster["brokers"].items():
        def ask(count, assignments=None, name=topic, b=b):
            with RawConnection(b.port) as c:
                r = c.request(37, 1, {"topics": [{"name": name, "count": count, "assignments": assignments}],
                                      "timeout_ms": 10000, "validate_only": False})
            return r.results[0].error_code, r.results[0].error_message

        assert ask(PARTITIONS - 2)[0] == ErrorCode.INVALID_PARTITIONS, f"lower count at broker {bid}"
        assert ask(PARTITIONS)[0] == ErrorCode.INVALID_PARTITIONS, f"same count at broker {bid}"
        code, msg = ask(PARTITIONS + 1, [{"broker_ids": [0, 7]}])
        assert (code, "7" in msg) == (ErrorCode.INVALID_REPLICA_ASSIGNMENT, True), f"unknown broker at {bid}"
        code, msg = ask(PARTITIONS + 2, [{"broker_ids": [0, 1]}])
        assert code == ErrorCode.INVALID_REPLICA_ASSIGNMENT and "2" in msg, f"wrong length at broker {bid}"
        assert ask(PARTITIONS + 1, [{"broker_ids": [0]}])[0] == ErrorCode.INVALID_REPLICA_ASSIGNMENT
        assert ask(PARTITIONS + 1, [{"broker_ids": [1, 1]}])[0] == ErrorCode.INVALID_REPLICA_ASSIGNMENT
        assert ask(PARTITIONS + 1, name="no-such-topic")[0] == UNKNOWN
        assert ask(1 << 30)[0] == ErrorCode.INVALID_PARTITIONS  # bounded before any work
        for other in cluster["brokers"].values():
            assert _partition_count(other.port, topic) == PARTITIONS


@pytest.mark.parametrize("rf", RFS)
def test_controller_only_requests_answer_on_the_controller_and_refuse_elsewhere(cluster, rf):
    """ElectLeaders (preferred) and ListPartitionReassignments: the controller answers (every
    partition already led by its preferred replica: ELECTION_NOT_NEEDED), every other broker
    NOT_CONTROLLER, so clients go to the controller Metadata names."""
    from appliance.cli.controller_request import call

    topic = _topic(rf)
    layout, controller = _layout(cluster, topic)
    preferred = {p for p, (leader, replicas) in layout.items()
                 if leader == _metadata_replicas(cluster, topic)[p][0]}
    for bid, b in cluster["brokers"].items():
        elect = call("127.0.0.1", b.port, 43, 1, {"election_type": 0, "topic_partitions": [
            {"topic": topic, "partitions": sorted(preferred)}], "timeout_ms": 10000}, 30)
        listed = call("127.0.0.1", b.port, 46, 0, {"timeout_ms": 10000, "topics": None}, 30)
        if bid == controller:
            assert elect.error_code == OK and listed.error_code == OK, f"controller {bid}"
            codes = {r.partition_id: r.error_code for r in elect.replica_election_results[0].partition_result}
            assert codes == dict.fromkeys(preferred, int(ErrorCode.ELECTION_NOT_NEEDED))
        else:
            assert elect.error_code == listed.error_code == ErrorCode.NOT_CONTROLLER, f"broker {bid}"


def _metadata_replicas(cluster: dict, topic: str) -> dict[int, list[int]]:
    """partition -> replicas in preference order (Metadata keeps the assignment's order)."""
    md = _metadata(next(iter(cluster["brokers"].values())).port, [topic])
    return {p.partition_index: list(p.replica_nodes) for p in md.topics[0].partitions}


@pytest.mark.parametrize("rf", RFS)
def test_topic_configs_alter_through_any_broker_and_read_on_every_broker(cluster, rf):
    topic = _topic(rf)
    for bid, b in cluster["brokers"].items():
        value = str(3_600_000 * (bid + 1))
        with RawConnection(b.port) as c:
            r = c.request(44, 0, {"resources": [
                {"resource_type": 2, "resource_name": topic,
                 "configs": [{"name": "retention.ms", "config_operation": 0, "value": value}]},
                {"resource_type": 2, "resource_name": f"no-such-{rf}",
                 "configs": [{"name": "retention.ms", "config_operation": 0, "value": value}]}],
                "validate_only": False})
            assert [x.error_code for x in r.responses] == [OK, UNKNOWN], f"IncrementalAlterConfigs at {bid}"
            r = c.request(33, 1, {"resources": [{"resource_type": 2, "resource_name": f"no-such-{rf}",
                                                 "configs": [{"name": "retention.ms", "value": value}]}],
                                  "validate_only": False})
            assert r.responses[0].error_code == UNKNOWN, f"AlterConfigs of a missing topic at {bid}"

        def described(o, value=value):
            with RawConnection(o.port) as c:
                r = c.request(32, 1, {"resources": [{"resource_type": 2, "resource_name": topic,
                                                     "configuration_keys": ["retention.ms"]}],
                                      "include_synonyms": False})
            return r.results[0].error_code == OK and r.results[0].configs[0].value == value
        for other in cluster["brokers"].values():
            wait_for(lambda o=other: described(o), 30,
                     f"retention.ms={value} (set through broker {bid}) at {other.bootstrap}")


@pytest.mark.parametrize("rf", RFS)
def test_describe_log_dirs_lists_what_each_broker_hosts(cluster, rf):
    topic = _topic(rf)
    layout, _ = _layout(cluster, topic)
    for bid, b in cluster["brokers"].items():
        with RawConnection(b.port) as c:
            r = c.request(35, 1, {"topics": [{"topic": topic, "partitions": list(range(PARTITIONS))}]})
        hosted = {p.partition_index for d in r.results for t in d.topics if t.name == topic for p in t.partitions}
        assert hosted == {p for p, (_, replicas) in layout.items() if bid in replicas}, f"broker {bid}"


def test_offset_fetch_and_delete_on_the_coordinator_only(cluster):
    topic, group = _topic(2), "fetch-and-delete"
    coord_id = _coordinator(cluster, group)
    coord = cluster["brokers"][coord_id]
    with RawConnection(coord.port) as c:
        wait_for(lambda: c.request(8, 2, {
            "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "retention_time_ms": -1,
            "topics": [{"name": topic, "partitions": [
                {"partition_index": p, "committed_offset": 3, "committed_metadata": ""}
                for p in range(PARTITIONS)]}]}).topics[0].partitions[0].error_code == OK, 30, "a commit")
    for bid, b in cluster["brokers"].items():
        with RawConnection(b.port) as c:
            fetched = c.request(9, 1, {"group_id": group, "topics": [
                {"name": topic, "partition_indexes": list(range(PARTITIONS))}]})
            deleted = c.request(47, 0, {"group_id": group, "topics": [{"name": topic, "partitions": [
                {"partition_index": 0}, {"partition_index": MISSING_PARTITION}]}]})
        codes = {p.partition_index: (p.error_code, p.committed_offset) for p in fetched.topics[0].partitions}
        if bid == coord_id:
            assert codes == dict.fromkeys(range(PARTITIONS), (OK, 3))
            assert deleted.error_code == OK
            assert {p.partition_index: p.error_code for p in deleted.topics[0].partitions} == \
                {0: OK, MISSING_PARTITION: UNKNOWN}
        else:  # not the coordinator: the client looks it up again
            assert {code for code, _ in codes.values()} == {int(ErrorCode.NOT_COORDINATOR)}, f"broker {bid}"
            assert deleted.error_code == ErrorCode.NOT_COORDINATOR, f"broker {bid}"
    assert _committed(cluster["boot"], group, topic) == {0: -1001, **dict.fromkeys(range(1, PARTITIONS), 3)}


def test_topics_created_and_deleted_through_any_broker_are_seen_by_all(cluster):
    """CreateTopics through one broker, then at once DeleteTopics through another (the
    controller and the others in turn): every broker sees the topic come and go."""
    ids = sorted(cluster["brokers"])
    for creator in ids:
        deleter = cluster["brokers"][ids[(creator + 1) % len(ids)]]
        topic = f"come-and-go-{creator}"
        admin = AdminClient({"bootstrap.servers": cluster["brokers"][creator].bootstrap})
        admin.create_topics([NewTopic(topic, 3, 1 + creator % 3)])[topic].result(60)
        for other in cluster["brokers"].values():
            assert wait_for(lambda o=other, t=topic: _partition_count(o.port, t) == 3, 30,
                            f"{topic} at {other.bootstrap}")
        with RawConnection(deleter.port) as c:
            r = c.request(20, 4, {"topic_names": [topic, "never-was"], "timeout_ms": 30000})
        assert {x.name: x.error_code for x in r.responses} == {topic: OK, "never-was": UNKNOWN}
        for other in cluster["brokers"].values():
            assert wait_for(lambda o=other, t=topic: _metadata(o.port, [t]).topics[0].error_code == UNKNOWN,
                            30, f"{topic} gone at {other.bootstrap}")


def test_a_consumer_assigned_a_partition_before_it_exists_reads_it_once_added(cluster):
    topic = "assigned-early"
    admin = AdminClient({"bootstrap.servers": cluster["boot"]})
    admin.create_topics([NewTopic(topic, 2, 2)])[topic].result(60)
    c = Consumer({"bootstrap.servers": cluster["boot"], "group.id": "assigned-early",
                  "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 1000})
    try:
        c.assign([TopicPartition(topic, 3)])
        for _ in range(3):
            c.poll(0.3)
        admin.create_partitions([NewPartitions(topic, 4)])[topic].result(60)
        _produce(cluster["boot"], topic, 5, 4)
        got = []
        deadline = time.monotonic() + 60
        while len(got) < 5 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append((m.partition(), m.offset()))
        assert got == [(3, i) for i in range(5)]
    finally:
        c.close()


def _create(port: int, name: str, num_partitions: int, rf: int, assignments: list | None) -> tuple[int, str]:
    with RawConnection(port) as c:
        r = c.request(19, 4, {"topics": [{"name": name, "num_partitions": num_partitions,
                                          "replication_factor": rf, "assignments": assignments or [],
                                          "configs": []}], "timeout_ms": 30000, "validate_only": False})
    return r.topics[0].error_code, r.topics[0].error_message


def test_create_topics_with_an_assignment_makes_one_partition_per_entry(cluster):
    """Current admin clients send num_partitions -1 with an assignment (issue 43: the broker
    made num.partitions partitions instead); through each broker, with RF 1, 2 and 3."""
    for bid, b in cluster["brokers"].items():
        for rf in RFS:
            name = f"assigned-rf{rf}-via{bid}"
            entries = [{"partition_index": p, "broker_ids": [(p + k) % 3 for k in range(rf)]}
                       for p in range(7)]
            assert _create(b.port, name, -1, -1, entries) == (0, None)
            want = {e["partition_index"]: e["broker_ids"] for e in entries}
            wait_for(lambda name=name, want=want: _metadata_replicas(cluster, name) == want or None,
                     30, f"{name}'s assignment in Metadata")
    port = cluster["brokers"][0].port
    one = [{"partition_index": 0, "broker_ids": [0]}]
    assert _create(port, "both-set", 3, -1, one)[0] == ErrorCode.INVALID_REQUEST
    assert _create(port, "gap", -1, -1, one + [{"partition_index": 2, "broker_ids": [1]}])[0] == \
        ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert _create(port, "twice", -1, -1, [{"partition_index": 0, "broker_ids": [1, 1]}])[0] == \
        ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert _partition_count(port, "gap") == 0
