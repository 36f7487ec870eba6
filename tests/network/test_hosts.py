"""The test hosts themselves (tests/network/hosts.py): addresses reachable on the bridge, each
fault cutting what it says and no more, heal, and nothing left behind after close."""

import socket
import subprocess
import sys
import time

import pytest

from tests.network.hosts import Network

SERVER = ("import socket, sys\n"
          "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
          "s.bind((sys.argv[1], 7000)); s.listen(16)\n"
          "while True:\n"
          "    c, _ = s.accept(); c.close()\n")
CONNECT = ("import socket, sys\n"
           "try:\n"
           "    socket.create_connection((sys.argv[1], 7000), timeout=float(sys.argv[2])).close()\n"
           "except OSError:\n"
           "    sys.exit(1)\n")


@pytest.fixture
def net(netns_ok):
    n = Network(["a", "b", "c"])
    procs = []
    try:
        for h in n.hosts.values():
            procs.append(subprocess.Popen(h.command([sys.executable, "-c", SERVER, h.address])))
        for h in n.hosts.values():
            deadline = time.monotonic() + 10
            while True:
                try:
                    socket.create_connection((h.address, 7000), timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
        yield n
    finally:
        n.close()
        for p in procs:
            p.wait(10)


def reach(n: Network, src: str, dst: str, timeout: float = 0.5) -> bool:
    return n[src].run(sys.executable, "-c", CONNECT, n[dst].address, str(timeout), check=False).returncode == 0


def test_hosts_reach_each_other_and_the_harness(net):
    assert all(reach(net, a, b) for a in "abc" for b in "abc" if a != b)
    assert net["a"].run("ip", "route").stdout.split()[0] != "default"  # nothing leaves the machine


def test_partition_isolate_heal(net):
    net.partition(["a"], ["b"])
    assert not reach(net, "a", "b") and not reach(net, "b", "a")
    assert reach(net, "a", "c") and reach(net, "c", "b")
    net.heal()
    assert reach(net, "a", "b") and reach(net, "b", "a")
    net.isolate("c")
    assert not reach(net, "a", "c") and not reach(net, "c", "b") and reach(net, "a", "b")
    with pytest.raises(OSError):
        socket.create_connection((net["c"].address, 7000), timeout=0.5)
    net.heal()
    assert reach(net, "a", "c") and not net.faulted()


def test_one_way_partition(net):
    """a's packets never reach b: a's connections to b fail, and b's too (the answers are a's)."""
    net.partition(["a"], ["b"], one_way=True)
    assert "drop" in net["b"].run("nft", "list", "ruleset").stdout
    assert not reach(net, "a", "b") and not reach(net, "b", "a")
    assert reach(net, "c", "a") and reach(net, "c", "b")


def test_random_loss(net):
    """Loss drops some packets at random: at 100 % none arrives, at 0 % all of them do."""
    net.loss(["a", "b"], 100)
    assert not reach(net, "a", "b")
    net.heal()
    net.loss(["a", "b"], 0)
    assert reach(net, "a", "b")
    net.loss(["a", "b"], 30)
    assert "numgen random mod 100 < 30" in net["a"].run("nft", "list", "ruleset").stdout
    assert sum(reach(net, "a", "b", timeout=5) for _ in range(5)) >= 3  # SYNs are sent again


def test_close_removes_everything(netns_ok):
    n = Network(["x"])
    p = subprocess.Popen(n["x"].command(["sleep", "60"]))
    n.isolate("x")
    ns, bridge = n["x"].ns, n.bridge
    n.close()
    assert p.wait(10) == -9  # what still ran in a host is killed
    assert ns not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert subprocess.run(["ip", "link", "show", bridge], capture_output=True).returncode != 0
