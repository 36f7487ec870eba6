"""The coordinators' fence (cluster/session_fence.py) and broker epochs (KIP-380) against a
real ZooKeeper server and a real metadata cache in shared memory."""

import os
import time

import pytest

from appliance.cluster.registry import BrokerRegistry
from appliance.cluster.session_fence import SessionFence
from appliance.cluster.zk_paths import BrokerInfo
from appliance.cluster.zk_session import ZkSettings, open_session
from appliance.cluster.zk_store import ZkStore
from appliance.shm.metadata_cache import MetadataCache
from tests.cluster.harness import wait_for
from tests.cluster.zk import expire_session


def _wait(pred, timeout=30.0) -> bool:
    try:
        return bool(wait_for(pred, timeout))
    except AssertionError:
        return False


@pytest.fixture
def cache():
    c = MetadataCache.create(f"/appliance-test-fence-{os.getpid()}", 1 << 16)
    yield c
    c.close()
    import posix_ipc
    posix_ipc.unlink_shared_memory(f"/appliance-test-fence-{os.getpid()}")


def test_broker_epoch_is_the_registrations_czxid_and_moves_on_expiry(zk_server, sessions):
    client, watcher = sessions(session_timeout_ms=2000), sessions()
    reg = BrokerRegistry(client, BrokerInfo(5, "127.0.0.1", 9092))
    reg.register()
    first = reg.epoch
    assert first == watcher.get("/brokers/ids/5")[1].czxid > 0
    assert ZkStore(watcher).brokers()[5].epoch == first
    expire_session(client, zk_server.connect)
    assert _wait(lambda: reg.epoch > first and ZkStore(watcher).brokers().get(5) is not None
                 and ZkStore(watcher).brokers()[5].epoch == reg.epoch)
    # the same contents, a new registration: the controller tells them apart by the epoch
    again = ZkStore(watcher).brokers()[5]
    assert again.epoch != first
    assert (again.host, again.port) == ("127.0.0.1", 9092)


def test_fence_after_expiry_lifts_only_for_the_new_registration(zk_server, sessions, cache):
    client = sessions(session_timeout_ms=2000)
    reg = BrokerRegistry(client, BrokerInfo(6, "127.0.0.1", 9092))
    reg.register()
    fence = SessionFence(client, reg, cache)
    assert not cache.fenced
    old = reg.epoch
    expire_session(client, zk_server.connect)
    assert _wait(lambda: cache.fenced)
    assert _wait(lambda: reg.epoch > old)  # registered again on the new session
    time.sleep(0.5)
    assert cache.fenced, "a new session alone must not lift the fence"
    assert fence.stale(old) and not fence.stale(reg.epoch) and not fence.stale(-1)
    fence.confirmed(old)  # a LeaderAndIsr meant for the old registration
    fence.confirmed(-1)
    assert cache.fenced
    fence.confirmed(reg.epoch)
    assert not cache.fenced
    # the controller may send for the new registration before the create's answer set
    # registry.epoch: a LeaderAndIsr for any registration newer than the expired one lifts it
    second = reg.epoch
    expire_session(client, zk_server.connect)
    assert _wait(lambda: cache.fenced and reg.epoch > second)
    third = reg.epoch
    reg.epoch = second  # as if the create's answer had not come back yet
    fence.confirmed(second)  # the expired registration's
    assert cache.fenced
    fence.confirmed(third)
    assert not cache.fenced
    fence.close()


def test_fence_during_a_lost_connection_lifts_on_the_same_session(private_zk, cache):
    """ZooKeeper killed and started again within the session timeout: SUSPENDED fences, the
    reconnection to the same session lifts it with no word from the controller."""
    client = open_session(ZkSettings(private_zk.connect + "/fence", connection_timeout_ms=30000,
                                     session_timeout_ms=30000))
    try:
        reg = BrokerRegistry(client, BrokerInfo(7, "127.0.0.1", 9092))
        reg.register()
        fence = SessionFence(client, reg, cache)
        epoch = reg.epoch
        private_zk.kill()
        try:
            assert _wait(lambda: cache.fenced, 40)
        finally:
            private_zk.start()
        assert _wait(lambda: not cache.fenced, 60)
        assert reg.epoch == epoch
        fence.close()
    finally:
        client.stop()
        client.close()
