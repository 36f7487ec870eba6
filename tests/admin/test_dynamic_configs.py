"""Dynamic broker configs (IncrementalAlterConfigs on the broker resource) and `appliance
configs`: through confluent-kafka's AdminClient and the CLI, against real brokers. The disk
workers honour a new retention default at once, DescribeConfigs reports it as
DYNAMIC_BROKER_CONFIG, it survives a clean and a SIGKILL restart, and bad keys or values are
refused naming them, changing nothing."""

from __future__ import annotations

import subprocess
import sys
import time

from confluent_kafka import Consumer, KafkaException
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)

from tests.broker.clients import create_topic
from tests.broker.wire import RawConnection
from tests.broker_process import BrokerProcess


def _alter(admin: AdminClient, rtype: ResourceType, name: str, **sets: str | None) -> None:
    entries = [ConfigEntry(k.replace("_", "."), v, incremental_operation=(
        AlterConfigOpType.SET if v is not None else AlterConfigOpType.DELETE)) for k, v in sets.items()]
    res = ConfigResource(rtype, name, incremental_configs=entries)
    admin.incremental_alter_configs([res])[res].result(timeout=30)


def _describe(admin: AdminClient, rtype: ResourceType, name: str) -> dict:
    res = ConfigResource(rtype, name)
    return admin.describe_configs([res])[res].result(timeout=30)


def _earliest(bootstrap: str, topic: str, partition: int) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "dyn-wm"})
    try:
        return c.get_watermark_offsets(CTP(topic, partition), timeout=20)[0]
    finally:
        c.close()


def _produce(bootstrap: str, topic: str, partitions: int, count: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for _ in range(count):
        for part in range(partitions):
            p.produce(topic, b"x" * 200, partition=part)
        p.flush(30)  # one batch per record and partition: the small segments roll often
    p.flush(30)


def test_dynamic_retention_default_is_honoured_reported_and_kept(tmp_path):
    overrides = {"log.retention.check.interval.ms": "300", "log.segment.delete.delay.ms": "0"}
    with BrokerProcess(tmp_path, num_log_dirs=2, overrides=overrides) as b:
        create_topic(b.bootstrap, "dyn", 2, {"segment.bytes": "1000"})
        _produce(b.bootstrap, "dyn", 2, 40)
        assert _earliest(b.bootstrap, "dyn", 0) == _earliest(b.bootstrap, "dyn", 1) == 0
        admin = AdminClient({"bootstrap.servers": b.bootstrap})

        _alter(admin, ResourceType.BROKER, "0", log_retention_bytes="2000")
        # both disk workers apply the new default to the topic (it has no override of its own)
        deadline = time.monotonic() + 60
        while min(_earliest(b.bootstrap, "dyn", p) for p in (0, 1)) == 0:
            assert time.monotonic() < deadline, "retention by the dynamic default never ran"
            time.sleep(0.5)

        def check_reported() -> None:
            broker = _describe(admin, ResourceType.BROKER, "0")
            e = broker["log.retention.bytes"]
            assert (e.value, e.source, e.is_read_only) == ("2000", ConfigSource.DYNAMIC_BROKER_CONFIG.value, False)
            assert broker["log.cleaner.threads"].is_read_only
            t = _describe(admin, ResourceType.TOPIC, "dyn")["retention.bytes"]
            assert (t.value, t.source) == ("2000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)

        check_reported()
        # refused: a key that cannot change at run time, a bad value; nothing changes
        for sets, code in (({"log_cleaner_threads": "2"}, "INVALID_REQUEST"),
                           ({"log_retention_bytes": "lots"}, "INVALID_CONFIG"),
                           ({"no_such_key": "1"}, "INVALID_REQUEST")):
            try:
                _alter(admin, ResourceType.BROKER, "0", **sets)
                raise AssertionError(f"{sets} accepted")
            except KafkaException as e:
                assert e.args[0].name() == code, e
                name = next(iter(sets)).replace("_", ".")
                assert name in e.args[0].str(), e
        check_reported()

        b.stop()
        b.start()
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        check_reported()
        b.kill()
        b.start()
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        check_reported()

        _alter(admin, ResourceType.BROKER, "0", log_retention_bytes=None)  # DELETE: back to the default
        e = _describe(admin, ResourceType.BROKER, "0")["log.retention.bytes"]
        assert (e.value, e.source) == ("-1", ConfigSource.DEFAULT_CONFIG.value)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "appliance.cli.main", "configs", *args],
                          capture_output=True, text=True, timeout=60)


