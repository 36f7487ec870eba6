"""Partition-table size and bad assignments, against a real broker: a creation that would not
fit the table (appliance.max.partitions) or the disk workers' open-file limit is refused whole
with POLICY_VIOLATION and its message, never half-made; an empty replica assignment is an
INVALID_REPLICA_ASSIGNMENT answer, not a closed connection (issue 14, found by the fuzzer)."""

from __future__ import annotations

from pathlib import Path

import pytest
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import PolicyViolationError

from appliance.errors import ErrorCode
from tests.broker.clients import create_topic
from tests.broker.wire import RawConnection


def _topics(admin: KafkaAdminClient) -> set[str]:
    return set(admin.list_topics())


def test_a_topic_beyond_the_table_is_refused_whole(broker_factory):
    b = broker_factory(num_log_dirs=2, overrides={"appliance.max.partitions": "40"}).start()
    create_topic(b.bootstrap, "fits", partitions=30)
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=30000)
    try:
        with pytest.raises(PolicyViolationError, match="full"):
            admin.create_topics([NewTopic("too-big", 11, 1)])
        assert "too-big" not in _topics(admin)
        admin.create_topics([NewTopic("just-fits", 10, 1)])  # every slot of the refused one came back
        assert {"fits", "just-fits"} <= _topics(admin)
        dirs = [sorted(p.name for p in Path(d).iterdir() if p.name.startswith("too-big"))
                for d in b.log_dirs]
        assert dirs == [[], []]
    finally:
        admin.close()


def test_an_empty_replica_assignment_is_answered_not_dropped(broker):
    """The fuzzer's frame: CreateTopics v4 whose assignment lists no broker. kafka-python
    refuses to build it, so it goes over a raw socket, encoded by our protocol module."""
    body = {"topics": [{"name": "assigned", "num_partitions": -1, "replication_factor": -1,
                        "assignments": [{"partition_index": 0, "broker_ids": []}], "configs": []}],
            "timeout_ms": 10000, "validate_only": False}
    with RawConnection(broker.port) as c:
        (t,) = c.request(19, 4, body).topics
        assert t.error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT and "no broker" in t.error_message
        body["topics"][0].update(name="after", assignments=[{"partition_index": 0, "broker_ids": [0]}])
        (t,) = c.request(19, 4, body).topics  # the same connection still serves
        assert t.error_code == 0, t
