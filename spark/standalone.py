"""A Spark standalone cluster on this host: one master and N workers, each its own JVM process.

Started with pyspark's own launcher (``bin/spark-class org.apache.spark.deploy.master.Master`` /
``...worker.Worker``), bound to 127.0.0.1, small memory and one core per worker by default (the
test machines are small and shared). Used by the tests (one cluster per test session), by
perf/bench_spark.py and for trying the examples by hand::

    .venv/bin/python -m spark.standalone --workers 2     # prints the master URL; Ctrl-C stops

Jobs then run with ``spark-submit --master spark://127.0.0.1:PORT`` or
``spark.session(master="spark://127.0.0.1:PORT")``.

Not thread-safe: one owner starts and stops a cluster.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

__all__ = ["StandaloneCluster", "spark_home", "spark_submit_command"]


def spark_home() -> str:
    """The Spark distribution pyspark ships (bin/spark-class, bin/spark-submit, jars/)."""
    import pyspark

    return os.path.dirname(os.path.abspath(pyspark.__file__))


def spark_submit_command() -> list[str]:
    return [os.path.join(spark_home(), "bin", "spark-submit")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StandaloneCluster:
    """Master + ``workers`` workers as child processes; :meth:`stop` ends them all.

    ``worker_memory`` must hold one executor (``spark.executor.memory``, 512m in
    :func:`spark.session.session` for spark:// masters). Raises RuntimeError when a JVM exits
    or the workers do not register within ``timeout`` seconds (its log is in the message).
    """

    def __init__(self, workdir: str | os.PathLike | None = None, workers: int = 2,
                 cores: int = 1, worker_memory: str = "1g") -> None:
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="spark-standalone-"))
        self.n_workers = workers
        self.cores = cores
        self.worker_memory = worker_memory
        self.port = _free_port()
        self.ui_port = _free_port()
        self.procs: list[subprocess.Popen] = []
        self._logs: list[Path] = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update({
            "SPARK_HOME": spark_home(),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOCAL_HOSTNAME": "127.0.0.1",
            "SPARK_DAEMON_MEMORY": "256m",  # master and worker daemons; executors are separate
            "SPARK_LOG_DIR": str(self.workdir / "logs"),
            "SPARK_WORKER_DIR": str(self.workdir / "work"),
        })
        return env

    def _launch(self, name: str, cls: str, *args: str) -> None:
        log = self.workdir / f"{name}.log"
        self._logs.append(log)
        cmd = [os.path.join(spark_home(), "bin", "spark-class"), cls, *args]
        with open(log, "ab") as out:
            # Own session: stop() signals the whole group (spark-class execs java, executors
            # are children of the worker JVM).
            self.procs.append(subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                               env=self._env(), cwd=self.workdir,
                                               start_new_session=True))

    def start(self, timeout: float = 120.0) -> StandaloneCluster:
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "work").mkdir(exist_ok=True)
        self._launch("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                     "--port", str(self.port), "--webui-port", str(self.ui_port))
        try:
            self._wait(lambda s: s is not None, timeout, "the master to answer")
            for i in range(self.n_workers):
                self._launch(f"worker{i}", "org.apache.spark.deploy.worker.Worker",
                             "--host", "127.0.0.1", "--cores", str(self.cores),
                             "--memory", self.worker_memory, "--webui-port", "0",
                             "--work-dir", str(self.workdir / "work" / f"w{i}"), self.master_url)
            self._wait(lambda s: s is not None and self._alive(s) >= self.n_workers, timeout,
                       f"{self.n_workers} workers to register")
        except BaseException:
            self.stop()
            raise
        return self

    @staticmethod
    def _alive(status: dict) -> int:
        return sum(1 for w in status.get("workers", ()) if w.get("state") == "ALIVE")

    def status(self) -> dict | None:
        """The master's JSON status (workers, apps), or None while it does not answer."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as r:
                return json.load(r)
        except OSError:
            return None

    def _wait(self, ready, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for p, log in zip(self.procs, self._logs, strict=True):
                if p.poll() is not None:
                    raise RuntimeError(f"{log.stem} exited with {p.returncode} while waiting for "
                                       f"{what}:\n{log.read_text(errors='replace')[-3000:]}")
            if ready(self.status()):
                return
            time.sleep(0.5)
        raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}; logs in "
                           f"{self.workdir}")

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM every JVM's process group (workers first), then SIGKILL what is left."""
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + timeout
        for p in reversed(self.procs):
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(p.pid, signal.SIGKILL)  # executors the worker left behind, if any
            except ProcessLookupError:
                pass
            p.wait()
        self.procs.clear()

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="a local Spark standalone cluster (Ctrl-C stops)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--cores", type=int, default=1)
    ap.add_argument("--worker-memory", default="1g")
    ap.add_argument("--workdir")
    args = ap.parse_args(argv)
    with StandaloneCluster(args.workdir, args.workers, args.cores, args.worker_memory) as c:
        print(f"master {c.master_url}  (UI http://127.0.0.1:{c.ui_port}, logs {c.workdir})",
              flush=True)
        try:
            while all(p.poll() is None for p in c.procs):
                time.sleep(1)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
