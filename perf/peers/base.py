"""What every peer module shares: the Peer interface, a server subprocess that is always stopped,
free ports, and the value layout used to carry producer timestamps.

A peer's ``run(workload, client, run)`` returns a dict: ``{"rps": records/s}`` for throughput
workloads, ``{"p50_ms", "p99_ms", "p999_ms", "count"}`` for latency. A peer that cannot start
raises :class:`PeerUnavailable` with the reason, which the runner prints and records.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import time
from pathlib import Path

import psutil

from perf.workloads.spec import Workload

__all__ = ["Peer", "PeerUnavailable", "ServerProcess", "free_port", "STAMP", "stamped_value",
           "read_stamp"]

# A latency record's value starts with (monotonic send time in ns, sequence number); CLOCK_MONOTONIC
# is one clock for every process on the host, so the receiving process can subtract.
STAMP = struct.Struct("<qq")


def stamped_value(size: int) -> bytearray:
    """A zero-filled value buffer of ``size`` bytes (>= STAMP.size) to stamp in place."""
    return bytearray(max(size, STAMP.size))


def read_stamp(value: bytes) -> tuple[int, int]:
    return STAMP.unpack_from(value, 0)


class PeerUnavailable(Exception):
    """The system cannot run here; the message says why (shown in the results table)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise PeerUnavailable(f"exited with {proc.returncode}: {tail(log)}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise PeerUnavailable(f"port {port} not open after {timeout:.0f} s: {tail(log)}")


def tail(log: Path, n: int = 400) -> str:
    try:
        return " ".join(log.read_text(errors="replace")[-n:].split())
    except OSError:
        return ""


class ServerProcess:
    """A server started in its own session; ``stop`` sends SIGTERM, waits, then SIGKILLs it and
    every descendant it had (found by pid before the signal, so nothing is matched by name)."""

    def __init__(self, args: list[str], log: Path, env: dict[str, str] | None = None,
                 cwd: Path | None = None) -> None:
        self.log = log
        self._log = open(log, "ab")
        try:
            self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                         cwd=cwd, start_new_session=True)
        except OSError as e:
            self._log.close()
            raise PeerUnavailable(f"cannot run {args[0]}: {e}") from e

    @property
    def pid(self) -> int:
        return self.proc.pid

    def descendants(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.Error:
            return []

    def stop(self, timeout: float = 20.0) -> None:
        kids = self.descendants()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        _, alive = psutil.wait_procs(kids, timeout=5)
        for p in [*alive]:
            try:
                p.kill()
            except psutil.Error:
                pass
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self._log.close()


class Peer:
    """Interface of a system under test. ``clients(wl)`` lists the client names that run the
    workload ([] = not applicable, with ``skip_reason(wl)``); ``run`` measures one run."""

    name = "?"

    def start(self, workdir: Path) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def clients(self, wl: Workload) -> list[str]:
        raise NotImplementedError

    def skip_reason(self, wl: Workload) -> str:
        return "not applicable"

    def run(self, wl: Workload, client: str, run: int) -> dict:
        raise NotImplementedError

    def warm_up(self, wl: Workload, client: str) -> str | None:
        """Untimed, before the cell's runs: pay what only a first run would (client start-up,
        kernel loading, topic creation). Returns what it did (the runner prints it on a
        first-run line), or None for nothing."""
        return None

    def describe(self) -> str:
        """Version and settings, for the results."""
        return self.name