def test_configs_cli(module_broker):
    b = module_broker.bootstrap
    create_topic(b, "cfg-cli", 1)
    topic = ["--bootstrap-server", b, "--entity-type", "topics", "--entity-name", "cfg-cli"]
    r = _cli(*topic, "--alter", "--add-config", "cleanup.policy=[compact,delete],retention.ms=1000")
    assert r.returncode == 0 and "Completed updating config for topic cfg-cli." in r.stdout, r.stderr
    r = _cli(*topic, "--describe")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "Dynamic configs for topic cfg-cli are:"
    assert lines[1].startswith("  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:")
    assert lines[2].startswith("  retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000")
    assert len(lines) == 3
    r = _cli(*topic, "--alter", "--delete-config", "retention.ms")
    assert r.returncode == 0, r.stderr
    assert "retention.ms" not in _cli(*topic, "--describe").stdout

    default = ["--bootstrap-server", b, "--entity-type", "brokers", "--entity-default"]
    r = _cli(*default, "--alter", "--add-config", "log.retention.ms=86400000")
    assert r.returncode == 0 and "Completed updating default config for brokers in the cluster." in r.stdout
    r = _cli(*default, "--describe")
    assert r.stdout.splitlines() == [
        "Default configs for brokers in the cluster are:",
        "  log.retention.ms=86400000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=86400000}"]
    r = _cli("--bootstrap-server", b, "--entity-type", "brokers", "--entity-name", "0", "--describe")
    assert "  log.retention.ms=86400000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:" in r.stdout
    assert _cli(*default, "--alter", "--delete-config", "log.retention.ms").returncode == 0

    # refused changes: one line naming the key and the value, exit 1, no traceback
    for args, named in (((*topic, "--alter", "--add-config", "retention.ms=soon"), ("retention.ms", "soon")),
                        ((*topic, "--alter", "--add-config", "retension.ms=5"), ("retension.ms",)),
                        ((*default, "--alter", "--add-config", "log.segment.bytes=5000"), ("log.segment.bytes", "5000"))):
        r = _cli(*args)
        assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert all(n in r.stderr for n in named) and "Traceback" not in r.stderr, r.stderr
    # usage errors: exit 2
    for args in ((*topic, "--alter"), ("--bootstrap-server", b, "--entity-type", "topics", "--entity-default",
                                       "--describe"), (*topic, "--alter", "--add-config", "a=[1,2")):
        r = _cli(*args)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr


def test_kafka_python_alter_and_describe_broker_configs(module_broker):
    """kafka-python's alter_configs on the broker, by IncrementalAlterConfigs (its default) and
    by the old AlterConfigs (33, which replaces the whole dynamic set: the client fills in the
    other keys, as Kafka's own tools did); describe_configs shows Kafka's source names."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.admin import ConfigResource as KCR
        from kafka.admin import ConfigResourceType, KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=module_broker.bootstrap)
    try:
        def dynamic() -> dict:
            res = admin.describe_configs([KCR(ConfigResourceType.BROKER, "0")], config_filter="all")
            return {k: (v["value"], v["config_source"]) for k, v in res["broker"]["0"].items()
                    if v["config_source"] == "DYNAMIC_BROKER_CONFIG"}

        admin.alter_configs([KCR(ConfigResourceType.BROKER, "0", configs={
            "log.retention.ms": "7200000", "log.flush.interval.ms": "1000"})], incremental=False)
        assert dynamic() == {"log.retention.ms": ("7200000", "DYNAMIC_BROKER_CONFIG"),
                             "log.flush.interval.ms": ("1000", "DYNAMIC_BROKER_CONFIG")}
        admin.alter_configs([KCR(ConfigResourceType.BROKER, "0", configs={"log.retention.ms": "3600000"})])
        assert dynamic() == {"log.retention.ms": ("3600000", "DYNAMIC_BROKER_CONFIG"),  # one key changed
                             "log.flush.interval.ms": ("1000", "DYNAMIC_BROKER_CONFIG")}
        # AlterConfigs on the wire without the client's fill-in: the keys not given go
        with RawConnection(module_broker.port) as conn:
            r = conn.request(33, 1, {"resources": [{"resource_type": 4, "resource_name": "0", "configs": [
                {"name": "log.retention.ms", "value": "3600000"}]}], "validate_only": False})
        assert r.responses[0].error_code == 0
        assert dynamic() == {"log.retention.ms": ("3600000", "DYNAMIC_BROKER_CONFIG")}
        admin.alter_configs([KCR(ConfigResourceType.BROKER, "0", configs={"log.retention.ms": ("DELETE", None)})])
        assert dynamic() == {}
    finally:
        admin.close()
