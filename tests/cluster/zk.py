"""A real ZooKeeper server for tests: Debian's `zookeeper` package run standalone on 127.0.0.1.

`ZooKeeperServer` writes its own zoo.cfg (free port, temp dataDir, admin server off), starts
`ZooKeeperServerMain` in its own session, waits until it serves sessions, and stops it with
SIGTERM then SIGKILL. `stop()` / `start()` keep the port and the data, so a test can take
ZooKeeper away and bring the same ensemble back.

ZooKeeper 3.8.0 (Debian's) can strand a client connection made while it starts
(ZOOKEEPER-5051): the client port listens before the server has its database, a connection
read in that window is refused with "ZooKeeperServer not running", and the refusal's
cleanup throws a NullPointerException (`ZooKeeperServer.removeCnxn`: `zkDb` is null) before it
closes the socket. The socket stays open and unread for good; the kazoo client waits its whole
handshake timeout (the session timeout divided by the number of hosts) and by then its session
has expired. Clients reconnecting after a restart hit the window whenever the JVM starts slowly
(a loaded machine), so `start()` reads the server's log for that exception and, when it is
there, kills the server (which closes the stranded socket) and starts it again.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from tests.broker_process import free_port

__all__ = ["ZooKeeperServer", "ZOOKEEPER_CLASSPATH", "STRANDED_CONNECTION", "TICK_MS", "expire_session"]

# The Debian jar's manifest names its dependency jars. slf4j-simple (libslf4j-java, a dependency
# of the zookeeper package) makes the server log its warnings to stderr, i.e. zookeeper.log.
ZOOKEEPER_CLASSPATH = "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar"
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
# What ZOOKEEPER-5051 leaves in the log when it strands a connection (see the module docstring).
STRANDED_CONNECTION = b'because "this.zkDb" is null'
# Restarts after a stranded connection; each hit needs a client reading in a window of a few
# hundred milliseconds, so more than one in a row is rare.
MAX_STARTS = 5
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
        """Start the server and wait until it serves sessions; started again (see the module
        docstring) while its start-up stranded a client connection."""
        for _ in range(MAX_STARTS):
            log_start = self._log_size()
            self._launch()
            try:
                self.wait_ready(timeout)
            except BaseException:  # not serving, or interrupted: nobody else holds it to stop
                self.kill()
                raise
            if not self._stranded_since(log_start):
                return self
            self.kill()
        raise RuntimeError(f"zookeeper stranded a connection at each of {MAX_STARTS} starts:\n{self.log()}")

    def _launch(self) -> None:
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                ["java", "-Xmx256m", "-Dzookeeper.log.dir=" + str(self.workdir),
                 "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                 "-cp", ZOOKEEPER_CLASSPATH, MAIN_CLASS, str(self.cfg)],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            log.close()

    def _log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except FileNotFoundError:
            return 0

    def _stranded_since(self, offset: int) -> bool:
        """True when the log written since ``offset`` shows a connection stranded by
        ZOOKEEPER-5051. Once the server serves sessions its database exists, so no later
        connection can hit it."""
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            return STRANDED_CONNECTION in f.read()

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
