"""Redis Streams: redis-server with the append-only file (appendfsync everysec) in a temp dir.

Produce: redis-benchmark (C, 50 connections, pipeline 100) sending XADD with a literal value of
the workload's size (redis-benchmark 7 does not expand ``__data__`` in a custom command, so the
value is passed as the argument itself), and redis-py (hiredis parser) with pipelines of 1,000
XADD for a Python-client view. 1,000 partitions = 1,000 stream keys (``-r 1000`` and the key
``s:__rand_int__``). Consume: redis-py XREAD COUNT 10000 from id 0. Latency: redis-py XADD per
record; the receiver blocks in XREAD.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import redis

from perf.peers.base import Peer, PeerUnavailable, ServerProcess, free_port, wait_port
from perf.workloads.latency import Collector, run_latency
from perf.workloads.spec import Workload

__all__ = ["RedisStreams", "python_share"]


def python_share(records: int) -> int:
    """Records for a pure-Python client: a tenth, but at least 100,000 (all of them if fewer)."""
    return max(records // 10, min(records, 100_000))


class RedisStreams(Peer):
    name = "Redis Streams"

    def __init__(self) -> None:
        self.server: ServerProcess | None = None
        self._n = 0
        self._preloaded: dict[str, str] = {}

    def start(self, workdir: Path) -> None:
        exe = shutil.which("redis-server")
        if not exe or not shutil.which("redis-benchmark"):
            raise PeerUnavailable("redis-server/redis-benchmark not installed (run perf/setup_peers.sh)")
        try:
            import redis  # noqa: F401
        except ImportError as e:
            raise PeerUnavailable(f"redis-py missing: {e}") from e
        self.port = free_port()
        data = workdir / "redis"
        data.mkdir()
        self.server = ServerProcess([exe, "--port", str(self.port), "--bind", "127.0.0.1",
                                     "--dir", str(data), "--appendonly", "yes",
                                     "--appendfsync", "everysec", "--save", "",
                                     "--protected-mode", "no", "--daemonize", "no"],
                                    workdir / "redis.log")
        wait_port(self.port, self.server.proc, 30, self.server.log)
        import redis
        self.r = redis.Redis(port=self.port)
        self.version = self.r.info()["redis_version"]

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    def describe(self) -> str:
        return f"redis-server {getattr(self, 'version', '?')}, appendonly yes, appendfsync everysec"

    def clients(self, wl: Workload) -> list[str]:
        if wl.kind == "produce" and wl.acks == 1:
            return ["redis-benchmark", "redis-py"] if wl.partitions == 1 else ["redis-benchmark"]
        if wl.kind == "consume":
            return ["redis-py"]
        if wl.kind == "latency":
            return ["redis-py"]
        return []

    def skip_reason(self, wl: Workload) -> str:
        if wl.acks != 1:
            return "no acks=all: a single Redis has no replicas to wait for"
        return "measured on the appliance only"

    def _key(self) -> str:
        self._n += 1
        return f"s{self._n}"

    def run(self, wl: Workload, client: str, run: int) -> dict:
        if wl.kind == "produce":
            key = self._key()
            try:
                if client == "redis-benchmark":
                    rps = self._benchmark(key, wl.records, wl.value_size, wl.partitions)
                    n = wl.records
                else:
                    n = python_share(wl.records)
                    t0 = time.perf_counter()
                    self._pipeline_xadd(key, n, wl.value_size)
                    rps = n / (time.perf_counter() - t0)
                return {"rps": rps, "records": n}
            finally:
                self._drop(key, wl.partitions)
        if wl.kind == "consume":
            if wl.name not in self._preloaded:
                key = self._key()
                self._benchmark(key, wl.records, wl.value_size, 1)
                self._preloaded[wl.name] = key
            key = self._preloaded[wl.name]
            n = python_share(wl.records)
            t0 = time.perf_counter()
            got, last = 0, b"0"
            xread = self.r.xread
            while got < n:
                res = xread({key: last}, count=10_000)
                if not res:
                    raise RuntimeError(f"XREAD ended after {got} of {wl.records}")
                entries = res[0][1]
                got += len(entries)
                last = entries[-1][0]
            return {"rps": n / (time.perf_counter() - t0), "records": n}
        if wl.kind == "latency":
            key = self._key()
            xadd = self.r.xadd
            try:
                return run_latency(latency_receiver, {"port": self.port, "key": key},
                                   lambda v: xadd(key, {"v": v}), lambda: None, lambda: None, wl)
            finally:
                self.r.delete(key)
        raise ValueError(wl.kind)

    def finish_workload(self, wl: Workload) -> None:
        key = self._preloaded.pop(wl.name, None)
        if key:
            self.r.delete(key)

    def _drop(self, key: str, partitions: int) -> None:
        if partitions == 1:
            self.r.delete(key)
        else:
            for i in range(0, partitions, 100):
                self.r.delete(*[f"{key}:{j:012d}" for j in range(i, min(partitions, i + 100))])
        try:  # keep the AOF from holding every deleted stream
            self.r.bgrewriteaof()
        except redis.ResponseError:  # one already running ("already in progress") does the same
            pass

    def _benchmark(self, key: str, n: int, size: int, partitions: int) -> float:
        value = (os.urandom(size).hex())[:size]
        args = ["redis-benchmark", "-p", str(self.port), "-n", str(n), "-P", "100", "-c", "50",
                "--csv"]
        if partitions > 1:
            args += ["-r", str(partitions), "XADD", f"{key}:__rand_int__", "*", "f", value]
        else:
            args += ["XADD", key, "*", "f", value]
        r = subprocess.run(args, capture_output=True, text=True, timeout=1800)
        m = re.search(r'^"XADD[^"]*","([0-9.]+)"', r.stdout, re.M)
        if r.returncode != 0 or not m:
            raise RuntimeError(f"redis-benchmark failed ({r.returncode}): {r.stdout[-300:]} {r.stderr[-300:]}")
        got = sum(self.r.xlen(k) for k in self._keys(key, partitions))
        if got != n:
            raise RuntimeError(f"redis-benchmark: {got} entries stored, expected {n}")
        return float(m.group(1))

    def _keys(self, key: str, partitions: int) -> list[str]:
        if partitions == 1:
            return [key]
        return [k.decode() for k in self.r.scan_iter(f"{key}:*", count=10_000)]

    def _pipeline_xadd(self, key: str, n: int, size: int) -> None:
        value = os.urandom(size)
        pipe = self.r.pipeline(transaction=False)
        sent = 0
        while sent < n:
            m = min(1000, n - sent)
            for _ in range(m):
                pipe.xadd(key, {"f": value})
            pipe.execute()
            sent += m


def latency_receiver(args: dict, ready, out, total: int, timeout_s: float) -> None:
    import redis
    r = redis.Redis(port=args["port"])
    r.ping()
    ready.set()
    col = Collector(total)
    last = b"0"
    deadline = time.monotonic() + timeout_s
    now = time.monotonic_ns
    while not col.done and time.monotonic() < deadline:
        res = r.xread({args["key"]: last}, count=1000, block=100)
        if res:
            t = now()
            for eid, fields in res[0][1]:
                col.add(fields[b"v"], t)
                last = eid
    out.put(col.result())
