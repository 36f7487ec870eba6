import uuid

import pytest

from appliance.cluster.zk_session import ZkSettings, open_session
from appliance.cluster.zk_store import ZkStore
from tests.cluster.zk import ZooKeeperServer


@pytest.fixture
def zk_connect(zk_server):
    """A zookeeper.connect string with a fresh chroot, so tests never see each other's znodes."""
    return f"{zk_server.connect}/t{uuid.uuid4().hex[:12]}"


@pytest.fixture
def admin(zk_connect):
    """A tool's session in the test's chroot: creates topics and requests, reads what the
    brokers and the controller wrote."""
    client = open_session(ZkSettings(zk_connect, 30000, 30000))
    yield ZkStore(client)
    client.stop()
    client.close()


@pytest.fixture
def private_zk(tmp_path):
    """A ZooKeeper of this test's own, for tests that stop and restart it."""
    server = ZooKeeperServer(tmp_path / "zk")
    server.start()
    yield server
    server.kill()


@pytest.fixture
def sessions(zk_connect):
    """Open kazoo sessions in the test's chroot (settings as keywords); all closed at the end."""
    made = []

    def make(**kw):
        kw.setdefault("connection_timeout_ms", 30000)
        c = open_session(ZkSettings(zk_connect, **kw))
        made.append(c)
        return c

    yield make
    for c in made:
        c.stop()
        c.close()
