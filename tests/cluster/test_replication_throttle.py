"""The reassignment throttle's parts: Kafka's throttled-replica lists, the token bucket, the
watches that keep a broker's settings current (real ZooKeeper), and the tool's set/remove of
Kafka's configs. The throttle's effect on a real move is in test_admin_tools."""

import pytest

from appliance.cluster import replication_throttle as rt
from appliance.cluster.reassignment import remove_throttle, set_throttle
from appliance.cluster.zk_paths import TopicPartition
from appliance.cluster.zk_session import ZkSettings, open_session
from appliance.cluster.zk_store import ZkStore
from appliance.process.rate_limiter import RateLimiter
from tests.cluster.harness import wait_for


def test_replica_lists_in_kafkas_format():
    assert rt.parse_replicas("0:1, 1:2,bad,3:") == {(0, 1), (1, 2)}
    assert rt.parse_replicas("*") == rt.ALL and rt.parse_replicas(None) == frozenset()
    assert rt.format_replicas([(1, 2), (0, 1), (0, 1)]) == "0:1,1:2"
    assert rt.is_throttled(frozenset({(0, 1)}), 0, 1) and not rt.is_throttled(frozenset({(0, 1)}), 0, 2)
    assert rt.is_throttled(rt.ALL, 7, 9)


def test_rate_bucket_pays_off_a_large_fetch():
    now = [100.0]
    limiter = RateLimiter(clock=lambda: now[0])
    assert not limiter.exceeded(1000)  # starts with one second's worth
    limiter.record(600)
    assert not limiter.exceeded(1000)
    limiter.record(3400)  # a fetch far over the rate: 3000 bytes of debt
    assert limiter.exceeded(1000)
    now[0] += 2.9
    assert limiter.exceeded(1000)
    now[0] += 0.2
    assert not limiter.exceeded(1000)
    now[0] += 60  # idle: the bucket holds one second's worth, not a minute's
    limiter.record(1500)
    assert limiter.exceeded(1000)


@pytest.fixture
def store(zk_connect):
    client = open_session(ZkSettings(zk_connect, 10000, 30000))
    yield ZkStore(client)
    client.stop()
    client.close()


def test_settings_follow_the_znodes(store):
    settings = rt.ThrottleSettings(store.client, 2)
    tp = TopicPartition("t", 0)
    settings.watch_topic("t")
    assert settings.follower_rate is None and not settings.throttled(tp)
    store.set_topic_config("t", {rt.FOLLOWER_REPLICAS: "0:2", "retention.ms": "5"})
    store.set_broker_config(2, {rt.FOLLOWER_RATE: "1000"})
    wait_for(lambda: settings.throttled(tp), 10, "the watches to see the throttle")
    assert settings.follower_rate == 1000 and not settings.throttled(TopicPartition("t", 1))
    store.set_broker_config(2, {})
    wait_for(lambda: not settings.throttled(tp), 10, "the watch to see the rate go")


def test_tool_sets_kafkas_configs_and_removes_them(store):
    for b in (0, 1, 2, 3):
        store.client.create(f"/brokers/ids/{b}", b'{"version":4,"host":"h","port":1,"endpoints":[]}',
                            makepath=True, ephemeral=True)
    store.create_topic("m", {0: (0, 1), 1: (1, 2)}, {"retention.ms": "9"})
    store.set_broker_config(3, {"other": "x"})
    current = {TopicPartition("m", 0): (0, 1), TopicPartition("m", 1): (1, 2)}
    moves = {TopicPartition("m", 0): (1, 2), TopicPartition("m", 1): (1, 2)}  # partition 1 stays
    set_throttle(store, moves, current, 500)
    cfg = store.topic_config("m")
    assert cfg == {"retention.ms": "9", rt.LEADER_REPLICAS: "0:0,0:1", rt.FOLLOWER_REPLICAS: "0:2"}
    for b in (0, 1, 2):
        assert store.broker_config(b) == {rt.LEADER_RATE: "500", rt.FOLLOWER_RATE: "500"}
    assert store.broker_config(3) == {"other": "x"}
    assert remove_throttle(store, ["m"])
    assert store.topic_config("m") == {"retention.ms": "9"}
    assert all(store.broker_config(b) == {} for b in (0, 1, 2)) and store.broker_config(3) == {"other": "x"}
    assert not remove_throttle(store, ["m"])
