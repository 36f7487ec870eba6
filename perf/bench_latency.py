"""End-to-end latency at 10,000 records/s with one record per produce call (issue 15).

Usage: .venv/bin/python perf/bench_latency.py [--runs 5] [--seconds 10] [--rate 10000]
           [--pacer per_record|batched|both] [--placement shared|split|both]
           [--broker-cpus LIST]

The cells of perf/run.py (perf/workloads/spec.py), run alone against one broker with the
confluent-kafka producer (linger.ms=0, acks=1) and a confluent-kafka consumer in another process:

- per_record (latency_10k_per_record): the pacer sleeps until each record's own due time and
  sends it with one produce() call, as an application sending events as they happen;
- batched (latency_10k): the pacer sleeps >= 1 ms and then sends every record that fell due, so
  librdkafka may carry several records per request.

Each value is stamped right before its produce() call; the figure is that stamp to the consumer
seeing the record (perf/workloads/latency.py). Prints p50 / p99 / p99.9 per run and their
medians, min and max over --runs runs. Target (issue 15): per_record p99 <= 5 ms.
--placement (perf/workloads/placement.py; default shared, the cells' own setting): split runs
the broker on --broker-cpus and the producer and consumer on the other CPUs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from perf.peers.appliance import Appliance  # noqa: E402
from perf.workloads.host_memory import add_host_memory_args, host_memory  # noqa: E402
from perf.workloads.placement import add_placement_args, describe, placement, placements  # noqa: E402
from perf.workloads.spec import workloads  # noqa: E402

TARGET_P99_MS = 5.0
CELLS = {"per_record": "latency_10k_per_record", "batched": "latency_10k"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rate", type=int, default=10_000)
    ap.add_argument("--pacer", choices=["per_record", "batched", "both"], default="per_record")
    add_placement_args(ap, default="shared")
    add_host_memory_args(ap)
    args = ap.parse_args()
    by_name = {w.name: w for w in workloads(quick=False)}
    pacers = list(CELLS) if args.pacer == "both" else [args.pacer]
    cells = {p: replace(by_name[CELLS[p]], seconds=args.seconds, rate=args.rate) for p in pacers}
    names = placements(args)
    with host_memory(args):
        for name in names:
            with placement(name, args.broker_cpus) as overrides:
                print(describe(name, args.broker_cpus), flush=True)
                _runs(args, pacers, cells, overrides)


def _runs(args: argparse.Namespace, pacers: list[str], cells: dict, overrides: dict[str, str]) -> None:
    figures: dict[str, dict[str, list[float]]] = {
        p: {"p50_ms": [], "p99_ms": [], "p999_ms": []} for p in pacers}
    peer = Appliance(overrides)
    with tempfile.TemporaryDirectory(prefix="bench-latency-") as tmp:
        peer.start(Path(tmp))
        try:
            for run in range(args.runs):
                for p in pacers:  # alternated: a drift of the machine's speed hits both alike
                    r = peer.run(cells[p], "confluent-kafka", run)
                    for k in figures[p]:
                        figures[p][k].append(r[k])
                    print(f"run {run + 1} {p:10s}: p50 {r['p50_ms']:6.2f}  p99 {r['p99_ms']:7.2f}  "
                          f"p99.9 {r['p999_ms']:7.2f}  max {r['max_ms']:7.2f} ms "
                          f"({r['count']} records after warm-up, {r['received']}/{r['sent']} "
                          f"received; load {os.getloadavg()[0]:.1f})", flush=True)
        finally:
            peer.stop()
    print(f"\n{args.rate} records/s for {args.seconds:g} s x {args.runs} runs, confluent-kafka "
          f"linger.ms=0 acks=1; milliseconds")
    for p in pacers:
        print(f"{p} ({CELLS[p]}):")
        for k, v in figures[p].items():
            print(f"  {k:7s} median {statistics.median(v):7.2f}  min {min(v):7.2f}  max {max(v):7.2f}")
    if "per_record" in figures:
        p99 = statistics.median(figures["per_record"]["p99_ms"])
        print(f"target p99 <= {TARGET_P99_MS:g} ms with one record per produce call: "
              f"{'MET' if p99 <= TARGET_P99_MS else 'NOT MET'} ({p99 / TARGET_P99_MS:.2f}x the target)")


if __name__ == "__main__":
    main()
