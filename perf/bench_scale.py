"""Scale benchmark (issue 14): many partitions across several log dirs, many client connections,
restarts clean and after SIGKILL, and the same under a 4,096 open-file soft limit.

Usage: PYTHONPATH=. .venv/bin/python perf/bench_scale.py [--partitions 10000] [--log-dirs 3]
           [--per-topic 100] [--connections 1000] [--rounds 20] [--nofile 4096] [--keep]

Phases, each printed with its figures (and every failure seen, never hidden):
1. create: --partitions partitions as topics of --per-topic partitions (confluent-kafka
   AdminClient), spread by the broker over --log-dirs log dirs; then one record produced to every
   partition (acks=all) and the per-topic errors counted;
2. connections: --connections concurrent TCP connections speaking the Kafka protocol (our sans-I/O
   client on asyncio, one process), each doing --rounds of produce (acks=1, one small batch) and
   fetch (from its own offset) on a random partition; request latencies and failures counted;
3. restart clean (SIGTERM, start) and unclean (SIGKILL of the process group, start): start-up
   time until the port answers and every partition is listed by Metadata with a leader;
4. the same restarts with the broker started under a soft RLIMIT_NOFILE of --nofile (as
   ``ulimit -n 4096`` or ``prlimit`` would; the hard limit is left as it is).
Broker RSS (sum over the process tree) and open descriptors are sampled with psutil before,
during and after every phase.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import resource
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from appliance.protocol.connection import ClientConnection, Response  # noqa: E402
from appliance.records.batch import build_batch  # noqa: E402
from tests.broker.procs import wait_gone  # noqa: E402
from tests.broker.wire import fetch_body, produce_body  # noqa: E402
from tests.broker_process import BrokerProcess, stop_on_sigterm  # noqa: E402


def tree_usage(b: BrokerProcess) -> tuple[float, int, int]:
    """(RSS MiB summed over the broker's processes, open fds summed, processes)."""
    rss = fds = n = 0
    try:
        root = psutil.Process(b.proc.pid)
        for p in [root, *root.children(recursive=True)]:
            try:
                rss += p.memory_info().rss
                fds += p.num_fds()
                n += 1
            except psutil.Error:
                pass
    except psutil.Error:
        pass
    return rss / (1 << 20), fds, n


class Sampler(threading.Thread):
    """Samples tree_usage every ``every`` seconds; peak() gives the maxima."""

    def __init__(self, b: BrokerProcess, every: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.b, self.every, self.samples = b, every, []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.samples.append(tree_usage(self.b))
            self.stop.wait(self.every)

    def peak(self) -> str:
        self.stop.set()
        self.join(5)
        if not self.samples:
            return "no samples"
        return (f"peak RSS {max(s[0] for s in self.samples):.0f} MiB, peak fds "
                f"{max(s[1] for s in self.samples)}")


def usage_line(b: BrokerProcess) -> str:
    rss, fds, n = tree_usage(b)
    return f"RSS {rss:.0f} MiB, {fds} fds, {n} processes"


def topic_names(partitions: int, per_topic: int) -> list[tuple[str, int]]:
    out, left, i = [], partitions, 0
    while left > 0:
        out.append((f"scale-{i:04d}", min(per_topic, left)))
        left -= per_topic
        i += 1
    return out


def create_all(b: BrokerProcess, topics: list[tuple[str, int]]) -> dict[str, str]:
    """Create the topics (10 per call); {topic: error text} for those that failed."""
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    failed: dict[str, str] = {}
    for i in range(0, len(topics), 10):
        chunk = topics[i:i + 10]
        futs = admin.create_topics([NewTopic(t, n, 1) for t, n in chunk], operation_timeout=120,
                                   request_timeout=180)
        for t, f in futs.items():
            try:
                f.result(timeout=240)
            except Exception as e:  # noqa: BLE001 - counted and printed
                failed[t] = str(e)
    return failed


def write_all(b: BrokerProcess, topics: list[tuple[str, int]], skip: set[str]) -> tuple[int, list[str]]:
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 20,
                  "message.timeout.ms": 120_000, "queue.buffering.max.messages": 200_000})
    errors: list[str] = []
    ok = [0]

    def cb(err, msg) -> None:
        if err is None:
            ok[0] += 1
        else:
            errors.append(f"{msg.topic()}-{msg.partition()}: {err.str()}")

    for t, n in topics:
        if t in skip:
            continue
        for part in range(n):
            while True:
                try:
                    p.produce(t, b"scale-%d" % part, partition=part, on_delivery=cb)
                    break
                except BufferError:
                    p.poll(0.05)
        p.poll(0)
    p.flush(180)
    return ok[0], errors


