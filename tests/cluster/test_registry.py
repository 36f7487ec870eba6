"""The ZooKeeper session and broker registration against a real ZooKeeper server."""

import json
import time

import pytest
from kazoo.client import KazooClient

from appliance.cluster.registry import BrokerIdInUse, BrokerRegistry
from appliance.cluster.zk_paths import BrokerInfo, decode_broker, split_chroot
from appliance.cluster.zk_session import ZkSettings, ZooKeeperUnreachable, open_session
from tests.broker_process import free_port
from tests.cluster.zk import expire_session


def _wait(pred, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return False


def test_chroot_created_and_kafka_layout_written(zk_server, zk_connect, sessions):
    client = sessions(session_timeout_ms=6000)
    reg = BrokerRegistry(client, BrokerInfo(7, "127.0.0.1", 9092))
    reg.register()
    # read it back without the chroot, the way Kafka's tools would see it under theirs
    raw = KazooClient(hosts=zk_server.connect)
    raw.start(30)
    try:
        chroot = split_chroot(zk_connect)[1]
        data, stat = raw.get(f"{chroot}/brokers/ids/7")
        obj = json.loads(data)
        assert obj["host"] == "127.0.0.1" and obj["port"] == 9092 and obj["version"] == 4
        assert obj["endpoints"] == ["PLAINTEXT://127.0.0.1:9092"]
        assert obj["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT"}
        assert obj["jmx_port"] == -1 and obj["timestamp"].isdigit()
        assert stat.ephemeralOwner == client.client_id[0]
        for p in ("/brokers/topics", "/config/topics", "/admin/delete_topics", "/isr_change_notification"):
            assert raw.exists(chroot + p), p
        assert decode_broker(7, data).port == 9092
    finally:
        raw.stop()
        raw.close()


def test_second_broker_with_same_id_refused(sessions):
    BrokerRegistry(sessions(), BrokerInfo(1, "127.0.0.1", 9092)).register()
    with pytest.raises(BrokerIdInUse, match="broker.id 1 is already registered"):
        BrokerRegistry(sessions(), BrokerInfo(1, "127.0.0.1", 9093)).register()
    # another id is fine
    BrokerRegistry(sessions(), BrokerInfo(2, "127.0.0.1", 9094)).register()


def test_registration_vanishes_with_session_and_comes_back(zk_server, sessions):
    client = sessions(session_timeout_ms=2000)
    watcher = sessions()
    reg = BrokerRegistry(client, BrokerInfo(3, "127.0.0.1", 9092))
    reg.register()
    old_owner = watcher.get("/brokers/ids/3")[1].ephemeralOwner
    expire_session(client, zk_server.connect)
    # the controller would see the node go away, then the broker registers again on a new session
    assert _wait(lambda: (s := watcher.exists("/brokers/ids/3")) is not None and s.ephemeralOwner != old_owner)
    assert watcher.get("/brokers/ids/3")[1].ephemeralOwner == client.client_id[0]


def test_unreachable_zookeeper_times_out_with_clear_error():
    port = free_port()  # nothing listens there
    t0 = time.monotonic()
    with pytest.raises(ZooKeeperUnreachable, match=rf"127.0.0.1:{port}.*1500 ms.*zookeeper.connection.timeout.ms"):
        open_session(ZkSettings(f"127.0.0.1:{port}/x", session_timeout_ms=6000, connection_timeout_ms=1500))
    assert time.monotonic() - t0 >= 1.4


def test_session_timeout_is_negotiated(sessions):
    client = sessions(session_timeout_ms=4000)
    assert client._session_timeout == 4000  # what the server granted (kazoo keeps it in ms)


def test_bad_settings_name_the_key():
    with pytest.raises(ValueError, match="zookeeper.connect"):
        ZkSettings("/chroot-only")
    with pytest.raises(ValueError, match="zookeeper.session.timeout.ms"):
        ZkSettings("127.0.0.1:2181", session_timeout_ms=0)


def test_config_changes_written_and_read_in_kafkas_format(sessions):
    """Every config write announces itself as Kafka does (version 2, entity_path); version 1
    notifications (entity_type/entity_name, older Kafka tools) read too; junk is skipped."""
    from appliance.cluster.zk_paths import BROKER_DEFAULT, CONFIG_CHANGES
    from appliance.cluster.zk_store import ZkStore

    c = sessions()
    store = ZkStore(c)
    store.set_topic_config("t", {"retention.ms": "5"})
    store.set_broker_config(BROKER_DEFAULT, {"log.retention.ms": "7"})
    c.create(f"{CONFIG_CHANGES}/config_change_", json.dumps(
        {"version": 1, "entity_type": "brokers", "entity_name": "3"}).encode(), sequence=True)
    c.create(f"{CONFIG_CHANGES}/config_change_", b"not json", sequence=True)
    names = store.config_changes()
    assert len(names) == 4 and names == sorted(names)
    data, _ = c.get(f"{CONFIG_CHANGES}/{names[0]}")
    assert json.loads(data) == {"version": 2, "entity_path": "topics/t"}
    assert [store.config_change(n)[:2] if store.config_change(n) else None for n in names] == [
        ("topics", "t"), ("brokers", "<default>"), ("brokers", "3"), None]
    assert json.loads(c.get("/config/brokers/<default>")[0]) == {"version": 1, "config": {"log.retention.ms": "7"}}
    store.delete_config_change(names[0])
    assert store.config_changes() == names[1:]
