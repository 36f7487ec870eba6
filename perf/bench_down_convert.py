"""The cost of fetch down-conversion: a magic-0 fetcher (Fetch v1), a magic-1 fetcher (Fetch v3)
and a current one (Fetch v11, zero-copy sendfile) reading the same topic from a real broker.

Usage: .venv/bin/python perf/bench_down_convert.py [--records 200000] [--value-size 100]
           [--codec none|gzip|lz4|snappy] [--runs 3] [--inproc]

With ``--inproc`` no broker runs: the converter alone, the numba kernel
(appliance.records.down_convert) against the pure-Python path (appliance.records.convert), on
1 MiB of batches like one Fetch answer, run alternately --runs times each; printed per magic:
records/s of both (median, min, max) and the median of the per-pair ratios.

confluent-kafka fills a one-partition topic first (v2 batches, the chosen codec). Each fetcher is
a plain socket speaking our protocol module (so the client's own decoding is not measured): it
fetches from offset 0 to the high watermark with 1 MiB per request and counts records from the
returned offsets. Printed per fetcher: records/s, MB/s of fetched payload, broker CPU (user+sys
of the supervisor and all its workers, psutil) and this client's CPU per GB of the topic's log
(psutil counts 10 ms ticks: use enough --records); then the ratios of the old fetchers to the
current one. Medians over --runs, with min and max.
"""

from __future__ import annotations

import argparse
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from appliance.records.batch import iter_batches  # noqa: E402
from appliance.records.legacy import iter_entries  # noqa: E402
from tests.broker.wire import RawConnection  # noqa: E402
from tests.broker_process import BrokerProcess, stop_on_sigterm  # noqa: E402

FETCHERS = (("magic 0 (Fetch v1)", 1), ("magic 1 (Fetch v3)", 3), ("current (Fetch v11)", 11))
TOPIC = "down-convert"
_PREFIX = struct.Struct(">qi")  # a legacy entry's offset and messageSize


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


def count(data: bytes, version: int, start: int, check: bool) -> tuple[int, int]:
    """(records, next offset) in a fetched records value.

    Old formats: the topic's offsets have no gaps (no markers, no compaction), so the records
    are the offsets the answer advanced; the walk reads only each entry's 12-byte prefix, so
    this client's own Python costs little next to the broker's. With ``check`` every message
    is decoded (CRCs, inner sets) and counted instead, to show the answer is whole.
    """
    if version >= 4:
        n, nxt = 0, -1
        for _, h in iter_batches(data, allow_partial=True):
            n += h.records_count
            nxt = h.base_offset + h.last_offset_delta + 1
        return n, nxt
    if check:
        n, nxt = 0, -1
        for e in iter_entries(data, allow_partial=True):
            n += len(e.messages)
            nxt = e.messages[-1].offset + 1
        return n, nxt
    pos, last = 0, start - 1
    while pos + _PREFIX.size <= len(data):
        offset, size = _PREFIX.unpack_from(data, pos)
        if pos + _PREFIX.size + size > len(data):
            break  # the byte limit cut the last entry
        last, pos = offset, pos + _PREFIX.size + size
    return last + 1 - start, last + 1


def fetch_all(port: int, version: int, hw: int, check: bool = False) -> tuple[int, int]:
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
            n, nxt = count(data, version, offset, check)
            got += n
            size += len(data)
            offset = nxt
    return got, size


def _fetch_answer(value_size: int, codec: str, batch_records: int = 1000) -> tuple[bytes, int]:
    """About 1 MiB of v2 batches of ``batch_records`` records each, and the record count."""
    from appliance.records.batch import build_batch
    from appliance.records.record_types import Compression

    comp = {"none": Compression.NONE, "gzip": Compression.GZIP, "lz4": Compression.LZ4,
            "snappy": Compression.SNAPPY}[codec]
    value = b"x" * value_size
    out, offset = bytearray(), 0
    raw = 0
    while raw < 1 << 20:
        out += build_batch([(b"k%d" % (offset + i), value) for i in range(batch_records)],
                           base_offset=offset, base_timestamp=1_700_000_000_000, compression=comp)
        raw += batch_records * (value_size + 8)
        offset += batch_records
    return bytes(out), offset


