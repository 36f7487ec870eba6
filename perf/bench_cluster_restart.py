"""A whole cluster SIGKILLed and started again: how long until it serves a CreateTopics again.

Usage: .venv/bin/python perf/bench_cluster_restart.py [--rounds 3] [--session-ms 6000]

Three brokers in cluster mode (ZooKeeper started like the tests') are started and a topic is
created; then, --rounds times, all three are SIGKILLed and started again side by side, and three
moments are printed, each counted from the kill:
- listening: every broker process accepts connections (process start-up);
- metadata: a broker answers Metadata listing 3 brokers and a controller;
- created: a CreateTopics of a 3-partition, 3-replica topic is answered with every leader elected
  (asked again, 5 s apart, while it fails: before the restarted cluster has a controller).
The median of each over the rounds closes the output. A restart that must wait for the
previous processes' ZooKeeper sessions to expire shows --session-ms in "metadata" and "created".
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tests.broker_process import BrokerProcess, stop_on_sigterm  # noqa: E402
from tests.cluster.zk import ZooKeeperServer  # noqa: E402


def _metadata(boot: str):
    try:
        return AdminClient({"bootstrap.servers": boot}).list_topics(timeout=5)
    except Exception:  # a broker still joining closes the connection
        return None


def _create(boot: str, topic: str) -> bool:
    admin = AdminClient({"bootstrap.servers": boot})  # held until the future is done
    try:
        admin.create_topics([NewTopic(topic, num_partitions=3, replica_assignment=[[0, 1, 2], [1, 2, 0], [2, 0, 1]])],
                            operation_timeout=5)[topic].result(10)
    except Exception as e:
        print(f"    create {topic}: {type(e).__name__} {str(e)[:100]}", flush=True)
        return False
    return True


def main() -> None:
    stop_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--session-ms", type=int, default=6000, help="zookeeper.session.timeout.ms of the brokers")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-restart-"))
    zk = ZooKeeperServer(root / "zk").start()
    connect = f"{zk.connect}/r{uuid.uuid4().hex[:8]}"
    brokers = []
    for i in range(3):
        (root / f"b{i}").mkdir()
        brokers.append(BrokerProcess(root / f"b{i}", overrides={
            "zookeeper.connect": connect, "broker.id": str(i), "num.network.threads": "1",
            "zookeeper.session.timeout.ms": str(args.session_ms)}))
    boot = ",".join(b.bootstrap for b in brokers)
    rows = []
    try:
        with ThreadPoolExecutor(3) as pool:
            list(pool.map(lambda b: b.start(300), brokers))  # the first start may compile kernels
        while not ((md := _metadata(boot)) and len(md.brokers) == 3):
            time.sleep(0.2)
        while not _create(boot, "t0"):
            time.sleep(5)
        for r in range(1, args.rounds + 1):
            t0 = time.monotonic()
            with ThreadPoolExecutor(3) as pool:
                list(pool.map(lambda b: b.kill(), brokers))
                list(pool.map(lambda b: b.start(120), brokers))
            listening = time.monotonic() - t0
            while not ((md := _metadata(boot)) and len(md.brokers) == 3 and md.controller_id >= 0):
                time.sleep(0.2)
            metadata = time.monotonic() - t0
            while not _create(boot, f"t{r}"):
                time.sleep(5)
            created = time.monotonic() - t0
            rows.append((listening, metadata, created))
            print(f"round {r}: listening {listening:.1f} s, metadata {metadata:.1f} s, created {created:.1f} s",
                  flush=True)
    finally:
        for b in brokers:
            b.kill()
        zk.kill()
    med = [statistics.median(col) for col in zip(*rows, strict=True)]
    print(f"median of {len(rows)}: listening {med[0]:.1f} s, metadata {med[1]:.1f} s, created {med[2]:.1f} s")


if __name__ == "__main__":
    main()
