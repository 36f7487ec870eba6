"""The cost of fetch down-conversion: a magic-0 fetcher (Fetch v1), a magic-1 fetcher (Fetch v3)
and a current one (Fetch v11, zero-copy sendfile) reading the same topic from a real broker.

Usage: .venv/bin/python perf/bench_down_convert.py [--records 200000] [--value-size 100]
           [--codec none|gzip|lz4|snappy] [--runs 3]

confluent-kafka fills a one-partition topic first (v2 batches, the chosen codec). Each fetcher is
a plain socket speaking our protocol module (so the client's own decoding is not measured): it
fetches from offset 0 to the high watermark with 1 MiB per request and counts records from the
returned offsets. Printed per fetcher: records/s, MB/s of fetched payload, and broker CPU
(user+sys of the supervisor and all its workers, psutil) per GB of the topic's log; then the
ratios of the old fetchers to the current one. Medians over --runs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from appliance.records.batch import iter_batches  # noqa: E402
from appliance.records.legacy import iter_entries  # noqa: E402
from tests.broker.wire import RawConnection  # noqa: E402
from tests.broker_process import BrokerProcess  # noqa: E402

FETCHERS = (("magic 0 (Fetch v1)", 1), ("magic 1 (Fetch v3)", 3), ("current (Fetch v11)", 11))
TOPIC = "down-convert"


def broker_cpu(pid: int) -> float:
    sup = psutil.Process(pid)
    total = 0.0
    for p in [sup, *sup.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def fill(bootstrap: str, records: int, value_size: int, codec: str) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(timeout=30)
    p = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 20,
                  "batch.num.messages": 10000, "queue.buffering.max.messages": 500000})
    value = b"x" * value_size
    for i in range(records):
        while True:
            try:
                p.produce(TOPIC, value, b"k%d" % i, partition=0)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(120) == 0


def count(data: bytes, version: int) -> tuple[int, int]:
    """(records, next offset) in a fetched records value."""
    if version >= 4:
        n, nxt = 0, -1
        for _, h in iter_batches(data, allow_partial=True):
            n += h.records_count
            nxt = h.base_offset + h.last_offset_delta + 1
        return n, nxt
    n, nxt = 0, -1
    for e in iter_entries(data, allow_partial=True):
        n += len(e.messages)
        nxt = e.messages[-1].offset + 1
    return n, nxt


def fetch_all(port: int, version: int, hw: int) -> tuple[int, int]:
    got = size = 0
    offset = 0
    with RawConnection(port, timeout=60) as conn:
        while offset < hw:
            body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                    "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
                        {"topic": TOPIC, "partitions": [{"partition": 0, "fetch_offset": offset,
                                                         "partition_max_bytes": 1 << 20}]}]}
            part = conn.request(1, version, body).responses[0].partitions[0]
            assert part.error_code == 0, part.error_code
            data = bytes(part.records or b"")
            n, nxt = count(data, version)
            got += n
            size += len(data)
            offset = nxt
    return got, size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--codec", default="none", choices=("none", "gzip", "lz4", "snappy"))
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, BrokerProcess(Path(tmp)) as b:
        fill(b.bootstrap, args.records, args.value_size, args.codec)
        log_bytes = sum(f.stat().st_size for f in Path(b.log_dirs[0]).glob(f"{TOPIC}-0/*.log"))
        rates: dict[str, list[tuple[float, float, float]]] = {name: [] for name, _ in FETCHERS}
        for _ in range(args.runs):
            for name, version in FETCHERS:
                cpu0, t0 = broker_cpu(b.proc.pid), time.perf_counter()
                got, size = fetch_all(b.port, version, args.records)
                dt, cpu = time.perf_counter() - t0, broker_cpu(b.proc.pid) - cpu0
                assert got == args.records, (name, got)
                rates[name].append((got / dt, size / dt / 1e6, cpu / (log_bytes / 1e9)))
    print(f"{args.records} records of {args.value_size} B, codec {args.codec}, log {log_bytes / 1e6:.1f} MB, "
          f"median of {args.runs} runs")
    med = {name: tuple(statistics.median(r[i] for r in rs) for i in range(3)) for name, rs in rates.items()}
    for name, (rps, mbps, cpu_gb) in med.items():
        print(f"  {name:22s} {rps:12,.0f} records/s {mbps:9.1f} MB/s   broker CPU {cpu_gb:7.2f} s/GB")
    cur = med["current (Fetch v11)"]
    for name, _ in FETCHERS[:2]:
        cpu_ratio = f"{med[name][2] / cur[2]:6.1f}x" if cur[2] > 0 else "(current too fast to time: use more --records)"
        print(f"  {name:22s} {med[name][0] / cur[0]:6.2f}x the records/s of current, {cpu_ratio} its broker CPU per GB")


if __name__ == "__main__":
    main()
