"""Offset-commit latency: a synchronous OffsetCommit from confluent-kafka, on one standalone
broker (answered once appended) and on three brokers in cluster mode, where the coordinator
answers only once the commit is on every in-sync replica of its ``__consumer_offsets``
partition (replication factor 3: the followers' replica fetchers must fetch it first).

Usage: .venv/bin/python perf/bench_group_commit.py [--commits 300]

Each commit names new offsets for 6 partitions; the time is from commit() to its return.
ZooKeeper and the brokers are started like the tests' (temporary directory, free ports).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Consumer, TopicPartition  # noqa: E402

from perf.bench_replication import _create, three_brokers  # noqa: E402
from tests.broker_process import BrokerProcess, stop_on_sigterm  # noqa: E402

PARTITIONS = 6


def _commit_latencies(boot: str, commits: int) -> list[float]:
    c = Consumer({"bootstrap.servers": boot, "group.id": f"bench-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False})
    try:
        out = []
        for i in range(commits + 20):  # the first ones find the coordinator (and create the topic)
            offsets = [TopicPartition("bench", p, i + 1) for p in range(PARTITIONS)]
            start = time.perf_counter()
            while True:
                try:
                    c.commit(offsets=offsets, asynchronous=False)
                    break
                except Exception:
                    if i >= 20:
                        raise
                    time.sleep(0.2)
            if i >= 20:
                out.append(time.perf_counter() - start)
        return sorted(out)
    finally:
        c.close()


def _report(label: str, lat: list[float]) -> None:
    p50, p99 = lat[len(lat) // 2], lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    print(f"{label}: p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, max {lat[-1] * 1000:.1f} ms "
          f"over {len(lat)} commits")


def main() -> int:
    stop_on_sigterm()
    ap = argparse.ArgumentParser()
    ap.add_argument("--commits", type=int, default=300)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-commit-"))
    (work / "single").mkdir()
    with BrokerProcess(work / "single") as b:
        _create(b.bootstrap, "bench", PARTITIONS, 1, {})
        _report("standalone broker          ", _commit_latencies(b.bootstrap, args.commits))
    with three_brokers(work) as (_, boot):
        _create(boot, "bench", PARTITIONS, 3, {})
        _report("3 brokers, offsets RF 3    ", _commit_latencies(boot, args.commits))
    return 0


if __name__ == "__main__":
    sys.exit(main())
