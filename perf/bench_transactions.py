"""Transactions' cost (issue 46): transactional produce against idempotent produce, and
read_committed fetch against read_uncommitted, with confluent-kafka on one standalone broker.

Per run, on the same broker, each into a 6-partition topic of its own:

- **idempotent**: ``--records`` 100-byte records, ``enable.idempotence``, acks=all, the
  records of each ``produce_batch`` call to one partition (bench_broker's way out of Python),
  timed until ``flush()`` returns;
- **transactional, 1,000 and 10,000 records per transaction**: the same calls between
  ``begin_transaction()`` and ``commit_transaction()`` (each transaction's records spread over
  the 6 partitions), timed until the last commit returns (its markers written);
- **fetch**: the 10,000-record transactions' topic read from offset 0 of every partition by a
  confluent-kafka consumer and by kcat, with isolation.level read_uncommitted and
  read_committed (the order alternating per run), timed until every record has come.

An untimed warm-up comes first (the numba kernels load on a worker's first produce and fetch).
The modes' order alternates per run; medians of ``--runs`` runs are printed, and each ratio is
the median of the runs' own ratios (the shared machine's load drifts between runs).
Targets: transactional produce at 10,000 records per transaction >= 0.8x idempotent;
read_committed fetch >= 0.9x read_uncommitted.

    .venv/bin/python perf/bench_transactions.py               # 3 runs of 1,000,000 records
    .venv/bin/python perf/bench_transactions.py --records 300000 --runs 1
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402

from perf.bench_broker import CONSUMER_CONFIG, create_topic  # noqa: E402
from tests.broker_process import BrokerProcess, stop_on_sigterm  # noqa: E402

PARTITIONS = 6
VALUE_SIZE = 100
PRODUCE_TARGET = 0.8   # transactional (10,000 per transaction) / idempotent
FETCH_TARGET = 0.9     # read_committed / read_uncommitted
PRODUCER = {
    "acks": "all", "enable.idempotence": True, "compression.type": "none", "linger.ms": 20,
    "batch.size": 1_000_000, "batch.num.messages": 100_000, "queue.buffering.max.messages": 2_000_000,
    "queue.buffering.max.kbytes": 1_048_576, "message.max.bytes": 1_000_000,
    "delivery.report.only.error": True,
}


def _send(p: Producer, topic: str, msgs: list[dict], partition: int) -> None:
    """produce_batch until librdkafka's queue has taken every record."""
    while msgs:
        n = p.produce_batch(topic, msgs, partition=partition)
        if n < len(msgs):  # queue full: the refused ones carry "_error"
            msgs = [m for m in msgs if m.pop("_error", None) is not None]
            p.poll(0.005)
        else:
            msgs = []
    p.poll(0)


def produce(bootstrap: str, topic: str, records: int, per_txn: int | None) -> float:
    """Records/s of ``records`` records; ``per_txn`` None = idempotent, else transactions of
    that many records."""
    conf = {"bootstrap.servers": bootstrap, **PRODUCER}
    if per_txn:
        conf["transactional.id"] = f"bench-{topic}"
    p = Producer(conf)
    p.list_topics(topic, timeout=10)
    if per_txn:
        p.init_transactions(30)
    value = os.urandom(VALUE_SIZE)
    chunk = per_txn or 10_000
    share = -(-chunk // PARTITIONS)  # each transaction's records over the partitions
    t0 = time.perf_counter()
    sent = 0
    while sent < records:
        n = min(chunk, records - sent)
        if per_txn:
            p.begin_transaction()
        for part in range(PARTITIONS):
            k = min(share, n - part * share)
            if k > 0:
                _send(p, topic, [{"value": value} for _ in range(k)], part)
        if per_txn:
            p.commit_transaction(60)
        sent += n
    if p.flush(600):
        raise RuntimeError("produce: records not delivered")
    return records / (time.perf_counter() - t0)


def consume(bootstrap: str, topic: str, records: int, committed: bool) -> float:
    """Records/s of a confluent-kafka consumer reading ``records`` records from offset 0."""
    c = Consumer({"bootstrap.servers": bootstrap, **CONSUMER_CONFIG,
                  "isolation.level": "read_committed" if committed else "read_uncommitted"})
    c.list_topics(topic, timeout=10)
    got = 0
    t0 = time.perf_counter()
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    deadline = time.monotonic() + 600
    while got < records:
        msgs = c.consume(100_000, 1.0)
        for m in msgs:
            if m.error() is not None:
                raise KafkaException(m.error())
        got += len(msgs)
        if time.monotonic() > deadline:
            raise TimeoutError(f"consumed {got} of {records}")
    rate = records / (time.perf_counter() - t0)
    c.close()
    if got != records:
        raise RuntimeError(f"consumed {got} records, expected {records}")
    return rate


def consume_kcat(bootstrap: str, topic: str, records: int, committed: bool) -> float:
    """Records/s of kcat reading every partition to its end (-e; the LSO for read_committed)."""
    cmd = ["kcat", "-b", bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-f", ".",
           "-X", f"isolation.level={'read_committed' if committed else 'read_uncommitted'}",
           "-X", f"fetch.max.bytes={CONSUMER_CONFIG['fetch.max.bytes']}",
           "-X", f"max.partition.fetch.bytes={CONSUMER_CONFIG['max.partition.fetch.bytes']}",
           "-X", f"queued.max.messages.kbytes={CONSUMER_CONFIG['queued.max.messages.kbytes']}",
           "-X", f"fetch.wait.max.ms={CONSUMER_CONFIG['fetch.wait.max.ms']}"]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, timeout=600, check=True).stdout
    rate = records / (time.perf_counter() - t0)
    if len(out) != records:
        raise RuntimeError(f"kcat read {len(out)} records, expected {records}")
    return rate


