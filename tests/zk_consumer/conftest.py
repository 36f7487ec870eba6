"""A real ZooKeeper and two real cluster-mode brokers for the module (every test uses its own
group and topics), plus helpers to produce, to read znodes and to run ZooKeeper consumers in
processes of their own (tests/zk_consumer/runner.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from appliance.cluster.zk_session import ZkSettings, open_session
from tests.cluster.harness import cluster_broker, kill_brokers, start_brokers, wait_for, wait_joined
from tests.cluster.zk import ZooKeeperServer

ROOT = Path(__file__).resolve().parents[2]
# small timeouts keep the module short: a SIGKILLed consumer's nodes go after 4 s
FAST = {"zookeeper.session.timeout.ms": "4000", "zookeeper.connection.timeout.ms": "10000",
        "rebalance.backoff.ms": "300", "rebalance.max.retries": "40", "auto.commit.interval.ms": "500",
        "refresh.leader.backoff.ms": "100", "fetch.wait.max.ms": "100", "consumer.timeout.ms": "-1",
        "auto.offset.reset": "smallest"}


class Env:
    def __init__(self, zk: ZooKeeperServer, connect: str, boot: str, brokers: list) -> None:
        self.zk_server, self.connect, self.boot, self.brokers = zk, connect, boot, brokers
        self.zk = open_session(ZkSettings(connect, 30000, 30000))

    def config(self, group: str, **extra: str) -> dict[str, str]:
        return {"zookeeper.connect": self.connect, "group.id": group, **FAST,
                **{k.replace("_", "."): v for k, v in extra.items()}}

    def create_topic(self, name: str, partitions: int, replicas: int = 1) -> None:
        admin = AdminClient({"bootstrap.servers": self.boot})  # kept alive until the answer
        admin.create_topics([NewTopic(name, partitions, replicas)])[name].result(60)
        wait_for(lambda: self.zk.exists(f"/brokers/topics/{name}/partitions/{partitions - 1}/state"),
                 30, f"{name}'s partition states")

    def produce(self, topic: str, values: list[str], partition: int | None = None) -> None:
        p = Producer({"bootstrap.servers": self.boot, "linger.ms": 5})
        for i, v in enumerate(values):
            kw = {"partition": partition} if partition is not None else {"partition": i % self.partitions(topic)}
            p.produce(topic, v.encode(), **kw)
        assert p.flush(30) == 0

    def partitions(self, topic: str) -> int:
        return len(self.zk.get_children(f"/brokers/topics/{topic}/partitions"))

    def owners(self, group: str, topic: str) -> dict[int, str]:
        path = f"/consumers/{group}/owners/{topic}"
        if not self.zk.exists(path):
            return {}
        out = {}
        for p in self.zk.get_children(path):
            try:
                out[int(p)] = self.zk.get(f"{path}/{p}")[0].decode()
            except Exception:
                continue
        return out

    def zk_offsets(self, group: str, topic: str) -> dict[int, int]:
        path = f"/consumers/{group}/offsets/{topic}"
        if not self.zk.exists(path):
            return {}
        return {int(p): int(self.zk.get(f"{path}/{p}")[0]) for p in self.zk.get_children(path)}

    def close(self) -> None:
        self.zk.stop()
        self.zk.close()


class ConsumerProcess:
    """tests/zk_consumer/runner.py in a subprocess; ``lines`` gathers what it printed."""

    def __init__(self, tmp: Path, config: dict, what: str, streams: int = 1) -> None:
        self.log = open(tmp / f"consumer-{uuid.uuid4().hex[:6]}.log", "wb")
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.zk_consumer.runner", json.dumps(config), what,
                                      str(streams)], stdout=subprocess.PIPE, stderr=self.log, cwd=ROOT, env=env)
        self.lines: list[tuple[str, int, int, str]] = []
        self.ready = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for raw in self.proc.stdout:
            line = raw.decode().strip()
            if line == "READY":
                self.ready.set()
                continue
            t, p, o, v = line.split(" ", 3)
            self.lines.append((t, int(p), int(o), v))

    def wait_ready(self, timeout: float = 60) -> None:
        wait_for(lambda: self.ready.is_set() or self.proc.poll() is not None, timeout, "the consumer to start")
        assert self.ready.is_set(), f"consumer exited {self.proc.returncode}: {self.stderr()}"

    def stderr(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text(errors="replace")[-5000:]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self._reader.join(5)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._reader.join(5)
        self.log.close()
        return self.proc.returncode


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("zkc")
    zk = ZooKeeperServer(root / "zk")
    zk.start()
    brokers = []
    e = None
    try:
        connect = f"{zk.connect}/zkc"
        brokers = [cluster_broker(root / f"b{i}", connect, i) for i in (1, 2)]
        # generous: the first start in a fresh checkout compiles the numba kernels
        start_brokers(brokers, 180)
        wait_joined(brokers, 2, 120)
        e = Env(zk, connect, ",".join(b.bootstrap for b in brokers), brokers)
        yield e
    finally:
        if e is not None:
            e.close()
        if brokers:
            kill_brokers(brokers)
        zk.kill()


@pytest.fixture
def consumers(tmp_path):
    """Start runner processes; every one is stopped at the end of the test."""
    made: list[ConsumerProcess] = []

    def start(config: dict, what: str, streams: int = 1) -> ConsumerProcess:
        c = ConsumerProcess(tmp_path, config, what, streams)
        made.append(c)
        return c

    yield start
    for c in made:
        c.kill()
        c.log.close()
