"""Cost of one small produce request: broker CPU per request and round trip, against Redis XADD.

Usage: .venv/bin/python perf/bench_request_cost.py [--requests 20000] [--runs 5]
           [--value-size 100] [--no-redis] [--client raw|confluent|both]
           [--placement shared|split|together|both|all] [--broker-cpus LIST]

Each run starts a fresh broker (tests/broker_process.py, one log dir) and a 1-partition topic, then
sends --requests produce requests one after another, each carrying ONE record of --value-size bytes
and each waited for before the next is sent (no pipelining, no batching):

- raw: a blocking socket sends a Produce v7 (acks=1) frame built once by the project's protocol
  module (only the batch's base offset is the broker's to set; the frame is re-sent as is, so the
  client's own work per request is one send and one recv) and reads the answer. This isolates the
  broker's cost: the client does almost nothing.
- confluent: confluent-kafka with linger.ms=0, max.in.flight=1, acks=1; produce() then flush()
  per record (what an application that waits for each record does).

Measured per client and run: the broker's CPU (user+sys of the supervisor and every worker, psutil
snapshots before and after, split into network and disk workers) divided by the number of
requests, the context switches of the network and disk workers per request (psutil: sleeps,
each a wake-up to come, and preemptions; what the CPU per request is mostly made of,
perf/README.md), and the round-trip time of each request (median, p99). Redis (when redis-server is
installed: `bash perf/setup_peers.sh`) is started privately on a free loopback port with
persistence off, and one client sends XADD of the same value size, one at a time, no pipelining:
its round trip and server CPU per request are printed with our ratio to them.

Also the broker's start-up time (launch to accepting clients; target <= 3 s).

Targets (issue 15): broker CPU per one-record produce <= 60 us; round trip <= 150 us on loopback.
Figures: medians over --runs runs, with min and max (the machine is shared and noisy).
--placement (perf/workloads/placement.py; default shared): split runs the broker (and Redis) on
--broker-cpus and the clients on the other CPUs; together runs all of them on --broker-cpus, so no
request makes a wake-up across CPUs (what those cost on this VM: perf/bench_wakeup.py).
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_broker import broker_cpu, cpu_delta  # noqa: E402

import appliance.protocol as proto  # noqa: E402
from appliance.process.cpu_affinity import parse_cpu_list  # noqa: E402
from appliance.records.batch import build_batch  # noqa: E402
from perf.workloads.host_memory import add_host_memory_args, host_memory  # noqa: E402
from perf.workloads.placement import add_placement_args, describe, placement, placements  # noqa: E402
from tests.broker_process import BrokerProcess, free_port, stop_on_sigterm  # noqa: E402

TARGET_CPU_US = 60.0
TARGET_RTT_US = 150.0
_SIZE = struct.Struct(">i")


def _recv_frame(sock: socket.socket, buf: bytearray) -> None:
    """Read one response frame into ``buf`` (cleared first)."""
    buf.clear()
    while len(buf) < 4:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionResetError("broker closed the connection")
        buf += chunk
    (size,) = _SIZE.unpack_from(buf)
    while len(buf) < size + 4:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionResetError("broker closed the connection")
        buf += chunk


def produce_frame(topic: str, value: bytes) -> bytes:
    batch = build_batch([(None, value)])
    body = {
        "transactional_id": None, "acks": 1, "timeout_ms": 30000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
    }
    return proto.encode_request_frame(0, 7, 1, "bench-request-cost", body)


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def create_topic(broker: BrokerProcess, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)


def high_watermark(broker: BrokerProcess, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "bench-request-cost"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        c.close()


def run_raw(broker: BrokerProcess, topic: str, value: bytes, n: int) -> tuple[list[float], dict]:
    frame = produce_frame(topic, value)
    sock = socket.create_connection(("127.0.0.1", broker.port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = bytearray()
    for _ in range(200):  # untimed: first requests load kernels and fault pages in
        sock.sendall(frame)
        _recv_frame(sock, buf)
    rtts = []
    before = broker_cpu(broker.proc.pid)
    for _ in range(n):
        t0 = time.perf_counter()
        sock.sendall(frame)
        _recv_frame(sock, buf)
        rtts.append(time.perf_counter() - t0)
    after = broker_cpu(broker.proc.pid)
    sock.close()
    # every request must have appended its record: an error answer would be cheaper than a produce
    hw = high_watermark(broker, topic)
    if hw != n + 200:
        raise RuntimeError(f"{topic}: high watermark {hw}, expected {n + 200}: produce failed")
    return rtts, cpu_delta(before, after)


def run_confluent(broker: BrokerProcess, topic: str, value: bytes, n: int) -> tuple[list[float], dict]:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "acks": 1,
                  "max.in.flight.requests.per.connection": 1, "enable.idempotence": False})
    for _ in range(200):
        p.produce(topic, value, partition=0)
        p.flush(10)
    rtts = []
    before = broker_cpu(broker.proc.pid)
    for _ in range(n):
        t0 = time.perf_counter()
        p.produce(topic, value, partition=0)
        if p.flush(10) != 0:
            raise RuntimeError("a record was not acknowledged within 10 s")
        rtts.append(time.perf_counter() - t0)
    after = broker_cpu(broker.proc.pid)
    return rtts, cpu_delta(before, after)


def run_redis(value: bytes, n: int, cpus: set[int] | None = None) -> tuple[list[float], float] | None:
    """Redis XADD one at a time; ``cpus``: the server's CPUs (the brokers' in the split placement)."""
    exe = shutil.which("redis-server")
    try:
        import redis
    except ImportError:
        redis = None
    if exe is None or redis is None:
        return None
    port = free_port()
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL,
                            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
    try:
        r = redis.Redis(host="127.0.0.1", port=port)
        deadline = time.monotonic() + 10
        while True:
            try:
                r.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        for _ in range(200):
            r.xadd("bench", {"v": value})
        server = psutil.Process(proc.pid)
        c0 = sum(server.cpu_times()[:2])
        rtts = []
        for _ in range(n):
            t0 = time.perf_counter()
            r.xadd("bench", {"v": value})
            rtts.append(time.perf_counter() - t0)
        cpu = sum(server.cpu_times()[:2]) - c0
        return rtts, cpu / n
    finally:
        proc.terminate()
        proc.wait(10)


def summary(values: list[float], digits: int = 1) -> str:
    return (f"median {statistics.median(values):8.{digits}f}  min {min(values):8.{digits}f}  "
            f"max {max(values):8.{digits}f}")


def main() -> None:
    stop_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--client", choices=["raw", "confluent", "both"], default="both")
    ap.add_argument("--no-redis", action="store_true")
    add_placement_args(ap, default="shared")
    add_host_memory_args(ap)
    args = ap.parse_args()
    names = placements(args)
    with host_memory(args):
        for name in names:
            with placement(name, args.broker_cpus) as overrides:
                print(describe(name, args.broker_cpus), flush=True)
                _runs(args, overrides)


def _runs(args: argparse.Namespace, overrides: dict[str, str]) -> None:
    value = b"x" * args.value_size
    clients = ["raw", "confluent"] if args.client == "both" else [args.client]
    runners = {"raw": run_raw, "confluent": run_confluent}
    figures: dict[str, dict[str, list[float]]] = {
        c: {"cpu_us": [], "net_us": [], "net_kernel_us": [], "disk_us": [], "disk_kernel_us": [],
            "net_sleeps": [], "net_preempts": [], "disk_sleeps": [], "disk_preempts": [],
            "rtt_p50_us": [], "rtt_p99_us": []}
        for c in clients}
    redis_fig: dict[str, list[float]] = {"cpu_us": [], "rtt_p50_us": [], "rtt_p99_us": []}
    start_s: list[float] = []
    for run in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="bench-reqcost-") as tmp:
            t0 = time.monotonic()
            broker = BrokerProcess(Path(tmp), overrides={"num.partitions": "1", **overrides}).start()
            try:  # from here on the broker is stopped whatever fails (a closed stdout included)
                start_s.append(time.monotonic() - t0)
                print(f"run {run + 1} start-up: accepting clients {start_s[-1]:.2f} s after launch")
                for c in clients:
                    topic = f"cost-{c}"
                    create_topic(broker, topic)
                    rtts, cpu = runners[c](broker, topic, value, args.requests)
                    f = figures[c]
                    f["cpu_us"].append(cpu["total"] / args.requests * 1e6)
                    f["net_us"].append(cpu.get("network", 0.0) / args.requests * 1e6)
                    f["disk_us"].append(cpu.get("disk", 0.0) / args.requests * 1e6)
                    # of which in the kernel (wake-ups, system calls): the user/kernel split
                    f["net_kernel_us"].append(cpu.get("network_sys", 0.0) / args.requests * 1e6)
                    f["disk_kernel_us"].append(cpu.get("disk_sys", 0.0) / args.requests * 1e6)
                    # context switches per request: a sleep (a wake-up to come) or a preemption
                    for short, role in (("net", "network"), ("disk", "disk")):
                        for kind in ("sleeps", "preempts"):
                            f[f"{short}_{kind}"].append(cpu.get(f"{role}_{kind}", 0) / args.requests)
                    f["rtt_p50_us"].append(statistics.median(rtts) * 1e6)
                    f["rtt_p99_us"].append(percentile(rtts, 0.99) * 1e6)
                    print(f"run {run + 1} {c:9s}: broker CPU {f['cpu_us'][-1]:6.1f} us/request "
                          f"(network {f['net_us'][-1]:5.1f}, kernel {f['net_kernel_us'][-1]:5.1f}; "
                          f"disk {f['disk_us'][-1]:5.1f}, kernel {f['disk_kernel_us'][-1]:5.1f}; "
                          f"sleeps + preemptions per request: network {f['net_sleeps'][-1]:.2f} + "
                          f"{f['net_preempts'][-1]:.2f}, disk {f['disk_sleeps'][-1]:.2f} + "
                          f"{f['disk_preempts'][-1]:.2f}), "
                          f"round trip p50 {f['rtt_p50_us'][-1]:6.1f} us, "
                          f"p99 {f['rtt_p99_us'][-1]:7.1f} us", flush=True)
            finally:
                broker.stop()
        if not args.no_redis:
            res = run_redis(value, args.requests,
                            parse_cpu_list(overrides.get("appliance.cpu.affinity", "")) or None)
            if res is None:
                print("redis: not installed (bash perf/setup_peers.sh); no XADD comparison")
                args.no_redis = True
            else:
                rtts, cpu = res
                redis_fig["cpu_us"].append(cpu * 1e6)
                redis_fig["rtt_p50_us"].append(statistics.median(rtts) * 1e6)
                redis_fig["rtt_p99_us"].append(percentile(rtts, 0.99) * 1e6)
                print(f"run {run + 1} redis XADD: server CPU {redis_fig['cpu_us'][-1]:6.1f} us/request, "
                      f"round trip p50 {redis_fig['rtt_p50_us'][-1]:6.1f} us", flush=True)

    print(f"\n{args.requests} sequential one-record produce requests x {args.runs} runs "
          f"({args.value_size}-byte values); figures in microseconds")
    print(f"start-up (launch to accepting clients, s): {summary(start_s)}; target <= 3 s: "
          f"{'MET' if statistics.median(start_s) <= 3.0 else 'NOT MET'}")
    for c in clients:
        f = figures[c]
        print(f"{c}:")
        for k in f:
            print(f"  {k:14s} {summary(f[k], 1 if k.endswith('_us') else 2)}")
        cpu = statistics.median(f["cpu_us"])
        rtt = statistics.median(f["rtt_p50_us"])
        print(f"  target broker CPU <= {TARGET_CPU_US:.0f} us: "
              f"{'MET' if cpu <= TARGET_CPU_US else 'NOT MET'} ({cpu / TARGET_CPU_US:.2f}x the target)")
        print(f"  target round trip <= {TARGET_RTT_US:.0f} us: "
              f"{'MET' if rtt <= TARGET_RTT_US else 'NOT MET'} ({rtt / TARGET_RTT_US:.2f}x the target)")
        if redis_fig["rtt_p50_us"]:
            print(f"  vs redis XADD: round trip {rtt / statistics.median(redis_fig['rtt_p50_us']):.2f}x, "
                  f"server CPU {cpu / statistics.median(redis_fig['cpu_us']):.2f}x")
    if redis_fig["rtt_p50_us"]:
        print("redis XADD:")
        for k in redis_fig:
            print(f"  {k:14s} {summary(redis_fig[k])}")


if __name__ == "__main__":
    main()