def metadata_ready(b: BrokerProcess, expect: int, timeout: float) -> tuple[float | None, int]:
    """Seconds until Metadata lists ``expect`` partitions with a leader (None: never), count."""
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    t0 = time.monotonic()
    seen = 0
    while time.monotonic() - t0 < timeout:
        try:
            md = admin.list_topics(timeout=30)
            seen = sum(1 for t in md.topics.values() if t.topic.startswith("scale-")
                       for p in t.partitions.values() if p.leader >= 0 and p.error is None)
            if seen >= expect:
                return time.monotonic() - t0, seen
        except Exception:  # noqa: BLE001 - not up yet
            pass
        time.sleep(0.5)
    return None, seen


async def _client(port: int, targets: list[tuple[str, int]], rounds: int, lat: list[float],
                  errors: dict[str, int], rng: random.Random, start: asyncio.Event) -> None:
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 60)
    except Exception as e:  # noqa: BLE001 - counted
        errors[f"connect: {type(e).__name__}"] = errors.get(f"connect: {type(e).__name__}", 0) + 1
        return
    conn = ClientConnection("scale")
    await start.wait()

    async def call(api: int, v: int, body: dict) -> object:
        _, frame = conn.send_request(api, v, body)
        writer.write(frame)
        t0 = time.perf_counter()
        while True:
            ev = conn.next_event()
            if isinstance(ev, Response):
                lat.append(time.perf_counter() - t0)
                return ev.body
            data = await asyncio.wait_for(reader.read(1 << 16), 60)
            if not data:
                raise ConnectionResetError("closed by the broker")
            conn.receive_data(data)

    try:
        for _ in range(rounds):
            topic, part = rng.choice(targets)
            r = await call(0, 7, produce_body(topic, part, build_batch([(None, b"c" * 100)]), acks=1))
            pr = r.responses[0].partition_responses[0]
            if pr.error_code:
                errors[f"produce error {pr.error_code}"] = errors.get(f"produce error {pr.error_code}", 0) + 1
                continue
            f = await call(1, 11, fetch_body(topic, part, pr.base_offset, max_wait_ms=0))
            code = f.responses[0].partitions[0].error_code
            if code:
                errors[f"fetch error {code}"] = errors.get(f"fetch error {code}", 0) + 1
    except Exception as e:  # noqa: BLE001 - counted
        key = f"{type(e).__name__}"
        errors[key] = errors.get(key, 0) + 1
    finally:
        writer.close()


async def _connections(port: int, targets: list[tuple[str, int]], n: int, rounds: int
                       ) -> tuple[list[float], dict[str, int], float]:
    lat: list[float] = []
    errors: dict[str, int] = {}
    start = asyncio.Event()
    rng = random.Random(14)
    tasks = [asyncio.create_task(_client(port, targets, rounds, lat, errors, random.Random(rng.random()),
                                         start)) for _ in range(n)]
    await asyncio.sleep(2)  # let every connection open first: they are concurrent, not sequential
    t0 = time.perf_counter()
    start.set()
    await asyncio.gather(*tasks)
    return lat, errors, time.perf_counter() - t0


def start_broker(workdir: Path, log_dirs: int, port: int | None, nofile: int | None,
                 timeout: float = 600) -> tuple[BrokerProcess, float]:
    """Start (optionally under a soft open-file limit, inherited by the broker); (broker, s)."""
    saved = resource.getrlimit(resource.RLIMIT_NOFILE)
    b = BrokerProcess(workdir, num_log_dirs=log_dirs, port=port)
    t0 = time.monotonic()
    try:
        if nofile:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, saved[1]))
        b.start(timeout=timeout)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, saved)
    return b, time.monotonic() - t0


def restart(b: BrokerProcess, how: str, log_dirs: int, expect: int, nofile: int | None) -> BrokerProcess:
    t0 = time.monotonic()
    if how == "clean":
        try:
            b.stop(timeout=300)
        except Exception as e:  # noqa: BLE001 - printed
            print(f"  FAILURE: clean stop did not finish: {e!r}; SIGKILL", flush=True)
            b.kill()
        stop_s = time.monotonic() - t0
    else:
        b.kill()
        wait_gone(b, 30)
        stop_s = time.monotonic() - t0
    b._log.close()
    label = f"{how} restart" + (f" under a soft limit of {nofile} open files" if nofile else "")
    try:
        nb, listen_s = start_broker(b.workdir, log_dirs, b.port, nofile)
    except Exception as e:  # noqa: BLE001 - printed with the log tail
        print(f"  FAILURE: {label}: the broker did not come up: {str(e)[-3000:]}", flush=True)
        raise
    ready_s, seen = metadata_ready(nb, expect, 300)
    print(f"{label}: stop {stop_s:.1f} s, listening after {listen_s:.1f} s, all {expect} partitions "
          f"led after {'never' if ready_s is None else f'{listen_s + ready_s:.1f} s'} ({seen} seen); "
          f"{usage_line(nb)}", flush=True)
    return nb


