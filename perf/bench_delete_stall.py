"""How long removing a big topic's files stalls the other partitions of its disk.

    .venv/bin/python perf/bench_delete_stall.py [--gb 1.0] [--runs 5] [--segment-mb 128]

Starts a real broker (one log dir). Per run, fills topic A (one partition) with ``--gb`` GB of
100-byte records over IPC, syncs them to disk (old segments are clean in the page cache, as
deleted ones usually are), then times one-record produce round trips to topic B (the
client's Producer over TCP, acks=1, one record in flight) in a thread while A's files go:

- ``delete``: A deleted (DeleteTopics); the request's own time is printed too;
- ``retention``: A's retention.ms set to 1 (AlterConfigs), so that the next retention check
  (every 500 ms here) expires every closed segment, removed at once (file.delete.delay.ms=0);
- ``delete, read``: the same as ``delete`` after a consumer read a batch at the start of each
  of A's segments, so the network worker holds every segment open when the files go, and the
  last close of each (when DeleteTopics makes it forget the topic) frees its page cache.
  (A segment that retention removes from under a reader is closed by it retire_delay_s = 60 s
  later, on the next read of the partition: outside a 3 s window, so not a scenario here;
  tests/storage/test_reader.py checks that close goes to the closer thread too.)

The broker runs one network worker (num.network.threads=1), so B's round trips and A's reads
share it.

Prints, per scenario, medians over the runs (and min-max) of B's round trips in the 3 s after
the request: median, p99 and the longest; and the longest in the second before it. The
removal happens on the log dir's remover thread (appliance/storage/file_remover.py); before
that it ran in the disk worker's loop, and the longest round trip was the stall.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from appliance.client.connection import BrokerConnection  # noqa: E402
from appliance.client.producer import Producer  # noqa: E402
from appliance.client.simple_consumer import SimpleConsumer  # noqa: E402
from tests.broker_process import BrokerProcess, stop_on_sigterm  # noqa: E402

VALUE = 100
WINDOW_S = 3.0


def _create(admin: BrokerConnection, topic: str, configs: dict[str, str]) -> None:
    r = admin.request(19, {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1,
                                       "assignments": [],
                                       "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
                           "timeout_ms": 30000, "validate_only": False})
    assert r.topics[0].error_code == 0, r


def _fill(port: int, base: str, topic: str, gb: float) -> int:
    values = np.random.default_rng(2).integers(0, 256, (100_000, VALUE), dtype=np.uint8)
    p = Producer(bootstrap_servers=f"127.0.0.1:{port}", transport="ipc", shm_name=base, acks=1, linger_ms=0)
    try:
        sent = 0
        while sent * VALUE < gb * 1e9:
            p.send_many(topic, values, partition=0)
            sent += len(values)
        p.flush()
    finally:
        p.close()
    os.sync()
    return sent


def _read_each_segment(broker: BrokerProcess, topic: str) -> None:
    """Fetch a batch at the base offset of each of ``topic``'s segments (the network worker
    opens and keeps each one)."""
    part = os.path.join(broker.log_dirs[0], f"{topic}-0")
    bases = sorted(int(n[:-4]) for n in os.listdir(part) if n.endswith(".log"))
    with SimpleConsumer(f"127.0.0.1:{broker.port}") as c:
        for base in bases:
            assert c.fetch(topic, 0, base, max_bytes=65536), base


def _round_trips(port: int, topic: str, stop: threading.Event, out: list[tuple[float, float]]) -> None:
    p = Producer(bootstrap_servers=f"127.0.0.1:{port}", acks=1, linger_ms=0)
    try:
        p.send(topic, b"x" * VALUE, partition=0).result(30)  # connection and metadata: not timed
        while not stop.is_set():
            t = time.perf_counter()
            p.send(topic, b"x" * VALUE, partition=0).result(30)
            out.append((t, time.perf_counter() - t))
    finally:
        p.close()


def run(broker: BrokerProcess, admin: BrokerConnection, scenario: str, n: int, gb: float,
        segment_mb: int) -> dict[str, float]:
    base = broker.overrides["appliance.shm.name"]
    tag = scenario.replace(", ", "-")
    a, b = f"big-{tag}-{n}", f"small-{tag}-{n}"
    big = {"segment.bytes": str(segment_mb << 20), "file.delete.delay.ms": "0"}
    _create(admin, a, big)
    _create(admin, b, {})
    _fill(broker.port, base, a, gb)
    if scenario.endswith(", read"):
        _read_each_segment(broker, a)
    samples: list[tuple[float, float]] = []
    stop = threading.Event()
    th = threading.Thread(target=_round_trips, args=(broker.port, b, stop, samples))
    th.start()
    time.sleep(1.5)
    t0 = time.perf_counter()
    if scenario.startswith("delete"):
        r = admin.request(20, {"topic_names": [a], "timeout_ms": 30000})
        assert r.responses[0].error_code == 0, r
    else:
        # AlterConfigs replaces the topic's whole set of overrides: the others are given again
        r = admin.request(33, {"resources": [{"resource_type": 2, "resource_name": a, "configs": [
            {"name": k, "value": v} for k, v in {**big, "retention.ms": "1"}.items()]}],
                               "validate_only": False})
        assert r.responses[0].error_code == 0, r
    took = time.perf_counter() - t0
    time.sleep(WINDOW_S)
    stop.set()
    th.join()
    left = sum(n.endswith(".log") for d in broker.log_dirs if os.path.isdir(os.path.join(d, f"{a}-0"))
               for n in os.listdir(os.path.join(d, f"{a}-0")))
    if scenario.startswith("retention"):
        admin.request(20, {"topic_names": [a], "timeout_ms": 30000})
    admin.request(20, {"topic_names": [b], "timeout_ms": 30000})
    broker.wait_files_removed()
    before = [d for t, d in samples if t0 - 1.0 <= t + d < t0] or [float("nan")]
    during = sorted(d for t, d in samples if t0 <= t + d <= t0 + WINDOW_S)
    return {"request_ms": took * 1e3, "before_max_ms": max(before) * 1e3,
            "median_ms": statistics.median(during) * 1e3,
            "p99_ms": during[int(len(during) * 0.99)] * 1e3, "max_ms": during[-1] * 1e3,
            "round_trips": len(during), "segments_left": left}


def main() -> int:
    stop_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=1.0, help="size of the topic removed")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--segment-mb", type=int, default=128, help="segment.bytes of the big topic, in MiB")
    args = ap.parse_args()
    if args.gb <= 0 or args.runs < 1 or args.segment_mb < 1:
        ap.error("--gb, --runs and --segment-mb must be positive")
    from native.warmup import warmup
    warmup()
    results: dict[str, list[dict[str, float]]] = {"delete": [], "retention": [], "delete, read": []}
    with tempfile.TemporaryDirectory(prefix="bench-delete-") as tmp, \
            BrokerProcess(Path(tmp), overrides={"log.retention.check.interval.ms": "500",
                                                 "num.network.threads": "1"}) as broker:
        admin = BrokerConnection("127.0.0.1", broker.port)
        for n in range(args.runs):
            for scenario in results:
                r = run(broker, admin, scenario, n, args.gb, args.segment_mb)
                results[scenario].append(r)
                print(f"run {n + 1} {scenario:<15}: " + ", ".join(
                    f"{k} {v:,.1f}" if k.endswith("_ms") else f"{k} {v:,.0f}" for k, v in r.items()),
                    flush=True)
        admin.close()
    print(f"\n{args.gb} GB topic ({args.segment_mb} MiB segments, synced) removed while another topic on the "
          f"same disk takes one-record produce round trips; medians of {args.runs} runs [min-max]")
    for scenario, rs in results.items():
        cells = []
        for k in ("request_ms", "before_max_ms", "median_ms", "p99_ms", "max_ms"):
            vs = [r[k] for r in rs]
            cells.append(f"{k} {statistics.median(vs):,.1f} [{min(vs):,.1f}-{max(vs):,.1f}]")
        print(f"{scenario:<15}: " + ", ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
