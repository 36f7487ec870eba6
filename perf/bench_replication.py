"""Replication benchmark: replication factor 3, acks=all, three brokers on this machine, against
the same run's single standalone broker with acks=1 (issue 13's target: >= 33 %, since every byte
is written three times and sent twice more over loopback here), and produce latency at a fixed
rate (target: p99 <= 20 ms at 10,000 records/s).

Usage: .venv/bin/python perf/bench_replication.py [--records 1000000] [--value-size 100]
           [--partitions 6] [--rate 10000] [--latency-seconds 10]
           [--pacer per_record|batched] [--idempotence on|off|both]
           [--skip-single] [--skip-throughput] [--skip-latency] [--breakdown] [--pids-file F]
           [--round-trips N] [--placement shared|split|both] [--broker-cpus LIST]
           [--linger-ms 5]

--skip-single / --skip-throughput leave out phase 1 / phase 2 (the percentage needs both);
--breakdown prints, after phase 3, the CPU per million records of each kind of broker process
(workers by title, summed over the three brokers); --pids-file writes the brokers' worker pids
and titles at the start of phase 3 (for py-spy or strace by pid); --round-trips N adds a phase 4:
N single records produced one at a time (acks=all, each flushed before the next), printing the
median and p90 round trip and the brokers' CPU per round by kind of process: the cost of one
acks=all round with nothing to batch, much less sensitive to other load on the machine than
phase 3's CPU per record (under contention phase 3 batches more and costs less per record).
--breakdown also prints phase 3's process sleeps (voluntary context switches) per 1,000 records
by kind. --pacer batched sends every record that fell due after sleeps of >= 1 ms (perf/run.py's
latency_10k) instead of one produce() at each record's due time; --idempotence off runs phase 3
with a producer that is not idempotent (both: one run of each).

--placement: "shared" runs brokers and client on every CPU; "split" gives the brokers
--broker-cpus (appliance.cpu.affinity; default the upper half of the CPUs) and this client the
rest, as Kafka's published figures had their producers on machines of their own; "both" (the
default) runs every phase in each placement, shared first. On the 2-vCPU test machine a
wake-up of a process on the other CPU costs 13-17 us of CPU against 2.4 us on the same one, and
the client's threads (0.6-1 core at 10,000 records/s) no longer preempt the brokers.

Phases (each on fresh brokers in a temporary directory; ZooKeeper started like the tests'):
1. standalone broker, acks=1: one confluent-kafka producer sends --records values
   (produce_batch-free loop of produce(), round-robin partitions), timed until flush();
2. three brokers in cluster mode, a topic with RF 3 and min.insync.replicas=2, acks=all,
   idempotent: the same;
3. the same cluster, acks=all at --rate records/s for --latency-seconds: per-record latency from
   produce() to its delivery callback; p50/p99/max printed, with the client's side of it from
   librdkafka's statistics (request round trip, time queued in the client; medians of 1 s
   windows) and the client's CPU. When phase 1 runs, the same fixed-rate run against the
   standalone broker with acks=1 is printed first: the floor this machine allows phase 3 at
   that moment (the same client and pacer, no replication).

Phase 3's producer lingers as librdkafka and (since Kafka 4.0, KIP-1030) the Java producer do
by default, 5 ms. With --linger-ms 0, librdkafka's idempotent producer to three brokers keeps
each of its broker threads busy (27 Nov 2026: 0.31-0.32 of a core each, 0.98 in all, at 10,000
records/s; 0.03-0.04 each with 5 ms), and in the shared placement those threads take the CPU
the brokers need: p99 99-121 ms against 8-9 ms with 5 ms (`--records 500000 --latency-seconds
15 --placement both`, 3 runs with `--linger-ms 0` and 3 with the default, and 2 of phase 3 alone;
perf/README.md, "fourth pass"). Issue 15's per-record latency, one broker, is measured with 0.

librdkafka's idempotent producer sends one produce request per partition at a time, whatever
max.in.flight says (librdkafka PR #4989, open), so a record of phase 3 also waits in the client
for the previous request's whole acks=all round: "queued in the client" is about the round
trip, and phase 3's latency about twice the round trip. Without idempotence (--idempotence off)
nothing holds records back to batch them and the brokers fall behind (27 Nov 2026: p50 2.1 s at
3,000 records/s, load 14).

Each phase also prints the brokers' CPU time (user + system of every broker process, psutil) per
million records: steadier than records/s on a shared machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil  # noqa: E402
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from perf.workloads.placement import add_placement_args, describe, placement, placements  # noqa: E402
from tests.broker_process import BrokerProcess, stop_on_sigterm  # noqa: E402
from tests.cluster.zk import ZooKeeperServer  # noqa: E402


def _brokers_known(boot: str) -> int:
    try:
        return len(AdminClient({"bootstrap.servers": boot}).list_topics(timeout=10).brokers)
    except Exception:  # a broker still joining the cluster closes the connection: ask again
        return 0


@contextlib.contextmanager
def three_brokers(work: Path, overrides: dict[str, str] | None = None
                  ) -> Iterator[tuple[list[BrokerProcess], str]]:
    """A ZooKeeper and three brokers under ``work``, all registered; stopped on exit.
    ``overrides``: more broker settings. Yields (brokers, bootstrap string)."""
    zk = ZooKeeperServer(work / "zk").start()
    brokers: list[BrokerProcess] = []
    try:
        connect = f"{zk.connect}/bench{uuid.uuid4().hex[:6]}"
        for i in range(3):
            (work / f"b{i}").mkdir()
            brokers.append(BrokerProcess(work / f"b{i}", overrides={
                "zookeeper.connect": connect, "broker.id": str(i), **(overrides or {})}).start())
        boot = ",".join(b.bootstrap for b in brokers)
        deadline = time.monotonic() + 60
        while _brokers_known(boot) < 3:
            if time.monotonic() > deadline:
                raise RuntimeError("brokers did not register")
            time.sleep(0.5)
        yield brokers, boot
    finally:
        try:
            for b in brokers:
                try:
                    b.stop()
                except subprocess.TimeoutExpired:  # killed by stop(); the others still stop
                    print(f"broker {b.bootstrap} did not stop within 30 s: killed", file=sys.stderr)
                b.kill()
                b.release_shm()  # what a broker killed here left in /dev/shm
        finally:
            zk.kill()  # a broker that failed to stop once left this ZooKeeper running


def _create(boot: str, topic: str, partitions: int, rf: int, configs: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": boot})
    admin.create_topics([NewTopic(topic, partitions, rf, config=configs)])[topic].result(60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            t = admin.list_topics(timeout=10).topics.get(topic)
        except Exception:  # as in _brokers_known
            t = None
        if t is not None and t.error is None and len(t.partitions) == partitions and \
                all(p.leader >= 0 and len(p.isrs) == rf for p in t.partitions.values()):
            return
        time.sleep(0.2)
    raise RuntimeError(f"topic {topic} not ready")


def _processes(brokers: list[BrokerProcess]) -> list[psutil.Process]:
    """Every process of these brokers (supervisor and workers); a broker already gone has none."""
    procs: list[psutil.Process] = []
    for b in brokers:
        try:
            root = psutil.Process(b.proc.pid)
            procs += [root, *root.children(recursive=True)]
        except psutil.Error:
            continue
    return procs


def _cpu_seconds(brokers: list[BrokerProcess]) -> float:
    """User + system CPU of every process of these brokers (supervisor and workers)."""
    total = 0.0
    for p in _processes(brokers):
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system
    return total


def _titles(brokers: list[BrokerProcess]) -> dict[int, str]:
    """pid -> process title (setproctitle) of every process of these brokers."""
    out = {}
    for p in _processes(brokers):
        try:
            out[p.pid] = " ".join(p.cmdline())
        except psutil.Error:
            continue
    return out


def _cpu_by_pid(pids: list[int]) -> dict[int, float]:
    out = {}
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        out[pid] = t.user + t.system
    return out


def _wakeups_by_pid(pids: list[int]) -> dict[int, int]:
    """Voluntary context switches (a process going to sleep, woken later) of each process."""
    out = {}
    for pid in pids:
        try:
            out[pid] = psutil.Process(pid).num_ctx_switches().voluntary
        except psutil.Error:
            continue
    return out


def _kind(title: str) -> str:
    """A worker's kind from its title: 'appliance: disk worker 0 [/x]' -> 'disk worker'."""
    if not title.startswith("appliance:"):
        return "supervisor"
    name = title.split(":", 1)[1].split("[", 1)[0].strip()
    return name.rstrip("0123456789 ") or name


