"""The seeds' quick start (0.8.2 documentation, section 1.3), steps 1-5, with our command names.

Step 1 (download) is this repository. Step 2 starts a real ZooKeeper and the broker on the
0.8.2 `config/server.properties` as shipped (tests/ops/data/server-0.8.2.properties); the only
changes are --override flags for what a shared test machine needs: a free `port`, `host.name`
127.0.0.1 (tests listen on loopback only), a temporary `log.dirs` and the test ZooKeeper's
`zookeeper.connect`. Steps 3-5: `appliance topics` creates and lists "test",
`appliance console-producer --broker-list` sends two lines, `appliance console-consumer
--from-beginning` prints them.
"""

from __future__ import annotations

import re
import socket
import subprocess

import pytest
from kazoo.client import KazooClient

from tests.cluster.zk import ZooKeeperServer
from tests.ops.procs import DATA, FileBroker, appliance, free_port


@pytest.fixture
def zookeeper(tmp_path):
    zk = ZooKeeperServer(tmp_path).start()
    yield zk
    zk.stop()


def _server_sndbuf(port: int) -> set[int]:
    """tb (SO_SNDBUF as the kernel keeps it: twice the asked size) of the broker's accepted
    sockets on ``port``, from `ss -tm`."""
    out = subprocess.run(["ss", "-tmnH", "state", "established", f"( sport = :{port} )"],
                         capture_output=True, text=True, check=True).stdout
    return {int(x) for x in re.findall(r"\btb(\d+)", out)}


def test_quick_start_on_the_shipped_0_8_2_server_properties(tmp_path, zookeeper):
    port = free_port()
    logs = tmp_path / "kafka-logs"
    broker = FileBroker(tmp_path, DATA / "server-0.8.2.properties", port, {
        "port": str(port), "host.name": "127.0.0.1", "log.dirs": str(logs),
        "zookeeper.connect": zookeeper.connect,
    })
    bootstrap = f"127.0.0.1:{port}"
    with broker:
        # step 3: create a topic and list it
        r = appliance("topics", "--create", "--bootstrap-server", bootstrap,
                      "--replication-factor", "1", "--partitions", "1", "--topic", "test")
        assert r.returncode == 0, r.stderr
        r = appliance("topics", "--list", "--bootstrap-server", bootstrap)
        assert r.returncode == 0 and "test" in r.stdout.split(), r.stderr
        # step 4: the console producer, with the 0.8 flag name
        lines = "This is a message\nThis is another message\n"
        r = appliance("console-producer", "--broker-list", bootstrap, "--topic", "test", input=lines)
        assert r.returncode == 0, r.stderr
        # step 5: the console consumer from the beginning
        r = appliance("console-consumer", "--bootstrap-server", bootstrap, "--topic", "test",
                      "--from-beginning", "--max-messages", "2", "--timeout-ms", "30000")
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines() == ["This is a message", "This is another message"]
        # the data is where log.dirs says, in Kafka's layout
        assert (logs / "test-0" / "00000000000000000000.log").stat().st_size > 0
        # socket.send.buffer.bytes=102400 from the file took effect (Linux doubles it)
        with socket.create_connection(("127.0.0.1", port)):
            sizes = _server_sndbuf(port)
        assert sizes == {2 * 102400}, sizes
        # zookeeper.connect from the file took effect: the broker registered itself (cluster mode)
        zk = KazooClient(hosts=zookeeper.connect)
        zk.start(timeout=30)
        try:
            assert zk.exists("/brokers/ids/0") is not None
        finally:
            zk.stop()
            zk.close()
        # the broker named what in the file has no effect here, and nothing was unknown
        text = broker.log()
        assert not re.search(r"zookeeper.connect=\S+ is accepted but has no effect", text), text
        assert "unknown configuration key" not in text
    assert broker.proc.returncode == 0


def test_port_and_listeners_that_disagree_stop_start_up(tmp_path):
    port = free_port()
    r = appliance("serve", "--config", str(DATA / "server-0.8.2.properties"),
                  "--override", f"log.dirs={tmp_path}", "--override", f"port={port}",
                  "--override", f"listeners=PLAINTEXT://127.0.0.1:{port + 1}", timeout=60)
    assert r.returncode == 2
    err = r.stderr.strip().splitlines()[-1]
    assert "port" in err and "listeners" in err and str(port) in err and str(port + 1) in err
    assert "Traceback" not in r.stderr


def test_misspelled_key_gets_a_suggestion(tmp_path):
    # an inconsistent pair checked after the key warnings stops start-up: nothing is started
    r = appliance("serve", "--override", "log.retention.hour=24", "--override", "advertised.prot=1",
                  "--override", "log.dirs=" + str(tmp_path),
                  "--override", "group.min.session.timeout.ms=10", "--override", "group.max.session.timeout.ms=5")
    assert r.returncode == 2
    assert "log.retention.hour" in r.stderr and "did you mean log.retention.hours?" in r.stderr
    assert "did you mean advertised.port?" in r.stderr
