"""Test hosts on one machine: each host is a Linux network namespace with one address on a
private bridge, and faults are nftables rules inside the hosts' namespaces.

`Network` makes, per run, a bridge ``apn<run>`` in the root namespace holding the harness's own
address ``10.77.<run>.254/24`` (so the test process reaches every host directly), and per host
a namespace ``apn<run>-<name>`` with loopback up and one veth (``eth0`` inside, its peer on the
bridge) at ``10.77.<run>.<n>/24``. No namespace has a default route and nothing is NATed, so
nothing leaves the machine. The run number is claimed by creating the bridge (``ip link add``
fails when it exists), so parallel runs (pytest-xdist, another checkout) never share a subnet.

Processes go into a host with :meth:`Host.command` (``ip netns exec <ns> ...``: the same pid
execs the program, so a process group and ``BrokerProcess.worker_pids`` work as usual).
`close()` SIGKILLs whatever still runs in the namespaces (``ip netns pids``: only processes in
namespaces this run made), then deletes the namespaces (their veths go with them) and the
bridge, and it runs even when a test failed.

Faults (`partition`, `isolate`, `loss`, `heal`) are rules of a table ``inet nemesis`` in each
affected host's namespace, dropping by source address in the input hook and by destination in
the output hook; random loss is ``numgen random mod 100 < N drop``. This kernel has no netem
qdisc, so delay is added above the kernel, by a TCP relay in front of each broker's inter-broker
listener (relay.py, started by cluster.py). `heal()` deletes the tables."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tests.broker_process import running

__all__ = ["Host", "Network", "NetnsUnavailable", "netns_unavailable_reason"]

PREFIX = "apn"  # bridge apn<run>, namespaces apn<run>-<name>, host-side veths apn<run>v<n>
TABLE = "nemesis"
OWNER = "appliance-test-hosts pid="  # the bridge's alias: which process made the run


class NetnsUnavailable(RuntimeError):
    """Network namespaces cannot be made here (not root, no `ip`/`nft`, no kernel support)."""


def _run(*args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(list(args), input=input, capture_output=True, text=True, timeout=60)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: exit {r.returncode}: {r.stderr.strip()}")
    return r


def netns_unavailable_reason() -> str | None:
    """Why this machine cannot run the network tests, or None when it can (tried for real: a
    namespace is made and deleted, and nft runs inside it)."""
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (scripts/setup.sh installs iproute2 and nftables)"
    name = f"{PREFIX}-probe-{os.getpid()}"
    r = _run("ip", "netns", "add", name, check=False)
    if r.returncode != 0:
        return f"cannot create a network namespace: {r.stderr.strip()}"
    try:
        r = _run("ip", "netns", "exec", name, "nft", "list", "ruleset", check=False)
        if r.returncode != 0:
            return f"nftables does not work in a namespace: {r.stderr.strip()}"
    finally:
        _run("ip", "netns", "del", name, check=False)
    return None


def reclaim_stale(run: int) -> bool:
    """Remove what run ``run`` left when the process that made it is gone (SIGKILLed, or a
    SIGTERM that skipped its clean-up): SIGKILL the processes in its namespaces, delete them
    and the bridge. True when the run number is free now; a live run, or a bridge this harness
    did not make, is left alone."""
    bridge = f"{PREFIX}{run}"
    try:
        with open(f"/sys/class/net/{bridge}/ifalias") as f:
            alias = f.read().strip()
    except FileNotFoundError:
        return True
    if not alias.startswith(OWNER) or running(int(alias[len(OWNER):])):
        return False
    mine = [n.split()[0] for n in _run("ip", "netns", "list").stdout.splitlines()
            if n.startswith(f"{bridge}-")]
    for ns in mine:
        for pid in _run("ip", "netns", "pids", ns, check=False).stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
    time.sleep(0.5)
    for ns in mine:
        _run("ip", "netns", "del", ns, check=False)
    _run("ip", "link", "del", bridge, check=False)
    return True


@dataclass(frozen=True)
class Host:
    name: str
    ns: str
    address: str
    index: int

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside this host."""
        return ["ip", "netns", "exec", self.ns, *argv]

    def run(self, *argv: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        return _run(*self.command(argv), input=input, check=check)

    def pids(self) -> list[int]:
        r = _run("ip", "netns", "pids", self.ns, check=False)
        return [int(p) for p in r.stdout.split()]


class Network:
    """The hosts of one run (see the module docstring). Use as a context manager, or call
    :meth:`close` in a finally."""

    def __init__(self, names: Iterable[str]) -> None:
        self.run_id = self._claim_bridge()
        self.bridge = f"{PREFIX}{self.run_id}"
        self.subnet = f"10.77.{self.run_id}"
        self.harness_address = f"{self.subnet}.254"
        self.hosts: dict[str, Host] = {}
        self._faulted: set[str] = set()
        try:
            _run("ip", "addr", "add", f"{self.harness_address}/24", "dev", self.bridge)
            _run("ip", "link", "set", self.bridge, "up")
            for name in names:
                self.add_host(name)
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _claim_bridge() -> int:
        """The first free run number, claimed by creating its bridge; the bridge's alias names
        this process, so a later run can remove what a killed run left (`reclaim_stale`)."""
        for run in range(1, 250):
            bridge = f"{PREFIX}{run}"
            if _run("ip", "link", "add", bridge, "type", "bridge", check=False).returncode != 0:
                if not reclaim_stale(run):
                    continue
                if _run("ip", "link", "add", bridge, "type", "bridge", check=False).returncode != 0:
                    continue
            _run("ip", "link", "set", bridge, "alias", f"{OWNER}{os.getpid()}")
            return run
        raise RuntimeError("no free run number: 249 bridges apn<n> exist")

    def add_host(self, name: str) -> Host:
        n = len(self.hosts) + 1
        host = Host(name, f"{self.bridge}-{name}", f"{self.subnet}.{n}", n)
        outer = f"{self.bridge}v{n}"
        _run("ip", "netns", "add", host.ns)
        self.hosts[name] = host  # from here on close() removes it
        _run("ip", "link", "add", outer, "type", "veth", "peer", "name", "eth0", "netns", host.ns)
        _run("ip", "link", "set", outer, "master", self.bridge, "up")
        host.run("ip", "addr", "add", f"{host.address}/24", "dev", "eth0")
        host.run("ip", "link", "set", "eth0", "up")
        host.run("ip", "link", "set", "lo", "up")
        return host

    def __getitem__(self, name: str) -> Host:
        return self.hosts[name]

    # -- faults --------------------------------------------------------------------------
    def _rules(self, host: Host, rules: Iterable[str]) -> None:
        """Add ``rules`` ("input ..." / "output ...") to ``host``'s nemesis table."""
        script = [f"table inet {TABLE} {{",
                  "  chain input { type filter hook input priority 0; policy accept; }",
                  "  chain output { type filter hook output priority 0; policy accept; }", "}"]
        script += [f"add rule inet {TABLE} {r}" for r in rules]
        host.run("nft", "-f", "-", input="\n".join(script) + "\n")
        self._faulted.add(host.name)

    def _addrs(self, names: Iterable[str]) -> str:
        return "{ " + ", ".join(self.hosts[n].address for n in names) + " }"

    def partition(self, side_a: Iterable[str], side_b: Iterable[str], one_way: bool = False) -> None:
        """No packet from ``side_a`` reaches ``side_b``; with ``one_way`` False none from
        ``side_b`` reaches ``side_a`` either. One way: a's hosts still receive b's packets (the
        replies of TCP among them are lost, so no connection opens either way, but datagrams and
        the one-directional part of an existing stream behave as on a real one-way fault)."""
        a, b = list(side_a), list(side_b)
        for name in a:
            self._rules(self[name], [f"output ip daddr {self._addrs(b)} drop"]
                        + ([] if one_way else [f"input ip saddr {self._addrs(b)} drop"]))
        for name in b:
            self._rules(self[name], [f"input ip saddr {self._addrs(a)} drop"]
                        + ([] if one_way else [f"output ip daddr {self._addrs(a)} drop"]))

    def isolate(self, name: str) -> None:
        """``name`` can talk to no other host, nor to the harness (its loopback still works)."""
        self._rules(self[name], ['input iifname != "lo" drop', 'output oifname != "lo" drop'])

    def loss(self, names: Iterable[str], percent: int, peers: Iterable[str] | None = None) -> None:
        """Each of ``names`` drops ``percent`` % of the packets it receives from ``peers``
        (default: from every other of ``names``), chosen at random per packet."""
        names = list(names)
        if percent <= 0:
            return
        # numgen's values are 0..99, and `< 100` is out of its range
        chance = "" if percent >= 100 else f"numgen random mod 100 < {percent} "
        for name in names:
            others = [p for p in (peers if peers is not None else names) if p != name]
            self._rules(self[name], [f"input ip saddr {self._addrs(others)} {chance}drop"])

    def heal(self) -> None:
        """Every fault removed."""
        for name in sorted(self._faulted):
            self[name].run("nft", "delete", "table", "inet", TABLE, check=False)
        self._faulted.clear()

    def faulted(self) -> set[str]:
        return set(self._faulted)

    # -- the end -------------------------------------------------------------------------
    def kill_processes(self) -> None:
        """SIGKILL every process still running in one of this run's namespaces."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            pids = [p for h in self.hosts.values() for p in h.pids()]
            if not pids:
                return
            for p in pids:
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)

    def close(self) -> None:
        """Kill what runs in the hosts, delete the namespaces (with their veths and rules) and
        the bridge. Safe to call twice."""
        self.kill_processes()
        for host in list(self.hosts.values()):
            _run("ip", "netns", "del", host.ns, check=False)
            _run("ip", "link", "del", f"{self.bridge}v{host.index}", check=False)
        self.hosts.clear()
        _run("ip", "link", "del", self.bridge, check=False)

    def __enter__(self) -> Network:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