def _throughput(boot: str, topic: str, records: int, value: bytes, partitions: int, conf: dict,
                brokers: list[BrokerProcess]) -> tuple[float, float]:
    """(records/s, broker CPU seconds per million records) after a warm-up."""
    p = Producer({"bootstrap.servers": boot, "linger.ms": 5, "batch.num.messages": 10000,
                  "queue.buffering.max.messages": 2_000_000, **conf})
    for i in range(10_000):  # warm-up: connections, metadata, numba in the workers
        p.produce(topic, value, partition=i % partitions)
    p.flush(60)
    cpu = _cpu_seconds(brokers)
    start = time.perf_counter()
    for i in range(records):
        while True:
            try:
                p.produce(topic, value, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.01)
        if i % 10_000 == 0:
            p.poll(0)
    if p.flush(600):
        raise RuntimeError("records left unacknowledged")
    elapsed = time.perf_counter() - start
    return records / elapsed, (_cpu_seconds(brokers) - cpu) * 1e6 / records


class LatencyRun:
    """What one fixed-rate run saw: per-record latencies (produce() to the delivery callback),
    the client's own CPU seconds (this process: the pacer and librdkafka's threads) and
    librdkafka's per-second statistics windows (request round trip ``rtt``: the broker's time
    plus both sides' scheduling; ``int_latency``: a record's wait in the client's queue)."""

    def __init__(self) -> None:
        self.lat: list[float] = []
        self.client_cpu = 0.0
        self.windows: list[dict] = []

    def _window_ms(self, name: str, q: str) -> list[float]:
        return [b[name][q] / 1000 for st in self.windows for b in st["brokers"].values()
                if b.get("nodeid", -1) >= 0 and b[name]["cnt"]]

    def client_parts(self) -> str:
        """The client's side of the latency: medians over brokers and 1 s windows."""
        if not self.windows:
            return ""
        med = statistics.median
        return (f"client view: request round trip p50 {med(self._window_ms('rtt', 'p50')):.1f} ms, "
                f"p99 {med(self._window_ms('rtt', 'p99')):.1f} ms; queued in the client p50 "
                f"{med(self._window_ms('int_latency', 'p50')):.1f} ms, p99 "
                f"{med(self._window_ms('int_latency', 'p99')):.1f} ms (medians of 1 s windows); "
                f"client CPU {self.client_cpu:.2f} cores")


