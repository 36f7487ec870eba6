"""The appliance (`appliance serve`, one log dir) driven by every Kafka client we have.

Clients: confluent-kafka (produce_batch of 10,000 values; consume() of up to 100,000), kcat
(C, librdkafka; produces from a file of values, consumes printing one byte per record),
kafka-python (pure Python, fewer records), our appliance.client Producer over TCP and over IPC
(send_many), and the IPC bulk path of perf/bench_ipc.py (numba batch builder, shared-memory ring).
appliance.client is optional: when it does not import, its clients are left out.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from perf.peers.base import Peer, PeerUnavailable
from perf.workloads.latency import Collector, run_latency
from perf.workloads.spec import Workload
from tests.broker_process import BrokerProcess

__all__ = ["Appliance"]

BATCH = 10_000
SLOW_CLIENT_SHARE = 10  # pure-Python clients send records/10 (their rate is what is compared)
# appliance.client moves every record: at 0.6-2 M records/s a tenth (20,000) was a 10-60 ms run,
# within the scheduler's noise on a loaded machine (6 of 60 runs below half the median at load
# 8-10, none of 60 with every record).
SLOW_CLIENTS = ("kafka-python",)
# The clients that reach 2-5 M records/s move at least this many payload bytes per run (quick
# mode's 100,000-200,000 records were 20-70 ms there: 3 of 15 runs of the 1,000-partition cell
# fell under half the median at load 6-8, with ours and other work sharing the CPUs as in the
# fast runs). Full mode's sizes are larger already.
FAST_CLIENTS = ("appliance.client tcp", "appliance.client ipc", "ipc bulk (native builder)")
MIN_RUN_BYTES = 100_000_000
# A cell's untimed warm-up moves this many records (or fewer, if its runs move fewer).
WARM_UP_RECORDS = 10_000

PRODUCER = {
    "compression.type": "none", "linger.ms": 20, "batch.size": 1_000_000,
    "batch.num.messages": 100_000, "queue.buffering.max.messages": 2_000_000,
    "queue.buffering.max.kbytes": 1_048_576, "message.max.bytes": 1_000_000,
    "delivery.report.only.error": True, "enable.idempotence": False, "log_level": 2,
}
CONSUMER = {
    "group.id": "perf", "enable.auto.commit": False, "enable.auto.offset.store": False,
    "fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 8_388_608,
    "fetch.wait.max.ms": 100, "queued.max.messages.kbytes": 1_048_576,
    "queued.min.messages": 1_000_000, "log_level": 2,
}


def _have_appliance_client() -> str | None:
    try:
        from appliance.client.producer import Producer as _P  # noqa: F401
    except Exception as e:  # noqa: BLE001 - any import failure means: skip these clients
        return f"appliance.client unavailable: {e}"
    return None


class Appliance(Peer):
    name = "appliance"

    def __init__(self, overrides: dict[str, str] | None = None) -> None:
        self.overrides = dict(overrides or {})  # more broker settings (perf/workloads/placement.py)
        self.broker: BrokerProcess | None = None
        self._topics = 0
        self._preloaded: dict[str, str] = {}
        self._client_missing = _have_appliance_client()

    # --- lifecycle -----------------------------------------------------------------------------
    def start(self, workdir: Path) -> None:
        self.workdir = workdir
        self.restarts: list[str] = []
        self._start_broker()

    def _start_broker(self) -> None:
        workdir = self.workdir
        self.broker = BrokerProcess(workdir, num_log_dirs=1,
                                    overrides={"num.partitions": "1",
                                               "auto.create.topics.enable": "true",
                                               **self.overrides})
        try:
            self.broker.start()
        except (RuntimeError, TimeoutError) as e:
            raise PeerUnavailable(f"broker did not start: {str(e)[-300:]}") from e
        # not auto-creating: librdkafka refreshes the topics it has seen, and with the broker's
        # auto.create.topics.enable a refresh after a delete made the topic again (1 partition)
        self.admin = AdminClient({"bootstrap.servers": self.broker.bootstrap,
                                  "allow.auto.create.topics": False})
        # Untimed warm-up: the disk worker and network workers load their numba kernels on first use.
        t = self.new_topic(1)
        self._produce_confluent(t, 50_000, 100, 1, 1)
        self._consume_confluent(t, 50_000, 1)
        for _ in range(4):  # SO_REUSEPORT spreads connections: reach each network worker
            self._consume_kcat(t, 50_000)
        self.delete_topic(t)

    def stop(self) -> None:
        # the admin client lives as long as a reference does: kept, it went on reconnecting to
        # the stopped broker through the next system's cells (a thread, and stderr noise)
        self.admin = None
        if self.broker is not None:
            try:
                self.broker.__exit__(None, None, None)
            finally:
                self.broker = None

    def describe(self) -> str:
        out = "appliance serve, 1 log dir, default settings (num.network.threads from config)"
        if getattr(self, "restarts", None):
            out += f"; broker restarted {len(self.restarts)}x after being stopped from outside: " + " | ".join(self.restarts)
        return out

    def log_bytes(self) -> int:
        return sum(f.stat().st_size for d in self.broker.log_dirs for f in Path(d).rglob("*.log"))

    # --- topics --------------------------------------------------------------------------------
    def new_topic(self, partitions: int) -> str:
        self._topics += 1
        name = f"perf-{self._topics}"
        fut = self.admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
        fut[name].result(60)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            md = self.admin.list_topics(name, timeout=10).topics.get(name)
            if md and md.error is None and len(md.partitions) == partitions and all(
                    p.leader >= 0 for p in md.partitions.values()):
                return name
            time.sleep(0.1)
        raise TimeoutError(f"topic {name} not ready")

    def delete_topic(self, name: str) -> None:
        try:
            self.admin.delete_topics([name])[name].result(60)
            # the disk worker removes the files on a thread after answering: let it finish
            # here, untimed, not in the next run
            self.broker.wait_files_removed()
        except Exception:  # noqa: BLE001 - freeing disk is best effort
            pass

    # --- workloads -----------------------------------------------------------------------------
    def clients(self, wl: Workload) -> list[str]:
        ours = [] if self._client_missing else ["appliance.client tcp", "appliance.client ipc"]
        if wl.kind == "produce":
            if wl.partitions > 1 or wl.acks != 1:
                return ["confluent-kafka", *ours[:1]]
            out = ["confluent-kafka", "kcat", "kafka-python", *ours]
            if wl.value_size == 100 and not self._client_missing:
                out.append("ipc bulk (native builder)")
            return out
        if wl.kind == "consume":
            # kafka-python's consumer reads ~1,000 records/s from the appliance (see RUNNER.md):
            # only in full mode, where there is time for it.
            return ["confluent-kafka", "kcat"] + ([] if wl.extra.get("quick") else ["kafka-python"])
        if wl.kind in ("latency", "growth"):
            return ["confluent-kafka"]
        return []

    def run(self, wl: Workload, client: str, run: int) -> dict:
        if self.broker.proc.poll() is not None:
            # On a shared machine another process may signal our broker; say so and start afresh
            # rather than fail every later cell.
            why = f"broker exited ({self.broker.proc.returncode}) before {wl.name}/{client} run {run + 1}: {self.broker.log()[-300:]}"
            self.restarts.append(why)
            print(f"    RESTARTING the broker: {why}", flush=True)
            self.broker.kill()
            self.broker._log.close()
            self._preloaded.clear()
            self.workdir = self.workdir / f"restart{len(self.restarts)}"
            self.workdir.mkdir()
            self._start_broker()
        if wl.kind == "produce":
            records = self._records(wl, client)
            if wl.partitions > 1:
                secs = self._produce(client, self._shared_topic(wl), records, wl.value_size, wl.partitions,
                                     wl.acks)
                return {"rps": records / secs, "records": records}
            topic = self.new_topic(wl.partitions)
            try:
                secs = self._produce(client, topic, records, wl.value_size, wl.partitions, wl.acks)
                return {"rps": records / secs, "records": records}
            finally:
                self.delete_topic(topic)
        if wl.kind == "consume":
            topic = self._preload(wl)
            # kafka-python reads ~650 records/s from the appliance here: a fixed 20,000 records.
            records = 20_000 if client == "kafka-python" else wl.records
            return {"rps": records / self._consume(client, topic, records), "records": records}
        if wl.kind == "latency":
            return self._latency(wl)
        if wl.kind == "growth":
            return self._growth(wl)
        raise ValueError(wl.kind)

    def warm_up(self, wl: Workload, client: str) -> str | None:
        """Untimed, before a cell's first run: what only a first run would pay. The client's
        first use in this process (appliance.client loads its numba batch builder from the
        cache: 0.5-10 s on a loaded machine, measured inside run 1 of the tcp cell, which it
        cut to 2-7 k records/s), the imports of kafka-python and the IPC bulk path, the shared
        topic's creation (1,000 partitions) or the consume workload's preload. Returns what it
        did, for the runner's first-run line; None when the workload has its own warm-up."""
        if wl.kind == "produce":
            n = min(self._records(wl, client), WARM_UP_RECORDS)
            if wl.partitions > 1:
                created = wl.name not in self._preloaded
                self._produce(client, self._shared_topic(wl), n, wl.value_size, wl.partitions, wl.acks)
                return (f"{n:,} records to the shared {wl.partitions}-partition topic"
                        + (", created now" if created else ""))
            topic = self.new_topic(wl.partitions)
            try:
                self._produce(client, topic, n, wl.value_size, wl.partitions, wl.acks)
            finally:
                self.delete_topic(topic)
            return f"{n:,} records to a topic of their own"
        if wl.kind == "consume":
            n = min(wl.records, WARM_UP_RECORDS)
            created = wl.name not in self._preloaded
            self._consume(client, self._preload(wl), n)
            return f"{n:,} records read" + (f", after preloading the topic with {wl.records:,}" if created else "")
        return None

    def _records(self, wl: Workload, client: str) -> int:
        if client in SLOW_CLIENTS:
            return max(10_000, wl.records // SLOW_CLIENT_SHARE)
        if client in FAST_CLIENTS:
            return max(wl.records, MIN_RUN_BYTES // wl.value_size)
        return wl.records

    def _shared_topic(self, wl: Workload) -> str:
        """One topic for every run and client of a many-partition workload: creating 1,000
        partitions is ~5 s of file creation here, and appending to partitions that already hold
        data costs the same (see produce_growth); deleted in finish_workload."""
        if wl.name not in self._preloaded:
            self._preloaded[wl.name] = self.new_topic(wl.partitions)
        return self._preloaded[wl.name]

    def _preload(self, wl: Workload) -> str:
        """The consume workload's topic, filled once (untimed)."""
        if wl.name not in self._preloaded:
            t = self.new_topic(1)
            self._produce_confluent(t, wl.records, wl.value_size, 1, 1)
            self._preloaded[wl.name] = t
        return self._preloaded[wl.name]

    def finish_workload(self, wl: Workload) -> None:
        t = self._preloaded.pop(wl.name, None)
        if t:
            self.delete_topic(t)

    # --- producers -----------------------------------------------------------------------------
    def _produce(self, client: str, topic: str, n: int, size: int, parts: int, acks: int) -> float:
        """Produce ``n`` records with ``client``; returns the seconds from the client being ready
        (connected, the topic's metadata known) until every record is acknowledged. kcat is a
        process of its own: its start and connection are inside its figure."""
        if client == "confluent-kafka":
            return self._produce_confluent(topic, n, size, parts, acks)
        if client == "kcat":
            return self._produce_kcat(topic, n, size)
        if client == "kafka-python":
            return self._produce_kafka_python(topic, n, size)
        if client.startswith("appliance.client"):
            return self._produce_ours(topic, n, size, parts, acks, client.rsplit(" ", 1)[1])
        if client.startswith("ipc bulk"):
            from perf.bench_ipc import run_ipc
            batch = 8000
            rps = run_ipc(self.broker.overrides["appliance.shm.name"], topic, n, batch)
            return -(-n // batch) * batch / rps  # whole batches: n rounded up
        raise ValueError(client)

    def _produce_confluent(self, topic: str, n: int, size: int, parts: int, acks: int) -> float:
        errors: list = []
        p = Producer({"bootstrap.servers": self.broker.bootstrap, "acks": acks,
                      "on_delivery": lambda err, msg: errors.append(err) if err else None, **PRODUCER})
        p.list_topics(topic, timeout=10)  # connected, metadata known: the clock starts
        t0 = time.perf_counter()
        # A batch of 10,000 to one partition; with many partitions, 1,000 per partition per call.
        per_call = BATCH if parts == 1 else 1000
        value = os.urandom(size)
        full = [{"value": value} for _ in range(per_call)]
        sent, k = 0, 0
        while sent < n:
            msgs = full if n - sent >= per_call else full[: n - sent]
            part = k % parts
            k += 1
            while msgs:
                got = p.produce_batch(topic, msgs, partition=part)
                sent += got
                if got < len(msgs):  # local queue full: the refused ones carry "_error"
                    msgs = [m for m in msgs if m.pop("_error", None) is not None]
                    p.poll(0.005)
                else:
                    msgs = []
            p.poll(0)
        left = p.flush(600)
        secs = time.perf_counter() - t0
        if left or errors:
            raise RuntimeError(f"confluent produce: {left} undelivered, errors {errors[:3]}")
        return secs

    def _values_file(self, n: int, size: int) -> Path:
        path = self.workdir / f"values-{n}-{size}.txt"
        if not path.exists():  # kcat reads newline-delimited values: the value has no newline
            line = os.urandom(size).replace(b"\n", b"x")[: size] + b"\n"
            with open(path, "wb") as f:
                chunk = line * 10_000
                for _ in range(n // 10_000):
                    f.write(chunk)
                f.write(line * (n % 10_000))
        return path

    def _produce_kcat(self, topic: str, n: int, size: int) -> float:
        path = self._values_file(n, size)
        cmd = ["kcat", "-P", "-b", self.broker.bootstrap, "-t", topic, "-p", "0", "-l", str(path)]
        for k, v in PRODUCER.items():
            if k not in ("delivery.report.only.error", "log_level"):
                cmd += ["-X", f"{k}={v}"]
        cmd += ["-X", "acks=1"]
        t0 = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, timeout=900)
        secs = time.perf_counter() - t0
        if r.returncode != 0:
            raise RuntimeError(f"kcat -P exited {r.returncode}: {r.stderr.decode(errors='replace')[-500:]}")
        return secs

    def _produce_kafka_python(self, topic: str, n: int, size: int) -> float:
        from kafka import KafkaProducer
        p = KafkaProducer(bootstrap_servers=self.broker.bootstrap, acks=1, linger_ms=20,
                          batch_size=1_000_000, max_request_size=1_000_000)
        p.partitions_for(topic)  # connected, metadata known: the clock starts
        t0 = time.perf_counter()
        value = os.urandom(size)
        send = p.send
        futs = [send(topic, value, partition=0) for _ in range(n)]
        p.flush(600)
        futs[-1].get(60)
        secs = time.perf_counter() - t0
        p.close()
        return secs

    def _produce_ours(self, topic: str, n: int, size: int, parts: int, acks: int, transport: str) -> float:
        from appliance.client.producer import Producer as Ours
        value = os.urandom(size)
        chunk = [value] * BATCH
        with Ours({"bootstrap.servers": self.broker.bootstrap, "transport": transport,
                   "acks": acks, "batch.size": 1_000_000, "linger.ms": 5}) as p:
            p.partitions_for(topic)  # metadata known (over TCP: connected): the clock starts
            t0 = time.perf_counter()
            futs = []
            sent, k = 0, 0
            while sent < n:
                m = min(BATCH, n - sent)
                futs += p.send_many(topic, chunk[:m], partition=k % parts)
                sent += m
                k += 1
            if not p.flush(600):
                raise RuntimeError("appliance.client flush timed out")
            for f in futs:
                f.result(60)
            return time.perf_counter() - t0

    # --- consumers -----------------------------------------------------------------------------
    def _consume(self, client: str, topic: str, n: int) -> float:
        """Read ``n`` records from the start with ``client``; returns the seconds from the client
        being ready (connected, metadata known) to the last record (kcat: its whole process)."""
        if client == "confluent-kafka":
            return self._consume_confluent(topic, n, 1)
        if client == "kcat":
            return self._consume_kcat(topic, n)
        return self._consume_kafka_python(topic, n)

    def _consume_confluent(self, topic: str, n: int, parts: int) -> float:
        c = Consumer({"bootstrap.servers": self.broker.bootstrap, **CONSUMER})
        try:
            c.list_topics(topic, timeout=10)  # connected, metadata known: the clock starts
            t0 = time.perf_counter()
            c.assign([TopicPartition(topic, p, 0) for p in range(parts)])
            got = 0
            deadline = time.monotonic() + 600
            while got < n and time.monotonic() < deadline:
                msgs = c.consume(100_000, 1.0)
                for m in msgs:
                    if m.error() is not None:
                        raise RuntimeError(f"consume error: {m.error()}")
                got += len(msgs)
            if got < n:
                raise RuntimeError(f"confluent consumed {got} of {n}")
            return time.perf_counter() - t0
        finally:
            c.close()

    def _consume_kcat(self, topic: str, n: int) -> float:
        # offset 0, not "beginning" (the same records: the preloaded topic starts at 0): for a
        # logical offset librdkafka 2.0 asks ListOffsets first, and now and then its first try
        # comes before the partition's leader is known and the retry waits ~500 ms, with the
        # broker idle (kcat -d fetch,broker: the gap before ListOffsets). 200,000 records, 40 runs
        # of each, alternated: "beginning" 6 runs of 0.67-0.68 s against a 0.159 s median (the
        # runner flagged such runs collapsed), offset 0 none over 0.18 s, median 0.156 s
        cmd = ["kcat", "-C", "-b", self.broker.bootstrap, "-t", topic, "-o", "0", "-c", str(n),
               "-e", "-q", "-f", ".", "-X", "fetch.max.bytes=52428800",
               "-X", "max.partition.fetch.bytes=8388608", "-X", "queued.max.messages.kbytes=1048576",
               # librdkafka stops fetching a partition once its queue holds queued.min.messages
               # (default 100,000: two 8 MB answers of 100-byte records) and looks again only
               # after a ~1 s back-off, not when kcat drains it: runs at a third of the median
               "-X", f"queued.min.messages={CONSUMER['queued.min.messages']}"]
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        got = 0
        while chunk := p.stdout.read(1 << 20):
            got += len(chunk)
        err = p.stderr.read()
        p.wait()
        secs = time.perf_counter() - t0
        if p.returncode != 0 or got != n:
            raise RuntimeError(f"kcat -C exited {p.returncode} after {got} of {n}: {err[-300:]!r}")
        return secs

    def _consume_kafka_python(self, topic: str, n: int) -> float:
        from kafka import KafkaConsumer
        from kafka import TopicPartition as KTP
        c = KafkaConsumer(bootstrap_servers=self.broker.bootstrap, enable_auto_commit=False,
                          fetch_max_bytes=52_428_800, max_partition_fetch_bytes=8_388_608,
                          max_poll_records=100_000)
        try:
            c.partitions_for_topic(topic)  # connected, metadata known: the clock starts
            t0 = time.perf_counter()
            tp = KTP(topic, 0)
            c.assign([tp])
            c.seek(tp, 0)
            got = 0
            deadline = time.monotonic() + 600
            while got < n and time.monotonic() < deadline:
                for recs in c.poll(1000, max_records=100_000).values():
                    got += len(recs)
            if got < n:
                raise RuntimeError(f"kafka-python consumed {got} of {n}")
            return time.perf_counter() - t0
        finally:
            c.close()

    # --- latency -------------------------------------------------------------------------------
    def _latency(self, wl: Workload) -> dict:
        topic = self.new_topic(1)
        try:
            p = Producer({"bootstrap.servers": self.broker.bootstrap, "acks": 1, "linger.ms": 0,
                          "enable.idempotence": False, "compression.type": "none", "log_level": 2})
            p.list_topics(topic, timeout=10)
            produce = p.produce

            def send(v: bytes) -> None:
                produce(topic, v, partition=0)

            def flush() -> None:
                left = p.flush(30)
                if left:  # a figure over records the broker never acknowledged would flatter it
                    raise RuntimeError(f"{left} records not acknowledged 30 s after the last send")

            return run_latency(latency_receiver, {"bootstrap": self.broker.bootstrap, "topic": topic},
                               send, lambda: p.poll(0), flush, wl)
        finally:
            self.delete_topic(topic)

    # --- growth --------------------------------------------------------------------------------
    def _growth(self, wl: Workload) -> dict:
        """Produce ``wl.records`` 100 B records (timed) at empty, then fill with 1 KiB values to
        each checkpoint (target / checkpoints) and time the same produce again there."""
        free = shutil.disk_usage(self.workdir).free
        need = wl.target_bytes + (4 << 30)
        if free < need:
            return {"skipped": f"needs {need / 2**30:.0f} GiB free in {self.workdir}, has {free / 2**30:.1f} GiB"}
        topic = self.new_topic(1)
        points = []
        try:
            for i in range(wl.checkpoints + 1):
                goal = wl.target_bytes * i // wl.checkpoints
                while self.log_bytes() < goal:
                    left = goal - self.log_bytes()
                    self._produce_confluent(topic, max(10_000, min(1_000_000, left // 1100)), 1024, 1, 1)
                stored = self.log_bytes()
                rps = wl.records / self._produce_confluent(topic, wl.records, 100, 1, 1)
                points.append({"stored_gib": stored / 2**30, "rps": rps})
                print(f"    growth: {stored / 2**30:6.1f} GiB stored -> {rps:,.0f} records/s", flush=True)
        finally:
            self.delete_topic(topic)
        first, last = points[0]["rps"], points[-1]["rps"]
        return {"rps": last, "rps_empty": first, "points": points, "drop": 1 - last / first}


def latency_receiver(args: dict, ready, out, total: int, timeout_s: float) -> None:
    c = Consumer({"bootstrap.servers": args["bootstrap"], "group.id": "perf-lat",
                  "enable.auto.commit": False, "fetch.wait.max.ms": args.get("fetch_wait_ms", 100),
                  "fetch.min.bytes": 1})
    c.assign([TopicPartition(args["topic"], 0, 0)])
    c.consume(1, 0.5)  # connect and fetch once before the producer starts
    ready.set()
    col = Collector(total)
    deadline = time.monotonic() + timeout_s
    now = time.monotonic_ns
    while not col.done and time.monotonic() < deadline:
        # consume(n, timeout) blocks until n messages or the timeout (so a 0.1 s timeout adds a
        # uniform 0-100 ms at low rates): take what is queued, else wait for one message
        batch = c.consume(1000, 0) or [c.poll(0.1)]
        for m in batch:
            if m is not None and m.error() is None:
                col.add(m.value(), now())
    c.close()
    out.put(col.result())


