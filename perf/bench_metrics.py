"""The produce-path cost of the metrics: the same produce load with metrics.listener set (on)
and empty (off), alternating, several runs, medians.

Usage: .venv/bin/python perf/bench_metrics.py [--runs 5] [--single 20000] [--batched 1000000]
           [--value-size 100] [--dir DIR]

Each run starts a fresh broker (tests/broker_process.py: 2 network workers, 1 log dir) for each
mode, in the order off, on, on, off, ... (so a load drift on the shared machine falls on both),
warms it up untimed (a few thousand records, which also loads the numba kernels in the workers),
then times two workloads on a 1-partition topic with one confluent-kafka producer (acks=1):

- single: --single records, one record per Produce request (batch.num.messages=1, linger.ms=0):
  the path where a fixed per-request cost weighs most;
- batched: --batched records of --value-size bytes in large batches (linger.ms=5, 1 MiB).

Figures per workload and mode: records/s (from the first produce() until flush() returns) and
the broker's CPU (user+sys of the supervisor and every worker, by psutil) per record in
microseconds. CPU per record is the steadier figure on a shared machine: the client competes
for the same two cores. The cost of the metrics is the ratio of the medians, on - off.

On a shared 2-core machine the run-to-run noise of those end-to-end figures is far above 2 %,
so the script also times, in this process, exactly the code a one-record produce request runs
when metrics are on (network worker: the request count, and on one request in 32 the clocks
and the total / response-queue / response-send histograms; disk worker: the byte count, and on
the stamped one in 32 two clocks and the ring-queue and local-time histograms) against a plain
shared-memory slab, and divides it by the broker CPU per
one-record request measured with metrics off: that ratio is the cost on the produce path.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.broker_process import BrokerProcess, free_port, stop_on_sigterm  # noqa: E402

TOPIC = "bench-metrics"


def broker_cpu(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) of the broker's processes, by role."""
    procs = [psutil.Process(pid)]
    procs += procs[0].children(recursive=True)
    out = {"disk": 0.0, "network": 0.0, "supervisor": 0.0}
    for p in procs:
        try:
            t = p.cpu_times()
            title = " ".join(p.cmdline())
        except psutil.Error:
            continue
        role = "disk" if "disk worker" in title else "network" if "network worker" in title \
            else "supervisor"
        out[role] += t.user + t.system
    return out


