"""message.format.version (topic) and log.message.format.version (broker) take Kafka's values
0.8.0 ... 3.0 through the real admin clients and server.properties, and refuse anything else
with INVALID_CONFIG naming it. (What a pre-0.11 format stores is tested in
test_legacy_store.py.)"""

from __future__ import annotations

import warnings

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic

from tests.broker_process import BrokerProcess

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.admin import ConfigResource as KCR
    from kafka.admin import ConfigResourceType, KafkaAdminClient
    from kafka.admin import NewTopic as KNT
    from kafka.errors import InvalidConfigurationError


@pytest.fixture(scope="module")
def old_format_broker(tmp_path_factory):
    # the broker default, as an operator migrating a 0.10 cluster writes it in server.properties
    with BrokerProcess(tmp_path_factory.mktemp("broker"),
                       overrides={"log.message.format.version": "0.10.2"}) as b:
        yield b


def _describe(admin: AdminClient, topic: str) -> dict:
    return next(iter(admin.describe_configs([ConfigResource("topic", topic)]).values())).result(timeout=20)


def test_confluent_admin_sets_and_describes_the_topic_format(old_format_broker):
    admin = AdminClient({"bootstrap.servers": old_format_broker.bootstrap})
    futs = admin.create_topics([NewTopic("fmt-old", 1, 1, config={"message.format.version": "0.9.0"}),
                                NewTopic("fmt-default", 1, 1)], operation_timeout=20)
    for f in futs.values():
        f.result(timeout=30)
    entry = _describe(admin, "fmt-old")["message.format.version"]
    assert entry.value == "0.9.0" and not entry.is_default
    entry = _describe(admin, "fmt-default")["message.format.version"]
    # from log.message.format.version in server.properties
    assert entry.value == "0.10.2" and entry.source == ConfigSource.STATIC_BROKER_CONFIG.value
    bad = admin.create_topics([NewTopic("fmt-bad", 1, 1, config={"message.format.version": "0.7.1"})],
                              operation_timeout=20)["fmt-bad"]
    with pytest.raises(KafkaException) as e:
        bad.result(timeout=30)
    assert e.value.args[0].name() == "INVALID_CONFIG" and "0.7.1" in e.value.args[0].str()


def test_kafka_python_admin_sets_the_topic_format(old_format_broker):
    admin = KafkaAdminClient(bootstrap_servers=old_format_broker.bootstrap)
    try:
        admin.create_topics([KNT("fmt-kp", 1, 1, topic_configs={"message.format.version": "2.8-IV1"})])
        got = admin.describe_configs([KCR(ConfigResourceType.TOPIC, "fmt-kp")])["topic"]["fmt-kp"]
        assert got["message.format.version"]["value"] == "2.8-IV1"
        with pytest.raises(InvalidConfigurationError):
            admin.create_topics([KNT("fmt-kp-bad", 1, 1, topic_configs={"message.format.version": "latest"})])
    finally:
        admin.close()
