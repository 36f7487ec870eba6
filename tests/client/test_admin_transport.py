"""AdminClient against a real broker, and the producer's transports (TCP, IPC, auto)."""

from __future__ import annotations

import pytest

from appliance.client import AdminClient, Consumer, NewTopic, Producer, SimpleConsumer
from appliance.errors import (
    InvalidPartitionsError,
    KafkaError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)


def test_topic_admin_round_trip(module_broker, topic_name):
    with AdminClient(module_broker.bootstrap) as a:
        a.create_topics([NewTopic(topic_name, 2, config={"retention.ms": "3600000"})])
        with pytest.raises(TopicAlreadyExistsError, match=topic_name):
            a.create_topics([topic_name])
        a.create_partitions({topic_name: 4})
        with pytest.raises(InvalidPartitionsError):
            a.create_partitions({topic_name: 2})
        d = a.describe_topics([topic_name])[topic_name]
        assert sorted(d.partitions) == [0, 1, 2, 3] and d.configs["retention.ms"] == "3600000"
        assert topic_name in a.list_topics()
        a.delete_topics([topic_name])
        assert topic_name not in a.list_topics()
        with pytest.raises(UnknownTopicOrPartitionError):
            a.delete_topics([topic_name])


def test_group_admin(module_broker, topic_name):
    group = f"g-{topic_name}"
    with AdminClient(module_broker.bootstrap) as a:
        a.create_topics([NewTopic(topic_name, 2)])
        c = Consumer(bootstrap_servers=module_broker.bootstrap, group_id=group, partition_assignment_strategy="roundrobin")
        c.subscribe([topic_name])
        c.poll(1.0)
        assert (group, "consumer") in a.list_groups()
        desc = a.describe_groups([group])[group]
        assert desc.state == "Stable" and desc.protocol == "roundrobin"
        [member] = desc.members
        assert member.subscription == [topic_name] and sorted(member.assignment) == [(topic_name, [0, 1])]
        c.close()
        assert a.describe_groups([group])[group].state == "Empty"
        a.delete_groups([group])
        assert group not in [g for g, _ in a.list_groups()]
        with pytest.raises(KafkaError, match="GROUP_ID_NOT_FOUND"):
            a.delete_groups([group])


@pytest.mark.parametrize("transport", ["ipc", "auto"])
def test_producer_over_ipc_transport(module_broker, topic_name, transport):
    shm = module_broker.overrides["appliance.shm.name"]
    with AdminClient(module_broker.bootstrap) as a:
        a.create_topics([NewTopic(topic_name, 2)])
    with Producer(bootstrap_servers=module_broker.bootstrap, transport=transport, shm_name=shm) as p:
        assert type(p.transport).__name__ == "IpcTransport"
        futs = [p.send(topic_name, (b"k%d" % i, b"v%d" % i), partition=i % 2) for i in range(100)]
        p.flush()
    assert sorted((f.result().partition, f.result().offset) for f in futs) == sorted(
        (i % 2, i // 2) for i in range(100))
    with SimpleConsumer(module_broker.bootstrap) as sc:
        assert [r.value for r in sc.fetch(topic_name, 1, 0)] == [b"v%d" % i for i in range(1, 100, 2)]


def test_transport_ipc_without_local_broker_is_a_clear_error_and_auto_falls_back(module_broker, topic_name):
    with pytest.raises(KafkaError, match="no local broker"):
        Producer(bootstrap_servers=module_broker.bootstrap, transport="ipc", shm_name="no-such-broker")
    with Producer(bootstrap_servers=module_broker.bootstrap, transport="auto", shm_name="no-such-broker") as p:
        assert type(p.transport).__name__ == "TcpTransport"
        assert p.send(topic_name, b"x").result(10).offset == 0
