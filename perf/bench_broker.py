"""Broker throughput benchmark: confluent-kafka produce then consume against a real `appliance serve`.

Usage: .venv/bin/python perf/bench_broker.py [--records 10000000] [--runs 3] [--value-size 100]
           [--partitions 6] [--api batch|single] [--network-threads N] [--[no-]kcat]
           [--profile DIR] [--keep]

Each run starts a fresh broker (tests/broker_process.py) in a temporary directory, warms it up
untimed (a produce and reads of a small topic: loads the numba kernels in every worker and
makes the broker create __consumer_offsets), creates a 6-partition topic, then:

- produce: one confluent-kafka producer sends --records values of --value-size bytes (acks=1, no
  compression; produce_batch of 10,000 records per call, partitions round-robin, or with
  --api single one produce() per record, keyless), timed from the first call until flush()
  returns (every record acknowledged);
- consume: one confluent-kafka consumer assigns all partitions from offset 0 and reads until it
  has seen every record, timed from assign() to the last record.

For each phase the CPU (user+sys) of every broker process (supervisor and all its children, by
psutil) is sampled before and after, split into disk workers, network workers and the supervisor,
and divided by the gigabytes of log written (sum of the .log segment files, 1 GB = 1e9 bytes;
this is what fetch sends with sendfile). The client's own CPU (this process: the Python loop
plus librdkafka's threads) is reported too, because it competes for the same cores. Kernel work
not charged to a broker process (page-cache writeback threads, softirq on other CPUs) is not
counted.

--profile DIR runs py-spy (nonblocking sampling, 200 Hz) on every disk and network worker
during each phase of the first run, writes speedscope files into DIR and prints the top
functions by self and total time. (A client connection lands on one network worker, chosen by
SO_REUSEPORT; the other one shows as nearly idle.)

--kcat (default when kcat is installed) adds a third phase: the same records read by kcat, a C
client with no per-record Python, so the broker's fetch path is measured without the Python
consumer's per-record cost dominating the machine.

Last, the topic's segment files are sent with plain os.sendfile over loopback to a reader that
drops them: the kernel's own CPU per GB for these bytes (the floor for any broker here).

Figures printed: medians over --runs runs (with min/max to show the noise of a shared machine).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.broker_process import BrokerProcess, stop_on_sigterm  # noqa: E402

TOPIC = "bench"
# Targets for this 2-core machine (the brief); Kafka's figure is from its published benchmark
# (3 brokers x 6 cores, one producer, no replication) and only printed for scale.
TARGET_PRODUCE_RPS = 1_000_000
TARGET_CONSUME_RPS = 1_500_000
TARGET_FETCH_CPU_S_PER_GB = 0.1
KAFKA_PUBLISHED_RPS = 821_557
BATCH = 10_000  # records per produce_batch call
WARMUP_RECORDS = 50_000
WARMUP_READERS = 8

PRODUCER_CONFIG = {
    "acks": 1,
    "compression.type": "none",
    "linger.ms": 20,                       # let batches fill: throughput, not latency
    "batch.size": 1_000_000,               # bytes per partition batch (capped by message.max.bytes)
    "batch.num.messages": 100_000,         # the byte cap binds first (~9,000 100-byte records)
    "queue.buffering.max.messages": 2_000_000,
    "queue.buffering.max.kbytes": 1_048_576,
    "message.max.bytes": 1_000_000,
    "delivery.report.only.error": True,    # no per-record Python callback on success
    "enable.idempotence": False,
}

CONSUMER_CONFIG = {
    "group.id": "bench",                   # required by the client; offsets are never committed
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "fetch.max.bytes": 52_428_800,
    "max.partition.fetch.bytes": 8_388_608,
    "fetch.wait.max.ms": 100,
    "queued.max.messages.kbytes": 1_048_576,
    "queued.min.messages": 1_000_000,
}


# --- CPU accounting --------------------------------------------------------------------------------

def _role(proc: psutil.Process, supervisor_pid: int) -> str:
    if proc.pid == supervisor_pid:
        return "supervisor"
    try:
        cmd = " ".join(proc.cmdline())
    except psutil.Error:
        return "other"
    if "disk worker" in cmd:
        return "disk"
    if "network worker" in cmd:
        return "network"
    return "other"


def broker_cpu(supervisor_pid: int) -> dict[int, tuple[str, float, float, int, int]]:
    """pid -> (role, user s, sys s, voluntary and involuntary context switches) for the
    supervisor and every descendant."""
    sup = psutil.Process(supervisor_pid)
    out = {}
    for p in [sup, *sup.children(recursive=True)]:
        try:
            t, c = p.cpu_times(), p.num_ctx_switches()
            out[p.pid] = (_role(p, supervisor_pid), t.user, t.system, c.voluntary, c.involuntary)
        except psutil.Error:
            continue
    return out


def cpu_delta(before: dict, after: dict) -> dict[str, float]:
    """CPU seconds per role between two snapshots, and per role '<role>_sys' the kernel part,
    '<role>_sleeps' and '<role>_preempts' its voluntary and involuntary context switches (a
    sleep is a wake-up to come); a process born in between counts from 0, one that died is
    lost."""
    roles: dict[str, float] = collections.defaultdict(float)
    total = 0.0
    for pid, (role, user, sys_, vol, inv) in after.items():
        _, user0, sys0, vol0, inv0 = before.get(pid, (role, 0.0, 0.0, 0, 0))
        cpu = (user - user0) + (sys_ - sys0)
        roles[role] += cpu
        total += cpu
        roles[role + "_sys"] += sys_ - sys0
        roles[role + "_sleeps"] += vol - vol0
        roles[role + "_preempts"] += inv - inv0
    roles["total"] = total
    return dict(roles)


def self_cpu() -> float:
    """User+sys CPU of this process, all threads (the Python loop and librdkafka's threads)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def machine_busy() -> float:
    """Non-idle CPU seconds of the whole machine, all CPUs."""
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


def log_bytes(broker: BrokerProcess) -> int:
    return sum(f.stat().st_size for d in broker.log_dirs for f in Path(d).rglob("*.log"))


# --- the kernel's own cost of sendfile over loopback ----------------------------------------------

def sendfile_floor(files: list[Path], chunk: int) -> tuple[float, float, float]:
    """Send ``files`` over a loopback TCP connection with os.sendfile in ``chunk``-byte calls
    (blocking socket, no Python per byte) to a reader that discards them. Returns (sender CPU
    s/GB, of which sys s/GB, GB/s): the floor any broker pays to sendfile these bytes here."""
    lsock = socket.create_server(("127.0.0.1", 0))
    port = lsock.getsockname()[1]
    total = sum(f.stat().st_size for f in files)
    reader = os.fork()
    if reader == 0:  # child: read and drop everything
        try:
            conn, _ = lsock.accept()
            buf = bytearray(4 << 20)
            while conn.recv_into(buf):
                pass
        finally:
            os._exit(0)
    lsock.close()
    t0 = time.perf_counter()
    sender = os.fork()
    if sender == 0:
        try:
            with socket.create_connection(("127.0.0.1", port)) as s:
                for f in files:
                    with open(f, "rb") as fh:
                        off, size = 0, f.stat().st_size
                        while off < size:
                            off += os.sendfile(s.fileno(), fh.fileno(), off, min(chunk, size - off))
        finally:
            os._exit(0)
    _, _, usage = os.wait4(sender, 0)
    os.waitpid(reader, 0)
    elapsed = time.perf_counter() - t0
    gb = total / 1e9
    return (usage.ru_utime + usage.ru_stime) / gb, usage.ru_stime / gb, gb / elapsed


# --- py-spy ----------------------------------------------------------------------------------------

def pyspy_bin() -> str:
    exe = Path(sys.executable).with_name("py-spy")
    return str(exe) if exe.exists() else (shutil.which("py-spy") or "py-spy")


def start_pyspy(pid: int, out: Path, duration: int) -> subprocess.Popen:
    cmd = [pyspy_bin(), "record", "--pid", str(pid), "--duration", str(duration), "--rate", "200",
           "--nonblocking", "--format", "speedscope", "--output", str(out)]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def stop_pyspy(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.send_signal(signal.SIGINT)  # py-spy writes what it has on Ctrl-C
    try:
        p.wait(30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def summarize_speedscope(path: Path, top: int = 15) -> str:
    """Top functions by self and total (inclusive) share of samples, and the hottest lines.

    py-spy's frames are per line; functions are aggregated by (name, file)."""
    doc = json.loads(path.read_text())
    frames = doc["shared"]["frames"]

    def func(i: int) -> str:
        f = frames[i]
        file = "/".join((f.get("file") or "").split("/")[-2:])
        return f"{f['name']} ({file})"

    def line(i: int) -> str:
        return f"{func(i)[:-1]}:{frames[i].get('line', '')})"

    self_f: collections.Counter = collections.Counter()
    self_l: collections.Counter = collections.Counter()
    total_f: collections.Counter = collections.Counter()
    n = 0.0
    for prof in doc["profiles"]:
        for stack, w in zip(prof["samples"], prof["weights"], strict=True):
            n += w
            if stack:
                self_f[func(stack[-1])] += w
                self_l[line(stack[-1])] += w
            for f in {func(i) for i in stack}:
                total_f[f] += w
    # py-spy's speedscope weights are seconds (1/rate per sample); idle samples are not kept.
    out = [f"{path.name}: {n:.2f} s of non-idle samples"]
    if n == 0:
        return out[0]
    out.append("  self%   function")
    out += [f"  {100 * c / n:5.1f}   {f}" for f, c in self_f.most_common(top)]
    out.append("  total%  function (the trunk, frames on >= 90% of stacks, left out)")
    out += [f"  {100 * c / n:5.1f}   {f}" for f, c in total_f.most_common() if c < 0.9 * n][:top]
    out.append("  self%   hottest lines")
    out += [f"  {100 * c / n:5.1f}   {f}" for f, c in self_l.most_common(8)]
    return "\n".join(out)


# --- phases ----------------------------------------------------------------------------------------

def create_topic(bootstrap: str, partitions: int, topic: str = TOPIC) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    fut[topic].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # wait until metadata lists every partition with a leader
        md = admin.list_topics(topic, timeout=10).topics.get(topic)
        if md and md.error is None and len(md.partitions) == partitions and all(
                p.leader >= 0 for p in md.partitions.values()):
            return
        time.sleep(0.1)
    raise TimeoutError("topic not ready")


class Phase:
    """Wall time, broker CPU by role, client CPU and client-side errors over one phase."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.broker = broker
        self.client_errors: collections.Counter = collections.Counter()

    def on_client_error(self, err) -> None:  # librdkafka error_cb: disconnects, timeouts
        self.client_errors[err.name()] += 1

    def __enter__(self) -> Phase:
        self.cpu0 = broker_cpu(self.broker.proc.pid)
        self.client0 = self_cpu()
        self.machine0 = machine_busy()
        self.t0 = time.perf_counter()
        self.external_client = 0.0  # CPU of a client subprocess (kcat), added by the caller
        return self

    def __exit__(self, *exc: object) -> None:
        self.elapsed = time.perf_counter() - self.t0
        self.client = self_cpu() - self.client0
        self.machine = machine_busy() - self.machine0
        self.cpu = cpu_delta(self.cpu0, broker_cpu(self.broker.proc.pid))

    @property
    def others(self) -> float:
        """CPU seconds used on the machine by neither the broker nor the client (shared box)."""
        return max(0.0, self.machine - self.cpu["total"] - self.client - self.external_client)


def produce(broker: BrokerProcess, records: int, value_size: int, api: str = "batch",
            on_start=None, topic: str = TOPIC, partitions: int = 6,
            client_conf: dict | None = None) -> Phase:
    """Send ``records`` values, timed until every one is acknowledged.

    api "batch": Producer.produce_batch with BATCH records per call, partitions round-robin per
    call (the fastest path out of Python: one C call per BATCH records). api "single": one
    produce() call per record, keyless (librdkafka's sticky partitioner fills whole batches).
    ``client_conf`` (bootstrap.servers, security.protocol, ssl.*) replaces the plaintext
    bootstrap.
    """
    errors = []

    def on_error(err, msg):  # only called for failed records (delivery.report.only.error)
        if err is not None:
            errors.append(err)

    phase = Phase(broker)
    p = Producer({"bootstrap.servers": broker.bootstrap, "on_delivery": on_error,
                  "error_cb": phase.on_client_error, **PRODUCER_CONFIG, **(client_conf or {})})
    p.list_topics(topic, timeout=10)  # connect and learn leaders before the clock starts
    value = os.urandom(value_size)
    poll = p.poll
    with phase:
        if on_start:
            on_start()
        if api == "single":
            produce_ = p.produce
            i = 0
            while i < records:
                try:
                    produce_(topic, value)
                    i += 1
                except BufferError:  # local queue full: let librdkafka send, then retry
                    poll(0.005)
                    continue
                if not i & 0xFFFF:
                    poll(0)
        else:
            full = [{"value": value} for _ in range(BATCH)]
            sent, k = 0, 0
            while sent < records:
                msgs = full if records - sent >= BATCH else full[:records - sent]
                part = k % partitions
                k += 1
                while msgs:
                    n = p.produce_batch(topic, msgs, partition=part)
                    sent += n
                    if n < len(msgs):  # queue full: the refused ones carry "_error"
                        msgs = [m for m in msgs if m.pop("_error", None) is not None]
                        poll(0.005)
                    else:
                        msgs = []
                poll(0)
        left = p.flush(600)
    if left or errors:
        raise RuntimeError(f"produce: {left} not delivered, {len(errors)} failed: {errors[:3]}")
    return phase


def consume(broker: BrokerProcess, records: int, partitions: int, on_start=None,
            topic: str = TOPIC) -> Phase:
    """Read ``records`` records from offset 0 of every partition, timed from assign()."""
    phase = Phase(broker)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "error_cb": phase.on_client_error,
                  **CONSUMER_CONFIG})
    c.list_topics(topic, timeout=10)
    got = 0
    with phase:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        if on_start:
            on_start()
        deadline = time.monotonic() + 600
        while got < records:
            msgs = c.consume(100_000, 1.0)
            for m in msgs:
                if m.error() is not None:
                    raise KafkaException(m.error())
            got += len(msgs)
            if time.monotonic() > deadline:
                raise TimeoutError(f"consumed {got} of {records}")
    c.close()
    if got != records:
        raise RuntimeError(f"consumed {got} records, expected {records}")
    return phase


def consume_kcat(broker: BrokerProcess, records: int, on_start=None, topic: str = TOPIC,
                 client_conf: dict | None = None) -> Phase:
    """Read every record with kcat (C, librdkafka, no per-record Python): the broker's fetch path
    without the Python client's per-record cost. One output byte per record, to count them.
    ``client_conf`` (bootstrap.servers, security.protocol, ssl.*) replaces the plaintext
    bootstrap."""
    conf = dict(client_conf or {})
    bootstrap = conf.pop("bootstrap.servers", broker.bootstrap)
    phase = Phase(broker)
    # offset 0 (the topic is new), not "beginning": librdkafka's ListOffsets for a logical
    # offset now and then waits ~500 ms for a retry (see peers/appliance.py, _consume_kcat)
    cmd = ["kcat", "-C", "-b", bootstrap, "-t", topic, "-o", "0", "-e", "-q",
           "-f", ".", "-X", f"fetch.max.bytes={CONSUMER_CONFIG['fetch.max.bytes']}",
           "-X", f"max.partition.fetch.bytes={CONSUMER_CONFIG['max.partition.fetch.bytes']}",
           "-X", f"queued.max.messages.kbytes={CONSUMER_CONFIG['queued.max.messages.kbytes']}",
           "-X", f"fetch.wait.max.ms={CONSUMER_CONFIG['fetch.wait.max.ms']}",
           # as the Python consumer: below it librdkafka pauses fetching ~1 s (see peers/appliance.py)
           "-X", f"queued.min.messages={CONSUMER_CONFIG['queued.min.messages']}"]
    for k, v in conf.items():
        cmd += ["-X", f"{k}={v}"]
    with phase:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if on_start:
            on_start()
        got = 0
        while chunk := p.stdout.read(1 << 20):
            got += len(chunk)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
    phase.external_client = usage.ru_utime + usage.ru_stime
    if p.returncode != 0 or got != records:
        raise RuntimeError(f"kcat exited {p.returncode} after {got} of {records} records: "
                           f"{p.stderr.read().decode(errors='replace')[-2000:]}")
    p.stderr.close()
    p.stdout.close()
    return phase


def run_once(args: argparse.Namespace, run: int, profile_dir: Path | None) -> dict:
    work = Path(tempfile.mkdtemp(prefix="bench-broker-", dir=args.dir))
    overrides = {"num.partitions": str(args.partitions)}
    if args.network_threads:
        overrides["num.network.threads"] = str(args.network_threads)
    broker = BrokerProcess(work, overrides=overrides)
    result: dict = {}
    spies: list[subprocess.Popen] = []
    try:
        broker.start()
        # Warm-up outside the clock: the first produce loads the native kernels in the disk
        # worker, and the first consumer with a group.id makes the broker create
        # __consumer_offsets; both are one-off costs a steady-state figure must not include.
        t0 = time.perf_counter()
        create_topic(broker.bootstrap, args.partitions, "bench-warmup")
        result["warmup_produce"] = produce(broker, WARMUP_RECORDS, args.value_size, args.api,
                                           topic="bench-warmup", partitions=args.partitions)
        result["warmup_consume"] = consume(broker, WARMUP_RECORDS, args.partitions,
                                           topic="bench-warmup")
        # A connection lands on one network worker (SO_REUSEPORT hash); each loads its
        # fetch-path kernels on its first fetch. Several short readers reach every worker
        # with near certainty (each misses a given worker with p = 1/2 for two workers).
        for _ in range(WARMUP_READERS):
            if args.kcat:
                consume_kcat(broker, WARMUP_RECORDS, topic="bench-warmup")
            else:
                consume(broker, WARMUP_RECORDS, args.partitions, topic="bench-warmup")
        result["warmup_s"] = time.perf_counter() - t0
        create_topic(broker.bootstrap, args.partitions)
        time.sleep(1.0)
        disk_pids = broker.worker_pids("disk worker")
        net_pids = sorted(broker.worker_pids("network worker"))

        def profiler(phase_name: str):
            if profile_dir is None:
                return None

            def start() -> None:
                targets = {f"disk{i}": pid for i, pid in enumerate(disk_pids)}
                targets.update({f"network{i}": pid for i, pid in enumerate(net_pids)})
                for role, pid in targets.items():
                    out = profile_dir / f"{phase_name}-{role}.speedscope.json"
                    spies.append(start_pyspy(pid, out, args.profile_seconds))
            return start

        size0 = log_bytes(broker)
        ph = produce(broker, args.records, args.value_size, args.api, profiler("produce"),
                     partitions=args.partitions)
        for s in spies:
            stop_pyspy(s)
        spies.clear()
        size = log_bytes(broker) - size0
        result["produce"] = (ph, size)
        time.sleep(1.0)  # let the disk worker's periodic work settle before the next phase
        ph = consume(broker, args.records, args.partitions, profiler("consume"))
        for s in spies:
            stop_pyspy(s)
        spies.clear()
        result["consume"] = (ph, size)
        if args.kcat:
            time.sleep(1.0)
            ph = consume_kcat(broker, args.records, profiler("consume_kcat"))
            for s in spies:
                stop_pyspy(s)
            spies.clear()
            result["consume_kcat"] = (ph, size)
        files = [f for d in broker.log_dirs for f in Path(d).glob(f"{TOPIC}-*/*.log")]
        result["floor"] = {c: sendfile_floor(files, c) for c in (1 << 20, 8 << 20)}
    except BaseException:
        print(f"broker log tail ({broker.log_path}):\n{broker.log()[-4000:]}", file=sys.stderr)
        raise
    finally:
        for s in spies:
            stop_pyspy(s)
        try:
            broker.stop()
        finally:
            broker.kill()
            broker._log.close()
            if not args.keep:
                shutil.rmtree(work, ignore_errors=True)
    return result


def describe(ph: Phase, size: int, records: int, value_size: int) -> dict:
    gb = size / 1e9
    return {
        "elapsed": ph.elapsed,
        "rps": records / ph.elapsed,
        "payload_mbs": records * value_size / ph.elapsed / 1e6,
        "log_mbs": size / ph.elapsed / 1e6,
        "broker_cpu_s": ph.cpu["total"],
        "broker_s_per_gb": ph.cpu["total"] / gb,
        "disk_s_per_gb": ph.cpu.get("disk", 0.0) / gb,
        "disk_sys_s_per_gb": ph.cpu.get("disk_sys", 0.0) / gb,
        "network_s_per_gb": ph.cpu.get("network", 0.0) / gb,
        "network_sys_s_per_gb": ph.cpu.get("network_sys", 0.0) / gb,
        "broker_us_per_record": ph.cpu["total"] / records * 1e6,
        "client_us_per_record": (ph.client + ph.external_client) / records * 1e6,
        "supervisor_s_per_gb": ph.cpu.get("supervisor", 0.0) / gb,
        "broker_cores": ph.cpu["total"] / ph.elapsed,
        "disk_cores": ph.cpu.get("disk", 0.0) / ph.elapsed,
        "network_cores": ph.cpu.get("network", 0.0) / ph.elapsed,
        "client_cores": (ph.client + ph.external_client) / ph.elapsed,
        "client_s_per_gb": (ph.client + ph.external_client) / gb,
        "other_cores": ph.others / ph.elapsed,
    }


def verdict(value: float, target: float, higher_is_better: bool = True) -> str:
    ok = value >= target if higher_is_better else value <= target
    return f"{'MET' if ok else 'NOT MET'} ({value / target:.2f}x target)"


def main() -> None:
    stop_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--api", choices=("batch", "single"), default="batch",
                    help="producer call: produce_batch of 10,000 records, or produce() per record")
    ap.add_argument("--network-threads", type=int, default=0, help="num.network.threads (0: config default)")
    ap.add_argument("--kcat", action=argparse.BooleanOptionalAction, default=shutil.which("kcat") is not None,
                    help="also consume with kcat (C client) to show the broker's fetch path alone")
    ap.add_argument("--dir", default=None, help="parent of the temporary broker directory")
    ap.add_argument("--profile", default=None, metavar="DIR",
                    help="py-spy every disk and network worker during each phase of run 1")
    ap.add_argument("--profile-seconds", type=int, default=10)
    ap.add_argument("--keep", action="store_true", help="keep the broker directory (debugging)")
    args = ap.parse_args()

    profile_dir = Path(args.profile) if args.profile else None
    if profile_dir:
        profile_dir.mkdir(parents=True, exist_ok=True)
    phases = ["produce", "consume"] + (["consume_kcat"] if args.kcat else [])
    stats: dict[str, list[dict]] = {p: [] for p in phases}
    for run in range(args.runs):
        res = run_once(args, run, profile_dir if run == 0 else None)
        w = res["warmup_produce"], res["warmup_consume"]
        print(f"run {run + 1} warm-up ({WARMUP_RECORDS:,} records, untimed): {res['warmup_s']:.2f} s;"
              f" broker CPU produce {w[0].cpu['total']:.2f} s (disk {w[0].cpu.get('disk', 0):.2f}),"
              f" consume {w[1].cpu['total']:.2f} s (disk {w[1].cpu.get('disk', 0):.2f})", flush=True)
        for phase in phases:
            ph, size = res[phase]
            d = describe(ph, size, args.records, args.value_size)
            stats[phase].append(d)
            print(f"run {run + 1} {phase:12s}: {d['rps']:>10,.0f} rec/s {d['payload_mbs']:6.1f} MB/s payload"
                  f" {d['log_mbs']:6.1f} MB/s log | broker {d['broker_s_per_gb']:.2f} s/GB"
                  f" (disk {d['disk_s_per_gb']:.2f}, net {d['network_s_per_gb']:.2f})"
                  f" | cores: broker {d['broker_cores']:.2f} client {d['client_cores']:.2f}"
                  f" others {d['other_cores']:.2f}", flush=True)
            if ph.client_errors:
                print(f"      client errors during {phase}: {dict(ph.client_errors)}"
                      " (see the broker log; disconnects stall the client)", flush=True)
        floor = res["floor"]
        stats.setdefault("floor", []).append(floor)
        print(f"run {run + 1} kernel floor, os.sendfile of the topic's segments over loopback: "
              + ", ".join(f"{c >> 20} MiB calls {v[0]:.3f} s/GB (sys {v[1]:.3f}) at {v[2]:.2f} GB/s"
                          for c, v in floor.items()), flush=True)

    def med(phase: str, key: str) -> float:
        return statistics.median(s[key] for s in stats[phase])

    def spread(phase: str, key: str) -> str:
        v = [s[key] for s in stats[phase]]
        return f"min {min(v):,.2f} max {max(v):,.2f}"

    print(f"\nmedians of {args.runs} runs, {args.records:,} records of {args.value_size} B, "
          f"{args.partitions} partitions, producer api {args.api}, {os.cpu_count()} CPUs"
          " (machine shared: 'others' is CPU used by other processes during the phase)")
    for phase in phases:
        print(f"{phase}: {med(phase, 'rps'):,.0f} records/s ({spread(phase, 'rps')}), "
              f"{med(phase, 'payload_mbs'):.1f} MB/s payload, {med(phase, 'log_mbs'):.1f} MB/s log")
        print(f"  broker CPU {med(phase, 'broker_s_per_gb'):.3f} s/GB ({spread(phase, 'broker_s_per_gb')}):"
              f" disk workers {med(phase, 'disk_s_per_gb'):.3f}, network workers "
              f"{med(phase, 'network_s_per_gb'):.3f}, supervisor {med(phase, 'supervisor_s_per_gb'):.3f};"
              f" of which kernel (sys): disk {med(phase, 'disk_sys_s_per_gb'):.3f},"
              f" network {med(phase, 'network_sys_s_per_gb'):.3f}")
        print(f"  per record: broker {med(phase, 'broker_us_per_record'):.3f} us CPU,"
              f" client {med(phase, 'client_us_per_record'):.3f} us CPU")
        print(f"  cores busy: broker {med(phase, 'broker_cores'):.2f} (disk {med(phase, 'disk_cores'):.2f},"
              f" network {med(phase, 'network_cores'):.2f}), client {med(phase, 'client_cores'):.2f}"
              f" ({med(phase, 'client_s_per_gb'):.2f} s/GB), others {med(phase, 'other_cores'):.2f}")
    for c in stats["floor"][0]:
        v = [f[c] for f in stats["floor"]]
        print(f"sendfile floor ({c >> 20} MiB calls, sender CPU, no broker): "
              f"{statistics.median(x[0] for x in v):.3f} s/GB (sys {statistics.median(x[1] for x in v):.3f}),"
              f" {statistics.median(x[2] for x in v):.2f} GB/s")
    # The floor moves with the machine's load as much as the broker does: compare within a run.
    floor8 = [f[8 << 20][0] for f in stats["floor"]]
    for phase in [p for p in phases if p.startswith("consume")]:
        r = [d["broker_s_per_gb"] / fl for d, fl in zip(stats[phase], floor8, strict=True)]
        print(f"broker fetch CPU / sendfile floor (same run), {phase}: median {statistics.median(r):.2f}x"
              f" (min {min(r):.2f} max {max(r):.2f})")
    print("\ntargets:")
    print(f"  produce >= {TARGET_PRODUCE_RPS:,} records/s: "
          f"{verdict(med('produce', 'rps'), TARGET_PRODUCE_RPS)}")
    print(f"  consume >= {TARGET_CONSUME_RPS:,} records/s (confluent-kafka Python consumer): "
          f"{verdict(med('consume', 'rps'), TARGET_CONSUME_RPS)}")
    if args.kcat:
        print(f"  consume >= {TARGET_CONSUME_RPS:,} records/s (kcat): "
              f"{verdict(med('consume_kcat', 'rps'), TARGET_CONSUME_RPS)}")
    print(f"  broker CPU per GB fetched <= {TARGET_FETCH_CPU_S_PER_GB} s (confluent-kafka consumer): "
          f"{verdict(med('consume', 'broker_s_per_gb'), TARGET_FETCH_CPU_S_PER_GB, False)}")
    if args.kcat:
        print(f"  broker CPU per GB fetched <= {TARGET_FETCH_CPU_S_PER_GB} s (kcat): "
              f"{verdict(med('consume_kcat', 'broker_s_per_gb'), TARGET_FETCH_CPU_S_PER_GB, False)}")
    print(f"  for scale only (not measured here): Kafka's published {KAFKA_PUBLISHED_RPS:,} records/s "
          f"(one producer, 6-core brokers)")

    if profile_dir:
        print()
        for f in sorted(profile_dir.glob("*.speedscope.json")):
            print(summarize_speedscope(f))
            print()


if __name__ == "__main__":
    main()