def produce(bootstrap: str, records: int, value: bytes, single: bool) -> float:
    conf = {"bootstrap.servers": bootstrap, "acks": 1, "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1 << 20}
    if single:
        conf.update({"batch.num.messages": 1, "linger.ms": 0})
    else:
        conf.update({"linger.ms": 5, "batch.size": 1 << 20})
    p = Producer(conf)
    p.list_topics(TOPIC, timeout=10)
    started = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                p.produce(TOPIC, value, partition=0)
                break
            except BufferError:
                p.poll(0.001)
    left = p.flush(120)
    elapsed = time.perf_counter() - started
    if left:
        raise RuntimeError(f"{left} records not acknowledged")
    return elapsed


def run_once(mode: str, args: argparse.Namespace, parent: str) -> dict[str, tuple]:
    workdir = tempfile.mkdtemp(prefix=f"bench-metrics-{mode}-", dir=parent)
    overrides = {"num.network.threads": "2"}
    if mode == "on":
        overrides["metrics.listener"] = f"http://127.0.0.1:{free_port()}/metrics"
    out = {}
    with BrokerProcess(Path(workdir), overrides=overrides) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
        value = b"x" * args.value_size
        produce(b.bootstrap, 2000, value, True)  # warm-up, untimed
        produce(b.bootstrap, 20000, value, False)
        for name, records, single in (("single", args.single, True),
                                      ("batched", args.batched, False)):
            cpu0 = broker_cpu(b.proc.pid)
            elapsed = produce(b.bootstrap, records, value, single)
            cpu1 = broker_cpu(b.proc.pid)
            roles = {r: (cpu1[r] - cpu0[r]) / records * 1e6 for r in cpu1}
            out[name] = (records / elapsed, sum(roles.values()), roles)
    return out


# The metrics code of one one-record produce request, as written in handlers/produce.py (start
# and finish), broker/network_worker.py (the connection's write of the answer),
# broker/disk/requests.py (Requests.handle: the timed path of a stamped message) and
# broker/disk/partitions.py (produce; the bytes go to shared memory 4 times a second, not
# timed here), around stand-ins for what it surrounds. One request in
# SAMPLE takes the timed path on both sides, as in the broker.
_NET = """
stamp = 0
m = ctx.metrics
if m is not None:
    m.produce_count = n = m.produce_count + 1
    if not n & SAMPLE_MASK:
        m.w[0] = n
        received = clock()
        p.timing = timed[answer] = AnswerTiming(0, received)
        stamp = int(received * 1e6) & 0xFFFFFFFF or 1
if p.timing is not None:
    p.timing.ready = clock()
if timed:
    t = timed.pop(answer, None)
    if t is not None:
        t.writing = clock()
        m.sent(t, clock())
    p.timing = None
"""
_DISK = """
rq.i = i = rq.i + 1
stamp = 0 if rq.metrics is None or i & SAMPLE_MASK else 1
if stamp and rq.metrics is not None:
    taken = clock()
    rq.metrics.queued_us(0, (int(taken * 1e6) - stamp) & 0xFFFFFFFF)
    plog.log_end_offset += 1
    rq.metrics.local(0, clock() - taken)
else:
    plog.log_end_offset += 1
m = parts.metrics
if m is not None and slot < COUNTER_PARTITIONS:
    pending = parts.bytes_pending
    if not pending[slot]:
        parts.bytes_dirty.append(slot)
    pending[slot] += len(body)
"""


def hook_cost_ns(rounds: int = 9, loops: int = 100_000) -> dict[str, list[float]]:
    """ns per one-record produce request of the metrics code (on minus off), per side; each
    round times off and on back to back (best of 3 each), so a load change hits both."""
    import timeit
    from types import SimpleNamespace

    from appliance.metrics.recorder import SAMPLE_MASK, AnswerTiming, Recorder
    from appliance.shm.counters import SharedCounters
    from appliance.shm.layout import COUNTER_PARTITIONS, counters_name

    counters = SharedCounters.create(counters_name(f"bench-metrics-{free_port()}"))
    try:
        costs: dict[str, list[float]] = {"network": [], "disk": []}
        for _ in range(rounds):
            for side, code in (("network", _NET), ("disk", _DISK)):
                per = {}
                for mode in ("off", "on"):
                    m = Recorder(counters, 2) if mode == "on" else None
                    env = {"ctx": SimpleNamespace(metrics=m), "parts": SimpleNamespace(
                               metrics=m, bytes_pending=[0] * COUNTER_PARTITIONS, bytes_dirty=[]),
                           "rq": SimpleNamespace(metrics=m, i=0), "p": SimpleNamespace(timing=None),
                           "timed": {}, "answer": object(), "AnswerTiming": AnswerTiming,
                           "plog": SimpleNamespace(log_end_offset=0), "clock": time.monotonic,
                           "SAMPLE_MASK": SAMPLE_MASK, "COUNTER_PARTITIONS": COUNTER_PARTITIONS,
                           "slot": 7, "body": b"x" * 170}
                    per[mode] = min(timeit.repeat(code, globals=env, number=loops,
                                                  repeat=3)) / loops * 1e9
                costs[side].append(per["on"] - per["off"])
        return costs
    finally:
        counters.close()
        counters.unlink()


def main() -> None:
    stop_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--single", type=int, default=20000)
    ap.add_argument("--batched", type=int, default=1_000_000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--dir", default=None, help="parent of the temporary broker directories")
    args = ap.parse_args()
    results: dict[tuple[str, str], list[tuple]] = {}
    with tempfile.TemporaryDirectory(dir=args.dir) as parent:
        for run in range(args.runs):
            order = ("off", "on") if run % 2 == 0 else ("on", "off")
            for mode in order:
                for name, figures in run_once(mode, args, parent).items():
                    results.setdefault((name, mode), []).append(figures)
                    roles = "  ".join(f"{r} {v:.2f}" for r, v in figures[2].items())
                    print(f"run {run + 1} {mode:3} {name:7} {figures[0]:12,.0f} records/s "
                          f"{figures[1]:8.2f} us broker CPU/record ({roles})", flush=True)
    print(f"\nmedians of {args.runs} runs [min - max]; value {args.value_size} B; "
          f"single = {args.single:,} one-record requests, batched = {args.batched:,} records")
    for name in ("single", "batched"):
        med = {}
        for mode in ("off", "on"):
            rates = [f[0] for f in results[(name, mode)]]
            cpus = [f[1] for f in results[(name, mode)]]
            med[mode] = (statistics.median(rates), statistics.median(cpus))
            print(f"  {name:7} {mode:3} {med[mode][0]:12,.0f} records/s [{min(rates):,.0f} - "
                  f"{max(rates):,.0f}]  {med[mode][1]:8.3f} us CPU/record [{min(cpus):.3f} - "
                  f"{max(cpus):.3f}]")
        print(f"  {name:7} cost of metrics: throughput {med['on'][0] / med['off'][0] - 1:+.2%}, "
              f"broker CPU per record {med['on'][1] / med['off'][1] - 1:+.2%}")
        for role in ("disk", "network", "supervisor"):
            by_mode = {mode: statistics.median(f[2][role] for f in results[(name, mode)])
                       for mode in ("off", "on")}
            print(f"  {name:7}   {role:10} us CPU/record: off {by_mode['off']:.3f}, on {by_mode['on']:.3f}")
        if name == "single":
            per_request_us = med["off"][1]
    costs = hook_cost_ns()
    net, disk = statistics.median(costs["network"]), statistics.median(costs["disk"])
    total = [a + b for a, b in zip(costs["network"], costs["disk"], strict=True)]
    print(f"\nmetrics code per one-record produce request, on minus off (this process, "
          f"{len(total)} rounds, medians [min - max]): network worker {net:.0f} ns, disk worker "
          f"{disk:.0f} ns, together {statistics.median(total):.0f} ns [{min(total):.0f} - "
          f"{max(total):.0f}]")
    print(f"broker CPU per one-record request with metrics off (median): {per_request_us:.1f} us; "
          f"cost of the metrics on the produce path: {statistics.median(total) / (per_request_us * 1000):.2%} "
          f"[{min(total) / (per_request_us * 1000):.2%} - {max(total) / (per_request_us * 1000):.2%}]")

if __name__ == "__main__":
    main()
