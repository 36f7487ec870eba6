"""Processes the operations tests start: a broker from a server.properties file, a ZooKeeper
server, the `appliance` command line."""

from __future__ import annotations

import glob
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.broker_process import BrokerProcess, free_port

__all__ = ["FileBroker", "ZooKeeper", "appliance", "DATA", "free_port"]

DATA = Path(__file__).parent / "data"


def appliance(*args: str, input: str | None = None, timeout: float = 60.0,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run `appliance ARGS` (this worktree's code) and return the finished process."""
    return subprocess.run([sys.executable, "-m", "appliance.cli.main", *args], input=input,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


class FileBroker(BrokerProcess):
    """`appliance serve --config FILE --override ...`: only the given overrides, none implied."""

    def __init__(self, workdir: Path, config: Path, port: int, overrides: dict[str, str],
                 env: dict[str, str] | None = None) -> None:
        super().__init__(workdir, port=port)
        self.config = config
        self.overrides = overrides
        self.env = env

    def start(self, timeout: float = 60.0) -> FileBroker:
        args = [sys.executable, "-m", "appliance.cli.main", "serve", "--config", str(self.config)]
        for k, v in self.overrides.items():
            args += ["--override", f"{k}={v}"]
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT,
                                     cwd=self.workdir, start_new_session=True,
                                     env={**os.environ, **(self.env or {})})
        self.wait_ready(timeout)
        return self


class ZooKeeper:
    """A real standalone ZooKeeper server (Debian's zookeeper package) on a free loopback port."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.dir = Path(workdir) / f"zk-{self.port}"
        self.dir.mkdir(parents=True)
        self.proc: subprocess.Popen | None = None

    @property
    def connect(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> ZooKeeper:
        jars = ":".join(["/etc/zookeeper/conf", *sorted(glob.glob("/usr/share/java/*.jar"))])
        cfg = self.dir / "zoo.cfg"
        cfg.write_text(f"dataDir={self.dir}\nclientPort={self.port}\n"
                       "clientPortAddress=127.0.0.1\ntickTime=2000\n"
                       "admin.enableServer=false\n")
        self.proc = subprocess.Popen(
            ["java", "-Xmx256m", "-cp", jars, "org.apache.zookeeper.server.ZooKeeperServerMain",
             str(cfg)],
            stdout=open(self.dir / "zk.log", "ab"), stderr=subprocess.STDOUT,
            start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError((self.dir / "zk.log").read_text()[-5000:])
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.1)
        raise TimeoutError("ZooKeeper did not start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