def _latency(boot: str, topic: str, rate: int, seconds: float, value: bytes, partitions: int,
             acks: str = "all", pacer: str = "per_record", idempotence: bool = True,
             linger_ms: float = 0.0) -> LatencyRun:
    """Records at ``rate`` per second for ``seconds``. Pacer ``per_record``: sleep until each
    record's own due time, one produce() each (an application sending events as they happen);
    ``batched``: sleep >= 1 ms, then send every record that fell due (perf/run.py's
    latency_10k pacer; far fewer wake-ups of this process)."""
    run = LatencyRun()
    p = Producer({"bootstrap.servers": boot, "acks": acks, "enable.idempotence": idempotence and acks == "all",
                  "linger.ms": linger_ms, "statistics.interval.ms": 1000,
                  "stats_cb": lambda js: run.windows.append(json.loads(js))})
    # warm-up: connections, metadata and the producer id first, so the first records' latency
    # is not that of the client's start (it was the whole p99: ~0.5 s for the first 0.5 s)
    for i in range(1000):
        p.produce(topic, value, partition=i % partitions)
    if p.flush(60):
        raise RuntimeError("warm-up records left unacknowledged")
    p.poll(0)
    run.windows.clear()
    lat = run.lat

    def done(err, msg, sent):
        if err is None:
            lat.append(time.perf_counter() - sent)

    cpu = time.process_time()
    start = now = time.perf_counter()
    n = int(rate * seconds)
    i = 0
    while i < n:
        due = start + i / rate
        if pacer == "batched":
            due = max(due, now + 0.001)  # at least 1 ms between sends
        # Sleep in the kernel, not in poll(): confluent-kafka passes poll()'s timeout to
        # librdkafka in whole milliseconds, so poll(0.0004) returns at once and a poll loop
        # until the due time spun (0.74 of a core at 10,000 records/s, taken from librdkafka's
        # own threads on the client's CPU). Callbacks are served by poll(0) before and after.
        p.poll(0)
        now = time.perf_counter()
        if due > now:
            time.sleep(due - now)
            now = time.perf_counter()
        upto = i + 1 if pacer != "batched" else max(i + 1, min(n, int((now - start) * rate) + 1))
        for j in range(i, upto):
            p.produce(topic, value, partition=j % partitions,
                      on_delivery=lambda err, msg, sent=now: done(err, msg, sent))
        i = upto
        p.poll(0)
    p.flush(120)
    run.client_cpu = (time.process_time() - cpu) / max(time.perf_counter() - start, 1e-9)
    p.poll(0)
    return run


