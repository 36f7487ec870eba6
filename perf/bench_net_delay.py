"""Replication across test hosts with delay between brokers (issue 45): RF 3, acks=all,
min.insync.replicas 2, an idempotent confluent-kafka producer of 100-byte records, throughput
and per-record latency with 0 ms, 1 ms and 10 ms added to every inter-broker connection, as
ratios to the same invocation's loopback run.

Usage: .venv/bin/python perf/bench_net_delay.py [--records 200000] [--rate 2000]
           [--latency-seconds 8] [--delays 0,1,10] [--repeat 1]

Two clusters, one after the other, each of three brokers and a 6-partition topic:

1. loopback: the brokers and one ZooKeeper on 127.0.0.1 (perf/bench_replication.py's
   three_brokers), the producer in this machine's own namespace;
2. test hosts (tests/network/cluster.py's NetCluster without its stream): each broker and each
   of three ZooKeeper servers in a network namespace of its own on a bridge, the producer in a
   client host. The delay is the hosts' relay (tests/network/relay.py): every chunk of every
   inter-broker connection (replica fetches, controller requests) is held the delay in the relay
   of the broker it goes to. The kernel here has no netem, so the relay is how the harness adds
   delay; at 0 ms the relay's copy and the namespaces' veths are the whole difference.

Each measurement is a child process (in the client host for phase 2) that prints one JSON line:
throughput (--records after a warm-up, timed until flush) and a fixed-rate run (--rate records/s
for --latency-seconds: p50/p99 of produce() to the delivery callback). --repeat N measures each
setting N times in turn and prints the medians. Needs root (namespaces), like tests/network/.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TOPIC = "nemesis"  # NetCluster's topic; the loopback run makes the same one
PARTITIONS = 6


def _measure(args: argparse.Namespace) -> None:
    """The child: one throughput run and one fixed-rate run against --boot; one JSON line."""
    from perf.bench_replication import _latency, _throughput

    value = b"x" * args.value_size
    conf = {"acks": "all", "enable.idempotence": True}
    rps, _ = _throughput(args.boot, TOPIC, args.records, value, PARTITIONS, conf, [])
    run = _latency(args.boot, TOPIC, args.rate, args.latency_seconds, value, PARTITIONS, linger_ms=5)
    lat = sorted(run.lat)
    if len(lat) < args.rate * args.latency_seconds * 0.99:
        raise SystemExit(f"only {len(lat)} records of the fixed-rate run were acknowledged")
    print(json.dumps({"rps": rps, "p50_ms": lat[len(lat) // 2] * 1000,
                      "p99_ms": lat[int(len(lat) * 0.99)] * 1000}), flush=True)


def _child_args(args: argparse.Namespace, boot: str) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--measure", "--boot", boot,
            "--records", str(args.records), "--rate", str(args.rate),
            "--latency-seconds", str(args.latency_seconds), "--value-size", str(args.value_size)]


def _run_child(argv: list[str]) -> dict:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=1800,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    if r.returncode != 0:
        raise RuntimeError(f"measurement failed (exit {r.returncode}): {r.stderr.strip()[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def _median(runs: list[dict]) -> dict:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def _line(name: str, m: dict, base: dict | None) -> str:
    out = f"{name:<24} {m['rps']:>10,.0f} records/s   p50 {m['p50_ms']:7.1f} ms   p99 {m['p99_ms']:7.1f} ms"
    if base is not None:
        out += (f"   throughput {m['rps'] / base['rps']:.2f}x, p99 {m['p99_ms'] / base['p99_ms']:.1f}x"
                " the loopback run's")
    return out


def _loopback(args: argparse.Namespace, work: Path) -> list[dict]:
    from perf.bench_replication import _create, three_brokers

    with three_brokers(work / "loopback") as (_brokers, boot):
        _create(boot, TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
        return [_run_child(_child_args(args, boot)) for _ in range(args.repeat)]


def _hosts(args: argparse.Namespace, work: Path, delays: list[float]) -> dict[float, list[dict]]:
    from tests.network.cluster import NetCluster

    c = NetCluster(work / "hosts", log=lambda line: None, stream=False)
    out: dict[float, list[dict]] = {d: [] for d in delays}
    try:
        c.start()
        client = c.net["client"]
        for _ in range(args.repeat):
            for d in delays:
                for r in c.relays.values():
                    r.delay(d, 0)
                print(f"  hosts, {d:g} ms ...", file=sys.stderr, flush=True)
                out[d].append(_run_child(client.command(_child_args(args, c.bootstrap))))
    finally:
        c.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--rate", type=int, default=2_000, help="the fixed-rate run's records/s")
    ap.add_argument("--latency-seconds", type=float, default=8.0)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--delays", default="0,1,10", help="ms added between brokers, comma-separated")
    ap.add_argument("--repeat", type=int, default=1, help="measurements per setting (medians printed)")
    ap.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--boot", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        _measure(args)
        return 0
    delays = [float(d) for d in args.delays.split(",")]
    work = Path(tempfile.mkdtemp(prefix="bench-net-delay-"))
    try:
        print("  loopback ...", file=sys.stderr, flush=True)
        base = _median(_loopback(args, work))
        hosts = _hosts(args, work, delays)
        print(f"RF 3, acks=all, idempotent, {args.value_size}-byte records, {PARTITIONS} partitions; "
              f"throughput of {args.records:,} records; latency at {args.rate:,} records/s for "
              f"{args.latency_seconds:g} s; medians of {args.repeat}")
        print(_line("loopback", base, None))
        for d in delays:
            print(_line(f"hosts, +{d:g} ms", _median(hosts[d]), base))
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
