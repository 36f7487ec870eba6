"""IPC producer vs the same producer over TCP loopback, in one run (issue: appliance.client).

    .venv/bin/python perf/bench_ipc.py [--records 10000000] [--runs 3] [--batch 8000]

Starts a real broker (one log dir) on a free port, creates a 1-partition topic per run, then
produces ``--records`` 100-byte values with ``appliance.client.Producer.send_many`` (acks=1) twice:
``transport="ipc"`` (shared-memory ring to the disk worker) and ``transport="tcp"`` (Kafka Produce
requests over loopback). Same producer, same bulk path (numba batch builder), so the difference
is the transport. Records count when acknowledged. Also measured, as the transports' ceiling:
pre-framed batches built into a reused buffer and pushed through the bare transports.
Also the client's value-by-value paths, over both transports: ``send_many`` of a list of
bytes (``--records``/4) and ``send()`` one record per call (``--records``/40), the caller
keeping every future in a list ("send") or dropping them as it goes ("senddrop": only the
last is kept and checked, as a loop that relies on flush() would).
Prints medians (and min-max) and the targets: IPC >= 5,000,000 records/s, IPC >= 3x TCP,
value-by-value >= 2,000,000 records/s, and what a send() written in Python could not go under: a
loop of trivial Python method calls in the same shape, with and without an object returned per
call (kept in a list, or dropped: a kept Python object per call is also work for Python's cycle
collector). Producer.send's per-record path is C (native/record_run.c), and its futures are not
tracked by the collector, which is how it goes under that floor.
For the bulk cells, the CPU each process spent per record (producer, and the broker's disk and
network workers, from psutil) shows where the time of each transport goes.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import appliance.protocol as proto  # noqa: E402
from appliance.cli.main import CliError  # noqa: E402
from appliance.cli.serve import parse_overrides  # noqa: E402
from appliance.client.connection import BrokerConnection  # noqa: E402
from appliance.client.ipc import IpcTransport  # noqa: E402
from appliance.client.producer import Producer  # noqa: E402
from native.batch_build import build_batch_columns, max_batch_size  # noqa: E402
from perf.workloads.host_memory import add_host_memory_args, host_memory  # noqa: E402
from tests.broker_process import BrokerProcess, stop_on_sigterm  # noqa: E402

VALUE = 100
IPC_TARGET = 5_000_000
RATIO_TARGET = 3.0
PER_RECORD_TARGET = 2_000_000  # issue 15: records sent value by value through the client


def _columns(n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    values = rng.integers(0, 256, n * VALUE, dtype=np.uint8)
    return values, np.arange(0, n * VALUE + 1, VALUE, dtype=np.int64)


def _cpu(procs: dict[str, list[psutil.Process]]) -> dict[str, float]:
    """CPU seconds (user + system) so far of each named group of processes."""
    out = {}
    for name, ps in procs.items():
        total = 0.0
        for proc in ps:
            with contextlib.suppress(psutil.Error):
                t = proc.cpu_times()
                total += t.user + t.system
        out[name] = total
    return out


def _processes(broker: BrokerProcess) -> dict[str, list[psutil.Process]]:
    """This process and the broker's workers, by kind (their titles name them)."""
    kids = psutil.Process(broker.proc.pid).children(recursive=True)
    return {"producer": [psutil.Process()],
            "disk worker": [k for k in kids if k.cmdline()[:1] and "disk worker" in k.cmdline()[0]],
            "network workers": [k for k in kids if k.cmdline()[:1] and "network worker" in k.cmdline()[0]]}