def _fmt(rates: list[float]) -> str:
    return f"{statistics.median(rates):,.0f} records/s (runs {', '.join(f'{r:,.0f}' for r in rates)})"


def _paired(a: list[float], b: list[float]) -> tuple[float, str]:
    """The median of the per-run ratios a/b, and those ratios."""
    ratios = [x / y for x, y in zip(a, b, strict=True)]
    return statistics.median(ratios), ", ".join(f"{r:.2f}" for r in ratios)


def main() -> int:
    stop_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", default=None, help="parent of the broker's directory")
    args = ap.parse_args()
    modes = {"idempotent": None, "txn 1,000": 1_000, "txn 10,000": 10_000}
    rates: dict[str, list[float]] = {m: [] for m in modes}
    fetch: dict[str, list[float]] = {f"{c} {lvl}": [] for c in ("confluent", "kcat")
                                     for lvl in ("read_uncommitted", "read_committed")}
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp, BrokerProcess(Path(tmp)) as b:
        # untimed: the first produce and fetch of each worker load the numba kernels, and the
        # transaction coordinator's topic is created by the first transactional producer
        create_topic(b.bootstrap, PARTITIONS, "bench-warmup")
        produce(b.bootstrap, "bench-warmup", 50_000, 10_000)
        consume(b.bootstrap, "bench-warmup", 50_000, committed=True)
        consume_kcat(b.bootstrap, "bench-warmup", 50_000, committed=False)
        for run in range(args.runs):
            order = list(modes) if run % 2 == 0 else list(reversed(modes))
            for mode in order:
                topic = f"bench-{mode.replace(' ', '').replace(',', '')}-{run}"
                create_topic(b.bootstrap, PARTITIONS, topic)
                rate = produce(b.bootstrap, topic, args.records, modes[mode])
                rates[mode].append(rate)
                print(f"run {run + 1} produce {mode:>11}: {rate:,.0f} records/s "
                      f"(load {os.getloadavg()[0]:.1f})", flush=True)
            topic = f"bench-txn10000-{run}"
            for committed in ((False, True) if run % 2 == 0 else (True, False)):
                level = "read_committed" if committed else "read_uncommitted"
                for client, read in (("confluent", consume), ("kcat", consume_kcat)):
                    rate = read(b.bootstrap, topic, args.records, committed)
                    fetch[f"{client} {level}"].append(rate)
                    print(f"run {run + 1} fetch {client} {level}: {rate:,.0f} records/s "
                          f"(load {os.getloadavg()[0]:.1f})", flush=True)
    print()
    for mode in modes:
        print(f"produce {mode:>11}: median {_fmt(rates[mode])}")
    # the ratios of each run's own pair, then their median: the machine's load drifts between
    # runs more than between the two halves of one run
    for mode in ("txn 1,000", "txn 10,000"):
        ratio, runs = _paired(rates[mode], rates["idempotent"])
        target = f"target >= {PRODUCE_TARGET} {'met' if ratio >= PRODUCE_TARGET else 'NOT met'}" \
            if mode == "txn 10,000" else "no target"
        print(f"  {mode} / idempotent = {ratio:.2f}, median of the runs' {runs} ({target})")
    for name, rs in fetch.items():
        print(f"fetch {name}: median {_fmt(rs)}")
    for client in ("confluent", "kcat"):
        ratio, runs = _paired(fetch[f"{client} read_committed"], fetch[f"{client} read_uncommitted"])
        print(f"  {client} read_committed / read_uncommitted = {ratio:.2f}, median of the runs' {runs} "
              f"(target >= {FETCH_TARGET} {'met' if ratio >= FETCH_TARGET else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
