"""A real ZooKeeper server for tests: Debian's `zookeeper` package run standalone on 127.0.0.1.

`ZooKeeperServer` writes its own zoo.cfg (free port, temp dataDir, admin server off), starts
`ZooKeeperServerMain` in its own session, waits until it answers `ruok`, and stops it with
SIGTERM then SIGKILL. `stop()` / `start()` keep the port and the data, so a test can take
ZooKeeper away and bring the same ensemble back.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from tests.broker_process import free_port

__all__ = ["ZooKeeperServer", "ZOOKEEPER_CLASSPATH", "TICK_MS", "expire_session"]

# The Debian jar's manifest names its dependency jars. (Debian ships no slf4j binding for it,
# so the server logs nothing; failures show as its exit status and stderr in zookeeper.log.)
ZOOKEEPER_CLASSPATH = "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar"
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
# A short tick lets tests use session timeouts down to 2 ticks (1 s) and see expiry quickly.
TICK_MS = 500


class ZooKeeperServer:
    """One standalone ZooKeeper process; restartable on the same port and data dir."""

    def __init__(self, workdir: Path, port: int | None = None) -> None:
        self.workdir = Path(workdir)
        self.port = port or free_port()
        self.data_dir = self.workdir / "zk-data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.cfg = self.workdir / "zoo.cfg"
        self.cfg.write_text(
            f"tickTime={TICK_MS}\n"
            f"dataDir={self.data_dir}\n"
            f"clientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,srvr\n"
            "maxClientCnxns=0\n"
            f"minSessionTimeout={2 * TICK_MS}\n"
            "maxSessionTimeout=60000\n"
        )
        self.log_path = self.workdir / "zookeeper.log"
        self.proc: subprocess.Popen | None = None

    @property
    def connect(self) -> str:
        """The zookeeper.connect string (no chroot)."""
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> ZooKeeperServer:
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                ["java", "-Xmx256m", "-Dzookeeper.log.dir=" + str(self.workdir),
                 "-cp", ZOOKEEPER_CLASSPATH, MAIN_CLASS, str(self.cfg)],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            log.close()
        self.wait_ready(timeout)
        return self

    def answers(self) -> bool:
        """True when the server serves sessions: `srvr` reports its mode only then (`ruok`
        already says imok while the server is still loading its data)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=2.0) as s:
                s.sendall(b"srvr")
                out = b""
                while chunk := s.recv(4096):
                    out += chunk
                return b"Mode: standalone" in out
        except OSError:
            return False

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"zookeeper exited with {self.proc.returncode}:\n{self.log()}")
            if self.answers():
                return
            time.sleep(0.1)
        raise TimeoutError(f"zookeeper on {self.connect} not answering after {timeout}s:\n{self.log()}")

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM, then SIGKILL after `timeout`; waits until the port is closed."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc = None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
        self.proc = None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def expire_session(client, hosts: str) -> None:
    """Expire a kazoo client's session for real: a second connection with the same session id
    and password closes it, and the server then tells the first one SESSION_EXPIRED (the trick
    ZooKeeper's own tests use)."""
    from kazoo.client import KazooClient

    other = KazooClient(hosts=hosts, client_id=client.client_id)
    other.start(30)
    other.stop()
    other.close()