def run_producer(port: int, base: str, topic: str, records: int, transport: str,
                 procs: dict[str, list[psutil.Process]] | None = None,
                 split: dict[str, list[float]] | None = None) -> float:
    """The client's Producer: send_many of 100-byte values, 100,000 rows of a uint8 array per call.
    With ``procs``, the CPU ns per record of each group of processes goes into ``split``."""
    values = np.random.default_rng(2).integers(0, 256, (100_000, VALUE), dtype=np.uint8)
    p = Producer(bootstrap_servers=f"127.0.0.1:{port}", transport=transport, shm_name=base, acks=1,
                 linger_ms=0, queue_buffering_max_messages=64)
    try:
        p.partitions_for(topic)
        sent = 0
        before = _cpu(procs or {})
        t0 = time.perf_counter()
        while sent < records:
            p.send_many(topic, values, partition=0)
            sent += len(values)
        p.flush()
        rate = sent / (time.perf_counter() - t0)
        if split is not None:
            for name, cpu in _cpu(procs or {}).items():
                split.setdefault(name, []).append((cpu - before[name]) * 1e9 / sent)
        return rate
    finally:
        p.close()


def run_producer_list(port: int, base: str, topic: str, records: int, transport: str) -> float:
    """send_many of a list of 100-byte bytes values, 10,000 per call (what perf/run.py's
    appliance.client cells do)."""
    chunk = [np.random.default_rng(3).integers(0, 256, VALUE, dtype=np.uint8).tobytes()] * 10_000
    p = Producer(bootstrap_servers=f"127.0.0.1:{port}", transport=transport, shm_name=base, acks=1,
                 linger_ms=5, batch_size=1_000_000)
    try:
        p.partitions_for(topic)
        sent = 0
        t0 = time.perf_counter()
        while sent < records:
            p.send_many(topic, chunk, partition=0)
            sent += len(chunk)
        p.flush()
        return sent / (time.perf_counter() - t0)
    finally:
        p.close()


def run_producer_send(port: int, base: str, topic: str, records: int, transport: str, keep: bool = True) -> float:
    """Producer.send, one 100-byte record per call, a future per record: all kept in a list
    (``keep``), or dropped as they come (the last one kept); the last one is checked."""
    value = np.random.default_rng(4).integers(0, 256, VALUE, dtype=np.uint8).tobytes()
    p = Producer(bootstrap_servers=f"127.0.0.1:{port}", transport=transport, shm_name=base, acks=1,
                 linger_ms=5, batch_size=1_000_000)
    try:
        p.partitions_for(topic)
        send = p.send
        t0 = time.perf_counter()
        if keep:
            futs = [send(topic, value, partition=0) for _ in range(records)]
        else:
            for _ in range(records - 1):
                send(topic, value, partition=0)
            futs = [send(topic, value, partition=0)]
        p.flush()
        rate = records / (time.perf_counter() - t0)
        assert futs[-1].result(30).offset == records - 1
        return rate
    finally:
        p.close()


class _Floor:
    """What one Python call per record costs here, with nothing behind it (the floor of a
    ``Producer.send`` written in Python, as it was before native/record_run.c): ``send``
    returns None; ``send_obj`` returns a two-slot object, as Producer.send must (a future per
    record; a Python object is also work for the cycle collector while the caller keeps it)."""

    class _Pair:
        __slots__ = ("a", "b")

        def __init__(self, a: object, b: int) -> None:
            self.a, self.b = a, b

    def send(self, topic: str, value: bytes, *, partition: int | None = None) -> None:
        return None

    def send_obj(self, topic: str, value: bytes, *, partition: int | None = None) -> object:
        return self._Pair(self, partition)


def run_floor(records: int, kind: str) -> float:
    """Calls per second of _Floor.<kind> in the loop run_producer_send times (``send_obj_drop``:
    send_obj in its loop that drops what it returns)."""
    value = b"x" * VALUE
    send = getattr(_Floor(), kind.removesuffix("_drop"))
    t0 = time.perf_counter()
    if kind.endswith("_drop"):
        for _ in range(records):
            send("topic", value, partition=0)
        futs = None
    else:
        futs = [send("topic", value, partition=0) for _ in range(records)]
    rate = records / (time.perf_counter() - t0)
    del futs
    return rate