def log_excerpt(b: BrokerProcess, n: int = 12) -> str:
    lines = [ln for ln in b.log_path.read_text(errors="replace").splitlines()
             if " ERROR " in ln or " WARNING " in ln or "Error" in ln]
    counts: dict[str, int] = {}
    for ln in lines:
        key = ln[24:200]
        counts[key] = counts.get(key, 0) + 1
    top = sorted(counts.items(), key=lambda kv: -kv[1])[:n]
    return "\n".join(f"    {c:6d}x {k}" for k, c in top) or "    (none)"


def main() -> int:
    stop_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--per-topic", type=int, default=100)
    ap.add_argument("--log-dirs", type=int, default=3)
    ap.add_argument("--connections", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--nofile", type=int, default=4096)
    ap.add_argument("--keep", action="store_true", help="keep the broker's files")
    args = ap.parse_args()

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # our own 1,000 sockets
    work = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    print(f"bench_scale: {args.partitions} partitions over {args.log_dirs} log dirs, "
          f"{args.connections} connections; open-file limit here {soft}/{hard}; work dir {work}",
          flush=True)
    topics = topic_names(args.partitions, args.per_topic)
    b = None
    try:
        b, s = start_broker(work, args.log_dirs, None, None)
        print(f"start (empty): {s:.1f} s; {usage_line(b)}", flush=True)

        sampler = Sampler(b)
        sampler.start()
        t0 = time.monotonic()
        failed = create_all(b, topics)
        made = sum(n for t, n in topics if t not in failed)
        print(f"create: {made} of {args.partitions} partitions in {len(topics) - len(failed)} of "
              f"{len(topics)} topics in {time.monotonic() - t0:.1f} s; {sampler.peak()}; after: "
              f"{usage_line(b)}", flush=True)
        for t, e in list(failed.items())[:5]:
            print(f"  FAILURE: create {t}: {e}", flush=True)
        per_dir = [sum(1 for _ in Path(d).glob("scale-*")) for d in b.log_dirs]
        print(f"  partitions per log dir: {per_dir}", flush=True)

        sampler = Sampler(b)
        sampler.start()
        t0 = time.monotonic()
        ok, errors = write_all(b, topics, set(failed))
        print(f"write: {ok} of {made} partitions got a record in {time.monotonic() - t0:.1f} s, "
              f"{len(errors)} errors; {sampler.peak()}", flush=True)
        for e in errors[:5]:
            print(f"  FAILURE: {e}", flush=True)

        targets = [(t, p) for t, n in topics if t not in failed for p in range(n)]
        if targets:
            sampler = Sampler(b)
            sampler.start()
            lat, cerr, secs = asyncio.run(_connections(b.port, targets, args.connections, args.rounds))
            lat.sort()
            q = (lambda f: lat[min(len(lat) - 1, int(f * len(lat)))] * 1e3) if lat else (lambda f: float("nan"))
            print(f"connections: {args.connections} concurrent, {len(lat)} requests in {secs:.1f} s "
                  f"({len(lat) / max(secs, 1e-9):.0f}/s), latency p50 {q(0.5):.1f} ms p99 {q(0.99):.1f} ms "
                  f"max {q(1.0):.1f} ms; failures {cerr or 'none'}; {sampler.peak()}; after: "
                  f"{usage_line(b)}", flush=True)
        else:
            print("connections: skipped (no partition was created)", flush=True)

        for how in ("clean", "unclean"):
            b = restart(b, how, args.log_dirs, made, None)
        for how in ("clean", "unclean"):
            b = restart(b, how, args.log_dirs, made, args.nofile)
        print("broker log, most frequent ERROR/WARNING lines:\n" + log_excerpt(b), flush=True)
    except Exception as e:  # noqa: BLE001 - a failure is a result: print it and the log
        print(f"FAILURE: {type(e).__name__}: {str(e)[-2000:]}", flush=True)
        if b is not None:
            print("broker log, most frequent ERROR/WARNING lines:\n" + log_excerpt(b), flush=True)
        return 1
    finally:
        if b is not None:
            try:
                b.stop(timeout=120)
            except Exception:  # noqa: BLE001
                pass
            b.kill()
            b.release_shm()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