def _spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):12,.0f} (min {min(xs):,.0f}, max {max(xs):,.0f})"


def inproc(args: argparse.Namespace) -> None:
    from appliance.records.convert import v2_to_legacy
    from appliance.records.down_convert import down_convert_batches

    data, n = _fetch_answer(args.value_size, args.codec)
    print(f"in process: {n} records of {args.value_size} B in {len(data) / 1e6:.2f} MB of batches, "
          f"codec {args.codec}, {args.runs} alternating runs; load {psutil.getloadavg()[0]:.2f}")
    for magic in (0, 1):
        assert down_convert_batches(data, magic=magic) == v2_to_legacy(data, magic=magic)
        kernel: list[float] = []
        python: list[float] = []
        for _ in range(args.runs):
            for rates, fn in ((python, v2_to_legacy), (kernel, down_convert_batches)):
                t0 = time.perf_counter()
                fn(data, magic=magic)
                rates.append(n / (time.perf_counter() - t0))
        ratios = [k / p for k, p in zip(kernel, python, strict=True)]
        print(f"  magic {magic}: kernel {_spread(kernel)} records/s")
        print(f"           python {_spread(python)} records/s")
        print(f"           kernel / python: {statistics.median(ratios):.1f}x "
              f"(min {min(ratios):.1f}x, max {max(ratios):.1f}x)")


def main() -> None:
    stop_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--codec", default="none", choices=("none", "gzip", "lz4", "snappy"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--inproc", action="store_true", help="the converter alone, kernel vs Python")
    args = ap.parse_args()
    if args.inproc:
        inproc(args)
        return
    with tempfile.TemporaryDirectory() as tmp, BrokerProcess(Path(tmp)) as b:
        fill(b.bootstrap, args.records, args.value_size, args.codec)
        log_bytes = sum(f.stat().st_size for f in Path(b.log_dirs[0]).glob(f"{TOPIC}-0/*.log"))
        rates: dict[str, list[tuple[float, float, float]]] = {name: [] for name, _ in FETCHERS}
        client: dict[str, list[float]] = {name: [] for name, _ in FETCHERS}  # this process's CPU
        for name, version in FETCHERS:  # untimed: every message decoded once, and a warm-up
            assert fetch_all(b.port, version, args.records, check=True)[0] == args.records, name
        for _ in range(args.runs):
            for name, version in FETCHERS:
                me0 = sum(psutil.Process().cpu_times()[:2])
                cpu0, t0 = broker_cpu(b.proc.pid), time.perf_counter()
                got, size = fetch_all(b.port, version, args.records)
                dt, cpu = time.perf_counter() - t0, broker_cpu(b.proc.pid) - cpu0
                client[name].append(sum(psutil.Process().cpu_times()[:2]) - me0)
                assert got == args.records, (name, got)
                rates[name].append((got / dt, size / dt / 1e6, cpu / (log_bytes / 1e9)))
    print(f"{args.records} records of {args.value_size} B, codec {args.codec}, log {log_bytes / 1e6:.1f} MB, "
          f"median of {args.runs} runs; load {psutil.getloadavg()[0]:.2f}")
    med = {name: tuple(statistics.median(r[i] for r in rs) for i in range(3)) for name, rs in rates.items()}
    for name, (rps, mbps, cpu_gb) in med.items():
        rs = [r[0] for r in rates[name]]
        cs = [r[2] for r in rates[name]]
        print(f"  {name:22s} {rps:12,.0f} records/s (min {min(rs):,.0f}, max {max(rs):,.0f}) "
              f"{mbps:7.1f} MB/s  broker CPU {cpu_gb:6.2f} s/GB (min {min(cs):.2f}, max {max(cs):.2f}), "
              f"client CPU {statistics.median(client[name]) / (log_bytes / 1e9):6.2f} s/GB")
    cur = med["current (Fetch v11)"]
    for name, _ in FETCHERS[:2]:
        cpu_ratio = f"{med[name][2] / cur[2]:6.1f}x" if cur[2] > 0 else "(current too fast to time: use more --records)"
        print(f"  {name:22s} {med[name][0] / cur[0]:6.2f}x the records/s of current, {cpu_ratio} its broker CPU per GB")


if __name__ == "__main__":
    main()
