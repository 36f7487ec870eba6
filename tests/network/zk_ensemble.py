"""A ZooKeeper ensemble of three on test hosts: Debian's `zookeeper` package, one server per
host (namespace), each with its zoo.cfg naming ``server.1..3`` by the hosts' addresses and its
``myid``. Ports are ZooKeeper's defaults (2181, 2888, 3888): each host has its own.

A server is ready when `srvr` reports it a leader or follower (it serves sessions only then).
Losing one server (killed or cut off) leaves a quorum of two; a server cut off from both others
stops serving, and the clients connected to it move to the majority's servers, or, cut off
along with it (a broker isolated with one ZooKeeper host), lose their sessions."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

from tests.cluster.zk import TICK_MS, ZooKeeperServer
from tests.network.hosts import Host

__all__ = ["EnsembleServer", "Ensemble"]

CLIENT_PORT = 2181


class EnsembleServer(ZooKeeperServer):
    """One member of the ensemble, run inside ``host``; restartable (same data, same myid)."""

    def __init__(self, workdir: Path, host: Host, myid: int, members: dict[int, Host]) -> None:
        self.host = host
        self.myid = myid
        super().__init__(workdir, port=CLIENT_PORT)
        (self.data_dir / "myid").write_text(f"{myid}\n")
        servers = "".join(f"server.{i}={h.address}:2888:3888\n" for i, h in sorted(members.items()))
        self.cfg.write_text(
            f"tickTime={TICK_MS}\n"
            "initLimit=20\n"
            "syncLimit=6\n"
            f"dataDir={self.data_dir}\n"
            f"clientPort={CLIENT_PORT}\n"
            f"clientPortAddress={host.address}\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,srvr,stat\n"
            "maxClientCnxns=0\n"
            f"minSessionTimeout={2 * TICK_MS}\n"
            "maxSessionTimeout=60000\n"
            "quorumListenOnAllIPs=false\n"
            + servers)

    @property
    def connect(self) -> str:
        return f"{self.host.address}:{CLIENT_PORT}"

    def _launch(self) -> None:
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                self.host.command(
                    ["java", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                     "-Dzookeeper.log.dir=" + str(self.workdir),
                     "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                     "-cp", "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar",
                     "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(self.cfg)]),
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            log.close()

    def mode(self) -> str | None:
        """'leader', 'follower', or None while it does not serve (no quorum, not running)."""
        try:
            with socket.create_connection((self.host.address, CLIENT_PORT), timeout=2.0) as s:
                s.sendall(b"srvr")
                out = b""
                while chunk := s.recv(4096):
                    out += chunk
        except OSError:
            return None
        for line in out.decode(errors="replace").splitlines():
            if line.startswith("Mode: "):
                return line[6:].strip()
        return None

    def answers(self) -> bool:
        return self.mode() in ("leader", "follower")

    def launch(self) -> None:
        """Start the process without waiting (the ensemble waits for all three together: a
        member serves only once a quorum has formed)."""
        self._launch()


class Ensemble:
    """Three EnsembleServers on ``hosts`` (myid 1..3 in order)."""

    def __init__(self, workdir: Path, hosts: list[Host]) -> None:
        members = {i + 1: h for i, h in enumerate(hosts)}
        self.servers = {i: EnsembleServer(Path(workdir) / f"zk{i}", h, i, members) for i, h in members.items()}

    @property
    def connect(self) -> str:
        return ",".join(s.connect for s in self.servers.values())

    def start(self, timeout: float = 120.0) -> Ensemble:
        for s in self.servers.values():
            s.launch()
        try:
            for s in self.servers.values():
                s.wait_ready(timeout)
        except BaseException:
            self.kill()
            raise
        return self

    def leader(self) -> int | None:
        for i, s in self.servers.items():
            if s.mode() == "leader":
                return i
        return None

    def serving(self) -> list[int]:
        return [i for i, s in self.servers.items() if s.answers()]

    def kill(self) -> None:
        for s in self.servers.values():
            s.kill()

    def restart(self, myid: int, timeout: float = 120.0) -> None:
        """Start a killed member again and wait until it serves."""
        s = self.servers[myid]
        s.launch()
        s.wait_ready(timeout)

