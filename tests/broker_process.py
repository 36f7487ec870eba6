"""Start and stop a real broker process (`appliance serve`) for tests, on a free loopback port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["BrokerProcess", "free_port", "running", "release_all_shm", "stop_on_sigterm"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def running(pid: int) -> bool:
    """True while process ``pid`` has not exited (a zombie has: it holds no file, socket or
    memory any more, only its exit status, and this container's init reaps zombies only every
    second or so)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _group_running(pgid: int) -> bool:
    """True while a process of group ``pgid`` has not exited yet (zombies have: they hold no
    file, socket or memory any more, only their exit status for the parent)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                # after "(comm)": state, ppid, pgrp, ... (comm may itself hold ')')
                state, _, pgrp = f.read().rsplit(")", 1)[1].split()[:3]
        except (OSError, ValueError):
            continue
        if int(pgrp) == pgid and state != "Z":
            return True
    return False


def _unwind(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def stop_on_sigterm() -> None:
    """For a script's main (a benchmark, a campaign): a SIGTERM (kill, pkill, `timeout`, a CI
    limit) unwinds like an error, through the finally blocks that stop its brokers. A broker
    runs in a session of its own, so the signal does not reach it; by default the script
    died and left it running (three idle benchmark brokers were found an hour later)."""
    signal.signal(signal.SIGTERM, _unwind)


_MADE: list[BrokerProcess] = []  # every broker made in this process (release_all_shm)


def release_all_shm() -> None:
    """Unlink the shared memory of every broker made in this process whose supervisor has
    exited (the test session's end: see BrokerProcess.release_shm)."""
    for b in _MADE:
        if b.proc is None or b.proc.poll() is not None:
            b.release_shm()


class BrokerProcess:
    """One `appliance serve` subprocess; every worker it forks dies with it (stop/kill)."""

    def __init__(self, workdir: Path, num_log_dirs: int = 1, overrides: dict[str, str] | None = None,
                 port: int | None = None, env: dict[str, str] | None = None) -> None:
        self.workdir = Path(workdir)
        self.env = env  # added to this process's environment (KAFKA_OPTS ...)
        self.port = port or free_port()
        self.log_dirs = [str(self.workdir / f"disk{i}") for i in range(num_log_dirs)]
        self.overrides = {
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": ",".join(self.log_dirs),
            "appliance.shm.name": f"appliance-test-{self.port}",
            **(overrides or {}),
        }
        self.proc: subprocess.Popen | None = None
        self.log_path = self.workdir / f"broker-{self.port}.log"
        _MADE.append(self)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        """The `appliance serve` command line this broker runs."""
        args = [sys.executable, "-m", "appliance.cli.main", "serve"]
        for k, v in self.overrides.items():
            args += ["--override", f"{k}={v}"]
        return args

    def environment(self) -> dict[str, str] | None:
        """The broker's environment (None: this process's)."""
        return None if self.env is None else {**os.environ, **self.env}

    def launch(self) -> BrokerProcess:
        """Start the broker process without waiting for its listener (a test that acts during
        its start-up); the caller stops or kills it."""
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.command(), stdout=self._log, stderr=subprocess.STDOUT,
                                     cwd=self.workdir, start_new_session=True,
                                     env=self.environment())
        return self

    def start(self, timeout: float = 60.0) -> BrokerProcess:
        self.launch()
        try:
            self.wait_ready(timeout)
        except BaseException:
            # not ready in time, or interrupted (Ctrl-C, a SIGTERM unwinding): the caller holds
            # no broker to stop yet, so it is stopped here (a benchmark stopped by `timeout`
            # while its broker started left that broker running)
            self.kill()
            self.release_shm()
            self._log.close()
            raise
        return self

    @property
    def listen_host(self) -> str:
        """The address its first listener answers on (a test host's own, in tests/network)."""
        return "127.0.0.1"

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.log()}")
            try:
                with socket.create_connection((self.listen_host, self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise TimeoutError(f"broker not ready in {timeout} s:\n{self.log()}")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-20000:]
        except OSError:
            return ""

    def wait_files_removed(self, timeout: float = 60.0) -> None:
        """Wait until no deleted partition's directory (``...-delete``) is left in the log dirs:
        disk workers remove them on a thread of their own after DeleteTopics has answered (a
        benchmark waits, so that one run's removal is not timed in the next)."""
        deadline = time.monotonic() + timeout
        while any(n.endswith("-delete") for d in self.log_dirs if os.path.isdir(d) for n in os.listdir(d)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"deleted partitions still on disk after {timeout} s")
            time.sleep(0.02)

    def worker_pids(self, title: str) -> list[int]:
        """Children whose process title contains ``title`` (e.g. 'disk worker 0')."""
        out = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
                with open(f"/proc/{pid}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            if ppid == self.proc.pid and title in cmd:
                out.append(int(pid))
        return out

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def kill(self) -> None:
        """SIGKILL the supervisor and every worker (its whole session)."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(10)
        # the workers are reaped by init, not by us: wait until none of the group runs, so a
        # broker restarted on the same port never meets a dying worker's listening socket. A
        # zombie counts as gone: it has closed its files and unmapped its memory already, and
        # the container's init reaps zombies only every second or so (measured: 1.2-2 s per
        # kill spent waiting for that reaping)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _group_running(self.proc.pid):
            time.sleep(0.02)

    def release_shm(self) -> None:
        """Unlink this broker's shared memory once every process of it is dead (the
        supervisor's own clean-up of a crashed broker's objects, ``plumbing.unlink_stale``). A
        stopped broker unlinks its own; a SIGKILLed supervisor cannot, and a broker started
        again on the same name reclaims what it left (tests check that), so
        :func:`release_all_shm` does this at the end of the test session: a day of test runs
        had left 10,500 segments (990 MB of memory) in /dev/shm."""
        from appliance.process.plumbing import unlink_stale  # lazily: the harness stays light

        name = self.overrides.get("appliance.shm.name")
        if name:
            unlink_stale(name)

    def __enter__(self) -> BrokerProcess:
        return self.start()  # a failed start stops what it started: no __exit__ follows it

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop()
        finally:
            self.kill()
            self._log.close()