def _round_trips(boot: str, topic: str, n: int, value: bytes, partitions: int,
                 brokers: list[BrokerProcess]) -> None:
    p = Producer({"bootstrap.servers": boot, "acks": "all", "enable.idempotence": True, "linger.ms": 0})
    for i in range(100):  # warm-up: connections, metadata, the producer id
        p.produce(topic, value, partition=i % partitions)
    if p.flush(60):
        raise RuntimeError("warm-up records left unacknowledged")
    titles = _titles(brokers)
    before = _cpu_by_pid(list(titles))
    sleeps = _wakeups_by_pid(list(titles))
    rounds = []
    for i in range(n):
        t0 = time.perf_counter()
        p.produce(topic, value, partition=i % partitions)
        if p.flush(30):
            raise RuntimeError("a record left unacknowledged")
        rounds.append(time.perf_counter() - t0)
    after = _cpu_by_pid(list(titles))
    woken = _wakeups_by_pid(list(titles))
    kinds: dict[str, float] = {}
    wakes: dict[str, float] = {}
    for pid, t in after.items():
        k = _kind(titles[pid])
        kinds[k] = kinds.get(k, 0.0) + (t - before.get(pid, t)) * 1e6 / n
        wakes[k] = wakes.get(k, 0.0) + (woken.get(pid, 0) - sleeps.get(pid, 0)) / n
    rounds.sort()
    print(f"acks=all one record at a time: median round {rounds[n // 2] * 1000:.2f} ms, "
          f"p90 {rounds[int(n * 0.9)] * 1000:.2f} ms over {n:,} rounds; broker CPU per round "
          f"{sum(kinds.values()):.0f} us (" + ", ".join(
              f"{k} {v:.0f}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])) + "); "
          f"process sleeps per round {sum(wakes.values()):.1f} (" + ", ".join(
              f"{k} {v:.1f}" for k, v in sorted(wakes.items(), key=lambda kv: -kv[1])) + ")")


def _percentiles(lat: list[float]) -> str:
    lat = sorted(lat)
    p50, p99 = lat[len(lat) // 2], lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    return (f"p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, max {lat[-1] * 1000:.1f} ms "
            f"over {len(lat):,} records")


