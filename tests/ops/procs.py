"""Processes the operations tests start: a broker from a server.properties file and the
`appliance` command line (a ZooKeeper server: tests/cluster/zk.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.broker_process import BrokerProcess, free_port

__all__ = ["FileBroker", "appliance", "DATA", "free_port"]

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

    def command(self) -> list[str]:
        return [*super().command(), "--config", str(self.config)]

    def environment(self) -> dict[str, str] | None:
        return {**os.environ, **(self.env or {})}