def run_ipc(base: str, topic: str, records: int, batch: int) -> float:
    values, offsets = _columns(batch)
    out = np.empty(max_batch_size(batch, 0, batch * VALUE), np.uint8)
    with IpcTransport(base) as t:
        inflight: collections.deque = collections.deque()
        sent = 0
        t0 = time.perf_counter()
        while sent < records:
            view = build_batch_columns(values, offsets, timestamp=int(time.time() * 1000), out=out)
            inflight.append(t.send_batch(topic, 0, view, acks=1))
            sent += batch
            if len(inflight) >= 16:
                inflight.popleft().result(30)
        while inflight:
            inflight.popleft().result(30)
        return sent / (time.perf_counter() - t0)


def run_tcp(port: int, topic: str, records: int, batch: int) -> float:
    values, offsets = _columns(batch)
    out = np.empty(max_batch_size(batch, 0, batch * VALUE), np.uint8)
    conn = proto.ClientConnection("bench")
    version = BrokerConnection("127.0.0.1", port).version_for(0)
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    inflight = 0
    sent = 0

    def wait_one() -> None:
        while True:
            ev = conn.next_event()
            if isinstance(ev, proto.Response):
                err = ev.body.responses[0].partition_responses[0].error_code
                if err:
                    raise RuntimeError(f"produce error {err}")
                return
            conn.receive_data(sock.recv(1 << 20))

    t0 = time.perf_counter()
    while sent < records:
        view = build_batch_columns(values, offsets, timestamp=int(time.time() * 1000), out=out)
        _, frame = conn.send_request(0, version, {
            "transactional_id": None, "acks": 1, "timeout_ms": 30000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": view}]}]})
        sock.sendall(frame)
        inflight += 1
        sent += batch
        if inflight >= 8:
            wait_one()
            inflight -= 1
    while inflight:
        wait_one()
        inflight -= 1
    rate = sent / (time.perf_counter() - t0)
    sock.close()
    return rate


def main() -> int:
    stop_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8000, help="records per batch (<= ~9,500 under message.max.bytes)")
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker setting, as `appliance serve --override` takes it, e.g. "
                         "log.preallocate=true; repeatable")
    add_host_memory_args(ap)
    args = ap.parse_args()
    with host_memory(args):
        return _measure(ap, args)