def main() -> int:
    stop_on_sigterm()
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--rate", type=int, default=10_000)
    ap.add_argument("--latency-seconds", type=float, default=10.0)
    ap.add_argument("--pacer", choices=["per_record", "batched"], default="per_record",
                    help="fixed-rate phases: a produce() at each record's due time, or every "
                         "record due after sleeps of >= 1 ms (perf/run.py's latency_10k)")
    ap.add_argument("--idempotence", choices=["on", "off", "both"], default="on",
                    help="phase 3's producer (on: the issue's setting)")
    ap.add_argument("--skip-single", action="store_true", help="leave out phase 1")
    ap.add_argument("--skip-throughput", action="store_true", help="leave out phase 2")
    ap.add_argument("--breakdown", action="store_true", help="phase 3's CPU per kind of process")
    ap.add_argument("--pids-file", type=Path, help="write 'pid title' lines at phase 3's start")
    ap.add_argument("--round-trips", type=int, default=0, help="phase 4: records one at a time")
    ap.add_argument("--skip-latency", action="store_true", help="leave out phase 3")
    ap.add_argument("--linger-ms", type=float, default=5.0,
                    help="the fixed-rate phases' linger.ms (default: the clients' own default, 5)")
    add_placement_args(ap)
    args = ap.parse_args()
    which = placements(args)
    value = b"x" * args.value_size
    work = Path(tempfile.mkdtemp(prefix="bench-repl-"))
    try:
        for name in which:
            with placement(name, args.broker_cpus) as overrides:
                print(describe(name, args.broker_cpus), flush=True)
                _phases(args, value, work / name, overrides)
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _phases(args: argparse.Namespace, value: bytes, work: Path, overrides: dict[str, str]) -> int:
    single = single_cpu = None
    work.mkdir()
    if not args.skip_single:
        (work / "single").mkdir()
        with BrokerProcess(work / "single", overrides=overrides) as b:
            _create(b.bootstrap, "bench", args.partitions, 1, {})
            single, single_cpu = _throughput(b.bootstrap, "bench", args.records, value, args.partitions,
                                             {"acks": "1"}, [b])
            print(f"single broker, acks=1:        {single:12,.0f} records/s  "
                  f"broker CPU {single_cpu:.1f} s per 1M records", flush=True)
            if not args.skip_latency:
                # the floor of phase 3's figure on this machine now: the same client, pacer and
                # rate, one broker, no replication
                floor = _latency(b.bootstrap, "bench", args.rate, args.latency_seconds, value,
                                 args.partitions, acks="1", pacer=args.pacer,
                                 linger_ms=args.linger_ms)
                if floor.lat:
                    print(f"single broker, acks=1 at {args.rate:,} records/s ({args.pacer} pacer; "
                          f"the machine's floor for phase 3): {_percentiles(floor.lat)}; "
                          f"{floor.client_parts()}", flush=True)

    with three_brokers(work, overrides) as (brokers, boot):
        _create(boot, "bench", args.partitions, 3, {"min.insync.replicas": "2"})
        if not args.skip_throughput:
            repl, repl_cpu = _throughput(boot, "bench", args.records, value, args.partitions,
                                         {"acks": "all", "enable.idempotence": True}, brokers)
            vs = "" if single is None else (
                f"({100 * repl / single:.0f} % of single acks=1; target >= 33 %)  ")
            times = "" if single_cpu is None else f" ({repl_cpu / single_cpu:.1f}x single)"
            print(f"3 brokers, RF 3, acks=all:    {repl:12,.0f} records/s  {vs}"
                  f"broker CPU {repl_cpu:.1f} s per 1M records{times}", flush=True)
        if not args.skip_latency:
            for idem in ([True, False] if args.idempotence == "both" else [args.idempotence == "on"]):
                _phase3(args, value, brokers, boot, idem)
        if args.round_trips:
            _round_trips(boot, "bench", args.round_trips, value, args.partitions, brokers)
    return 0


def _phase3(args: argparse.Namespace, value: bytes, brokers: list[BrokerProcess], boot: str,
            idempotence: bool) -> None:
    titles = _titles(brokers)
    if args.pids_file is not None:
        args.pids_file.write_text("".join(f"{pid} {t}\n" for pid, t in titles.items()))
    before = _cpu_by_pid(list(titles))
    slept = _wakeups_by_pid(list(titles))
    cpu = _cpu_seconds(brokers)
    run = _latency(boot, "bench", args.rate, args.latency_seconds, value, args.partitions,
                   pacer=args.pacer, idempotence=idempotence, linger_ms=args.linger_ms)
    lat = run.lat
    if not lat:
        return
    lat_cpu = (_cpu_seconds(brokers) - cpu) * 1e6 / len(lat)
    after = _cpu_by_pid(list(titles))
    woken = _wakeups_by_pid(list(titles))
    idem = "idempotent" if idempotence else "not idempotent"
    print(f"acks=all at {args.rate:,} records/s ({args.pacer} pacer, {idem}, linger.ms "
          f"{args.linger_ms:g}): {_percentiles(lat)} "
          f"(target p99 <= 20 ms); mean {statistics.fmean(lat) * 1000:.1f} ms; "
          f"broker CPU {lat_cpu:.1f} s per 1M records; {run.client_parts()}", flush=True)
    if args.breakdown:
        kinds: dict[str, float] = {}
        wakes: dict[str, float] = {}
        for pid, t in after.items():
            k = _kind(titles[pid])
            kinds[k] = kinds.get(k, 0.0) + (t - before.get(pid, t)) * 1e6 / len(lat)
            wakes[k] = wakes.get(k, 0.0) + (woken.get(pid, 0) - slept.get(pid, 0)) * 1000 / len(lat)
        print("  broker CPU per 1M records by process kind (3 brokers): " + ", ".join(
            f"{k} {v:.1f} s" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])))
        print("  process sleeps per 1,000 records by process kind (3 brokers): " + ", ".join(
            f"{k} {v:.0f}" for k, v in sorted(wakes.items(), key=lambda kv: -kv[1])), flush=True)


if __name__ == "__main__":
    sys.exit(main())
