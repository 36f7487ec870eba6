"""The test hosts themselves (tests/network/hosts.py): addresses reachable on the bridge, each
fault cutting what it says and no more, heal, and nothing left behind after close."""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

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


UDP_COUNT = ("import socket, sys\n"
             "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((sys.argv[1], 7003))\n"
             "print('ready', flush=True); n = 0; s.settimeout(10)\n"
             "while True:\n"
             "    try:\n"
             "        s.recv(100); n += 1; s.settimeout(1)\n"
             "    except TimeoutError:\n"
             "        break\n"
             "print(n)\n")
UDP_SEND = ("import socket, sys, time\n"
            "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            "for i in range(1000):\n"
            "    s.sendto(b'x', (sys.argv[1], 7003)); time.sleep(0.0005)\n")


def test_random_loss(net):
    """Loss drops that share of the packets at random: 1000 datagrams at 30 % lose about 300
    (binomial: 5 standard deviations either side), at 100 % every one; at 0 % there is no rule."""
    def received() -> int:
        counter = subprocess.Popen(net["b"].command([sys.executable, "-c", UDP_COUNT, net["b"].address]),
                                   stdout=subprocess.PIPE, text=True)
        assert counter.stdout.readline().strip() == "ready"
        net["a"].run(sys.executable, "-c", UDP_SEND, net["b"].address)
        return int(counter.communicate(timeout=20)[0])

    net.loss(["a", "b"], 30)
    assert "numgen random mod 100 < 30" in net["a"].run("nft", "list", "ruleset").stdout
    assert 625 <= received() <= 775
    net.heal()
    net.loss(["a", "b"], 100)
    assert not reach(net, "a", "b")
    net.heal()
    net.loss(["a", "b"], 0)
    assert not net.faulted() and reach(net, "a", "b")


def test_close_removes_everything(netns_ok):
    n = Network(["x"])
    p = subprocess.Popen(n["x"].command(["sleep", "60"]))
    n.isolate("x")
    ns, bridge = n["x"].ns, n.bridge
    n.close()
    assert p.wait(10) == -9  # what still ran in a host is killed
    assert ns not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert subprocess.run(["ip", "link", "show", bridge], capture_output=True).returncode != 0


def test_relay_delays_both_ways_in_order(net):
    """The delaying relay (relay.py) in host a, in front of a's echo server: a round trip
    through it takes twice the delay, and its bytes keep their order under jitter."""
    echo = ("import socket, sys\n"
            "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
            "s.bind((sys.argv[1], 7001)); s.listen(4)\n"
            "c, _ = s.accept()\n"
            "while d := c.recv(65536):\n"
            "    c.sendall(d)\n")
    a = net["a"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    server = subprocess.Popen(a.command([sys.executable, "-c", echo, a.address]))
    relay = subprocess.Popen(a.command([sys.executable, "-m", "tests.network.relay", "--listen",
                                        f"{a.address}:7002", "--to", f"{a.address}:7001"]),
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert relay.stdout.readline().strip() == "listening"
        time.sleep(0.3)  # the echo server listens
        relay.stdin.write("delay 200 50\n")
        relay.stdin.flush()
        time.sleep(0.1)
        with socket.create_connection((a.address, 7002), timeout=10) as s:
            t0 = time.monotonic()
            s.sendall(b"x")
            assert s.recv(10) == b"x"
            assert 0.29 <= time.monotonic() - t0 < 2.0
            sent = b"".join(b"%06d" % i for i in range(2000))
            for i in range(0, len(sent), 600):
                s.sendall(sent[i:i + 600])
                time.sleep(0.001)
            got = b""
            while len(got) < len(sent):
                got += s.recv(65536)
            assert got == sent
    finally:
        relay.kill()
        server.kill()
        relay.wait(10)
        server.wait(10)