def _measure(ap: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    try:
        settings = parse_overrides(args.override)
    except CliError as e:
        ap.error(str(e))
    if settings:
        print("broker settings:", ", ".join(f"{k}={v}" for k, v in settings.items()))
    from native.warmup import warmup
    warmup()  # numba kernels compiled or loaded before anything is timed
    v, o = _columns(10)
    build_batch_columns(v, o, timestamp=0)
    results: dict[str, list[float]] = {"producer-ipc": [], "producer-tcp": [], "raw-ipc": [], "raw-tcp": [],
                                       "list-ipc": [], "list-tcp": [], "send-ipc": [], "send-tcp": [],
                                       "senddrop-ipc": [], "senddrop-tcp": [],
                                       "floor-send": [], "floor-send_obj": [], "floor-send_obj_drop": []}
    split: dict[str, dict[str, list[float]]] = {"ipc": {}, "tcp": {}}
    with tempfile.TemporaryDirectory(prefix="bench-ipc-") as tmp, BrokerProcess(Path(tmp), overrides=settings) as broker:
        admin = BrokerConnection("127.0.0.1", broker.port)
        base = broker.overrides["appliance.shm.name"]
        for run in range(args.runs):
            for kind in results:
                topic = f"bench-{kind}-{run}"
                if kind.startswith("floor"):
                    rate = run_floor(args.records // 40, kind.split("-", 1)[1])
                    results[kind].append(rate)
                    print(f"run {run + 1} {kind:<13}: {rate:>12,.0f} calls/s", flush=True)
                    continue
                r = admin.request(19, {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1,
                                                   "assignments": [], "configs": []}],
                                       "timeout_ms": 30000, "validate_only": False})
                assert r.topics[0].error_code == 0, r
                if kind.startswith("list"):
                    rate = run_producer_list(broker.port, base, topic, args.records // 4, kind.split("-")[1])
                elif kind.startswith("send"):
                    rate = run_producer_send(broker.port, base, topic, args.records // 40, kind.split("-")[1],
                                             keep=not kind.startswith("senddrop"))
                elif kind.startswith("producer"):
                    t = kind.split("-")[1]
                    rate = run_producer(broker.port, base, topic, args.records, t, _processes(broker), split[t])
                elif kind == "raw-ipc":
                    rate = run_ipc(base, topic, args.records, args.batch)
                else:
                    rate = run_tcp(broker.port, topic, args.records, args.batch)
                results[kind].append(rate)
                print(f"run {run + 1} {kind:<13}: {rate:>12,.0f} records/s", flush=True)
                admin.request(20, {"topic_names": [topic], "timeout_ms": 30000})
                broker.wait_files_removed()  # off the disk worker's loop: not in the next run's time
        admin.close()
    med = {k: statistics.median(v) for k, v in results.items()}
    mi, mt = med["producer-ipc"], med["producer-tcp"]
    print(f"\n{args.records:,} records of {VALUE} B per run, medians of {args.runs} runs")
    print(f"Producer over IPC : {mi:>12,.0f} records/s  ({mi * VALUE / 1e6:,.0f} MB/s)   target "
          f"{IPC_TARGET:,}: {'MET' if mi >= IPC_TARGET else 'NOT MET'} ({mi / IPC_TARGET:.2f}x)")
    print(f"Producer over TCP : {mt:>12,.0f} records/s  ({mt * VALUE / 1e6:,.0f} MB/s)")
    print(f"IPC / TCP         : {mi / mt:>12.2f}x          target {RATIO_TARGET:.0f}x: "
          f"{'MET' if mi / mt >= RATIO_TARGET else 'NOT MET'}")
    spread = {k: f"[{min(v):,.0f}-{max(v):,.0f}]" for k, v in results.items()}
    print(f"  (min-max of runs: ipc {spread['producer-ipc']}, tcp {spread['producer-tcp']})")
    for t in ("ipc", "tcp"):
        print(f"  CPU per record over {t}: " + ", ".join(
            f"{name} {statistics.median(v):,.0f} ns [{min(v):,.0f}-{max(v):,.0f}]" for name, v in split[t].items()))
    for kind, what, n in (("list", "send_many(list of bytes)", args.records // 4),
                          ("send", "send(), futures kept", args.records // 40),
                          ("senddrop", "send(), futures dropped", args.records // 40)):
        li, lt = med[f"{kind}-ipc"], med[f"{kind}-tcp"]
        print(f"{what:<27} ipc {li:>11,.0f} {spread[kind + '-ipc']}  tcp {lt:>11,.0f} "
              f"{spread[kind + '-tcp']} records/s ({n:,} records)  ipc target {PER_RECORD_TARGET:,}: "
              f"{'MET' if li >= PER_RECORD_TARGET else 'NOT MET'}")
    fs, fo, fd = med["floor-send"], med["floor-send_obj"], med["floor-send_obj_drop"]
    print(f"floor of a send() in Python here: a trivial method call {fs:,.0f} calls/s {spread['floor-send']}; "
          f"one returning a two-slot object {fo:,.0f} {spread['floor-send_obj']} kept, {fd:,.0f} "
          f"{spread['floor-send_obj_drop']} dropped; send() (C) over ipc is {med['send-ipc'] / fo:.0%} of the "
          f"second kept, {med['senddrop-ipc'] / fd:.0%} of it dropped")
    print(f"bare IPC transport: {med['raw-ipc']:>12,.0f} records/s (pre-framed batches of {args.batch})")
    print(f"bare TCP transport: {med['raw-tcp']:>12,.0f} records/s (pre-framed batches of {args.batch})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
