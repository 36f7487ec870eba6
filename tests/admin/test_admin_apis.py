"""The admin APIs current admin clients use, through kafka-python's and confluent-kafka's admin
clients: CreateTopics v4 with broker defaults (KIP-464), DescribeConfigs with sources, synonyms
and flags for topics and the broker, IncrementalAlterConfigs for topics."""

from __future__ import annotations

import warnings

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)

from tests.broker.wire import RawConnection
from tests.broker_process import BrokerProcess

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.admin import ConfigResource as KCR
    from kafka.admin import ConfigResourceType, KafkaAdminClient
    from kafka.admin import NewTopic as KNT

# what server.properties sets: these must show as STATIC_BROKER_CONFIG
STATIC = {"num.partitions": "3", "log.retention.hours": "100", "log.segment.bytes": "8388608"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("broker"), overrides=STATIC) as b:
        yield b


def _result(futures: dict):
    return {k: f.result(timeout=30) for k, f in futures.items()}


def _describe(admin: AdminClient, kind: str, name: str) -> dict:
    return next(iter(_result(admin.describe_configs([ConfigResource(kind, name)])).values()))


def test_create_topics_with_broker_defaults(broker):
    # confluent-kafka's NewTopic without counts sends -1/-1 (CreateTopics v4, KIP-464)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    _result(admin.create_topics([NewTopic("kip464")], operation_timeout=20))
    assert len(admin.list_topics(timeout=10).topics["kip464"].partitions) == 3  # num.partitions
    # kafka-python sends -1 only to brokers it takes for 2.4+ (it guesses from the newest APIs
    # advertised); explicit counts through it still work
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        kp.create_topics([KNT("kip464-kp", 2, 1)])
        assert len(kp.describe_topics(["kip464-kp"])[0]["partitions"]) == 2
    finally:
        kp.close()


def test_describe_topic_configs_sources_and_synonyms(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    _result(admin.create_topics([NewTopic("described", 1, 1, config={"retention.ms": "5000"})],
                                operation_timeout=20))
    d = _describe(admin, "topic", "described")
    ret = d["retention.ms"]  # the topic's override, over the static log.retention.hours
    assert (ret.value, ret.source, ret.is_default) == ("5000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value, False)
    assert list(ret.synonyms)[0] == "retention.ms"
    seg = d["segment.bytes"]  # set in server.properties, not on the topic
    assert (seg.value, seg.source) == ("8388608", ConfigSource.STATIC_BROKER_CONFIG.value)
    syn = seg.synonyms["log.segment.bytes"]
    assert syn.value in ("8388608", "1073741824")  # static then default: a dict keeps one per name
    pol = d["cleanup.policy"]  # nobody set it
    assert (pol.value, pol.source, pol.is_default) == ("delete", ConfigSource.DEFAULT_CONFIG.value, True)
    assert not any(e.is_sensitive or e.is_read_only for e in d.values())
    assert {"message.format.version", "retention.ms", "segment.bytes", "min.insync.replicas"} <= set(d)


def test_describe_synonyms_in_kafkas_order_on_the_wire(broker):
    # the full list, duplicates by name included (a dict in the clients hides them)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    _result(admin.create_topics([NewTopic("wire-described", 1, 1, config={"retention.ms": "5000"})]))
    with RawConnection(broker.port) as conn:
        r = conn.request(32, 1, {"resources": [{"resource_type": 2, "resource_name": "wire-described",
                                                "configuration_keys": ["retention.ms", "flush.ms"]}],
                                 "include_synonyms": True})
    entries = {c.name: c for c in r.results[0].configs}
    assert [(s.name, s.value, s.source) for s in entries["retention.ms"].synonyms] == [
        ("retention.ms", "5000", 1), ("log.retention.hours", "100", 4), ("log.retention.hours", "168", 5)]
    flush = entries["flush.ms"]  # unset everywhere: the chain's last default
    assert flush.config_source == 5 and [(s.name, s.source) for s in flush.synonyms] == [
        ("log.flush.scheduler.interval.ms", 5)]


def test_describe_broker_configs(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    d = _describe(admin, "broker", "0")
    hours = d["log.retention.hours"]
    assert (hours.value, hours.source, hours.is_read_only) == ("100", ConfigSource.STATIC_BROKER_CONFIG.value, True)
    assert d["num.network.threads"].source == ConfigSource.DEFAULT_CONFIG.value
    assert "log.retention.hours" in d["log.retention.ms"].synonyms  # the chain Kafka walks
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        got = kp.describe_configs([KCR(ConfigResourceType.BROKER, "0")], config_filter="all")
        assert got["broker"]["0"]["num.partitions"]["value"] == "3"
        assert got["broker"]["0"]["num.partitions"]["config_source"] == "STATIC_BROKER_CONFIG"
    finally:
        kp.close()


def test_incremental_alter_topic_configs(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    _result(admin.create_topics([NewTopic("incr", 1, 1, config={"retention.ms": "5000", "flush.ms": "1000"})],
                                operation_timeout=20))
    ops = [ConfigEntry("segment.ms", "600000", incremental_operation=AlterConfigOpType.SET),
           ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
           ConfigEntry("flush.ms", None, incremental_operation=AlterConfigOpType.DELETE)]
    _result(admin.incremental_alter_configs([ConfigResource("topic", "incr", incremental_configs=ops)]))
    d = _describe(admin, "topic", "incr")
    assert d["retention.ms"].value == "5000"  # untouched: incremental, not a replacement
    assert d["segment.ms"].value == "600000" and d["segment.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert d["cleanup.policy"].value == "delete,compact"
    assert d["flush.ms"].source == ConfigSource.DEFAULT_CONFIG.value  # back to the default
    sub = [ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT)]
    _result(admin.incremental_alter_configs([ConfigResource("topic", "incr", incremental_configs=sub)]))
    assert _describe(admin, "topic", "incr")["cleanup.policy"].value == "compact"
    # refused as Kafka refuses them, and nothing changes
    for bad, code in ([ConfigEntry("segment.ms", "-5", incremental_operation=AlterConfigOpType.SET)], "INVALID_CONFIG"),\
                     ([ConfigEntry("no.such.key", "1", incremental_operation=AlterConfigOpType.SET)], "INVALID_CONFIG"),\
                     ([ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.APPEND)], "INVALID_CONFIG"):
        with pytest.raises(KafkaException) as e:
            _result(admin.incremental_alter_configs([ConfigResource("topic", "incr", incremental_configs=bad)]))
        assert e.value.args[0].name() == code
    with pytest.raises(KafkaException) as e:
        _result(admin.incremental_alter_configs([ConfigResource("topic", "no-such-topic", incremental_configs=sub)]))
    assert e.value.args[0].name() == "UNKNOWN_TOPIC_OR_PART"
    d = _describe(admin, "topic", "incr")
    assert (d["segment.ms"].value, d["retention.ms"].value, d["cleanup.policy"].value) == ("600000", "5000", "compact")
