"""The appliance source on a real Spark standalone cluster: in place vs through the broker vs a
confluent-kafka consumer, and in place vs the raw read rate of the segment files.

One topic (``--partitions`` (2) partitions of 100-byte values, batches of 1000, uncompressed,
written with ``appliance.storage`` PartitionLog and served by a real broker), one standalone
cluster (master + ``--workers`` workers of 1 core each, :mod:`spark.standalone`), one driver
session for the Spark runs. Each figure is the median of ``--runs`` runs after a warm-up:

- in place: ``count(*)``, ``sum(length(value))`` over ``format("appliance")`` with ``log.dirs``;
- remote: the same with only ``kafka.bootstrap.servers`` (Fetch through the broker);
- consumer: one confluent-kafka Consumer (assign, no group) reading every record;
- raw file read: every ``.log`` segment read sequentially from page cache with 8 MiB reads
  (one thread), expressed in records/s of the same records (file bytes / record count);
- source alone: the in-place read path without Spark (:func:`spark.arrow_reader.read_range`
  in this process, one thread: mmap, CRC scan, decode kernel, Arrow batches), to tell what
  the source achieves from what Spark adds (Arrow to the JVM, rows, scheduling);
- null source: Spark's ceiling — the same query over ``format("appliance_null")``
  (:mod:`perf.spark_null_source`: the same schema, pre-built Arrow batches of as many rows as
  the in-place reader's, no decode, no I/O) on the same cluster and session. No Python data
  source can beat it here, so a target it misses is out of reach whatever the source does;
- in place noop / null noop (unless ``--no-noop``): every row of every column read into
  Spark's ``noop`` sink — one stage, no aggregate, no shuffle: the usual way to time a
  source in Spark. (Either way every column crosses from the Python worker to the JVM:
  pyspark's Python data sources get no column pruning.)

Targets (issue 18): in place >= 3x remote, in place >= 40 % of the raw file read rate; the
ratios against the ceiling say whether Spark itself allows them.

Usage: ``.venv/bin/python perf/bench_spark_cluster.py [--records 4000000] [--runs 3]``
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import perf.bench_spark as single_host  # noqa: E402
from perf.bench_spark import TOPIC, VALUE, bench_consumer  # noqa: E402


def write_topic(log_dir: str, records: int, partitions: int) -> int:
    from appliance.config import TopicConfig
    from appliance.records.batch import build_batch
    from appliance.storage.checkpoint import REPLICATION_OFFSET_CHECKPOINT, write_checkpoint
    from appliance.storage.log import PartitionLog

    os.makedirs(log_dir, exist_ok=True)
    template = build_batch([(None, bytes([65 + i % 26]) * VALUE) for i in range(1000)])
    per = records // partitions // 1000 * 1000
    hws = {}
    for p in range(partitions):
        lg = PartitionLog.open(os.path.join(log_dir, f"{TOPIC}-{p}"), TopicConfig.defaults())
        for _ in range(per // 1000):
            lg.append(template)
        lg.flush()
        hws[(TOPIC, p)] = lg.log_end_offset
        lg.close()
    write_checkpoint(os.path.join(log_dir, REPLICATION_OFFSET_CHECKPOINT), hws)
    return per * partitions


def spark_read(spark, expect: int, fmt: str = "appliance", **options: str) -> float:
    """Seconds of the benchmark's query: ``count(*)``, ``sum(length(value))``, checked."""
    from pyspark.sql import functions as F

    r = spark.read.format(fmt).option("subscribe", TOPIC)
    for k, v in options.items():
        r = r.option(k, v)
    t = time.perf_counter()
    row = r.load().agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("b")).collect()[0]
    dt = time.perf_counter() - t
    assert row.n == expect and row.b == expect * VALUE, row
    return dt


def spark_noop(spark, fmt: str = "appliance", **options: str) -> float:
    """Seconds to read every row of every column and drop it (``write.format("noop")``:
    Spark's own sink for measuring a source; no aggregation, nothing sent to the driver)."""
    r = spark.read.format(fmt).option("subscribe", TOPIC)
    for k, v in options.items():
        r = r.option(k, v)
    t = time.perf_counter()
    r.load().write.format("noop").mode("overwrite").save()
    return time.perf_counter() - t


def raw_read(log_dir: str) -> tuple[float, int]:
    """Seconds to read every segment file once (from page cache), and the bytes read."""
    files = sorted(glob.glob(os.path.join(log_dir, f"{TOPIC}-*", "*.log")))
    buf = bytearray(8 << 20)
    total = 0
    t = time.perf_counter()
    for f in files:
        with open(f, "rb", buffering=0) as fh:
            while n := fh.readinto(buf):
                total += n
    return time.perf_counter() - t, total


def source_read(log_dir: str, partitions: int, expect: int) -> tuple[float, int]:
    """Seconds for read_range over every partition (the in-place path with no Spark), and
    the number of Arrow batches it yielded."""
    from spark.arrow_reader import read_range

    t = time.perf_counter()
    rows = batches = 0
    for p in range(partitions):
        for rb in read_range(os.path.join(log_dir, f"{TOPIC}-{p}"), TOPIC, p, 0, 1 << 62):
            rows += rb.num_rows
            batches += 1
    dt = time.perf_counter() - t
    assert rows == expect, rows
    return dt, batches


def _task_rates(workdir) -> dict[str, list[float]]:
    """records/s of every finished task, by path, from the executors' progress lines."""
    import re

    out: dict[str, list[float]] = {}
    for f in glob.glob(os.path.join(str(workdir), "work", "w*", "app-*", "*", "stderr")):
        with open(f, errors="replace") as fh:
            for m in re.finditer(r"\) (in-place|remote): \d+ records \((\d+) records/s\).* done",
                                 fh.read()):
                out.setdefault(m.group(1), []).append(float(m.group(2)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=4_000_000)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--no-noop", action="store_true",
                    help="leave out the noop-sink cells (every row of every column, no aggregate)")
    args = ap.parse_args()
    single_host.PARTITIONS = args.partitions  # bench_consumer assigns that many partitions
    work = Path(tempfile.mkdtemp(prefix="bench-spark-cluster-"))
    try:
        return _bench(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # the topic: 1.1 GB at 10 M records


def _bench(args: argparse.Namespace, work: Path) -> int:
    from perf.spark_null_source import NullSource
    from spark.session import session
    from spark.standalone import StandaloneCluster
    from tests.broker_process import BrokerProcess, stop_on_sigterm
    stop_on_sigterm()

    log_dir = str(work / "disk0")
    n = write_topic(log_dir, args.records, args.partitions)
    print(f"topic {TOPIC}: {n:,} records of {VALUE} bytes in {args.partitions} partitions")
    # The ceiling source yields batches of the in-place reader's size (so both cost Spark the
    # same number of Python -> JVM round trips).
    _, batches = source_read(log_dir, args.partitions, n)
    batch_rows = -(-n // batches)
    with BrokerProcess(work) as broker, StandaloneCluster(work / "cluster", args.workers) as c:
        shm = f"appliance-test-{broker.port}"
        spark = session("bench-spark-cluster", c.master_url,
                        **{"spark.executor.memory": "1g", "spark.python.worker.reuse": "true"})
        spark.sparkContext.setLogLevel("ERROR")
        spark.dataSource.register(NullSource)
        in_place = {"log.dirs": log_dir, "shm.name": shm}
        remote = {"kafka.bootstrap.servers": broker.bootstrap}
        null = {"records": str(n), "partitions": str(args.partitions),
                "batch.rows": str(batch_rows), "value.bytes": str(VALUE)}
        cells = {
            "in place": lambda: spark_read(spark, n, **in_place),
            "remote": lambda: spark_read(spark, n, **remote),
            "consumer": lambda: bench_consumer(broker.bootstrap, n),
            "raw file read": lambda: raw_read(log_dir)[0],
            "source alone": lambda: source_read(log_dir, args.partitions, n)[0],
            "null source": lambda: spark_read(spark, n, "appliance_null", **null),
        }
        if not args.no_noop:
            cells["in place noop"] = lambda: spark_noop(spark, **in_place)
            cells["null noop"] = lambda: spark_noop(spark, "appliance_null", **null)
        figures: dict[str, list[float]] = {k: [] for k in cells}
        # warm-up: Python workers (the null source builds its batch), numba cache, page cache
        for k in ("in place", "remote", "null source", "in place noop", "null noop"):
            if k in cells:
                cells[k]()
        for i in range(args.runs):
            for k, f in cells.items():
                figures[k].append(f())
            print(f"  run {i + 1} (load {os.getloadavg()[0]:.1f}): " + ", ".join(
                f"{k} {v[-1]:.2f} s" for k, v in figures.items()), flush=True)
        spark.stop()
        task_rates = _task_rates(c.workdir)
    raw_bytes = raw_read(log_dir)[1]
    report(figures, n, raw_bytes, batch_rows, args.workers, args.runs, task_rates)
    return 0


def report(figures: dict[str, list[float]], n: int, raw_bytes: int, batch_rows: int,
           workers: int, runs: int, task_rates: dict[str, list[float]]) -> None:
    rate = {k: n / statistics.median(v) for k, v in figures.items()}
    print(f"\n{workers} workers x 1 core, {n:,} records ({raw_bytes / 1e6:,.0f} MB of "
          f"segments, {raw_bytes / n:.1f} bytes per record on disk), Arrow batches of "
          f"~{batch_rows:,} rows; medians of {runs} (min-max records/s):")
    for k, v in figures.items():
        print(f"  {k:14s} {statistics.median(v):7.2f} s  {rate[k]:>14,.0f} records/s  "
              f"({n / max(v):,.0f}-{n / min(v):,.0f})  runs {[round(x, 2) for x in v]}")

    def ratio(a: str, b: str) -> float:
        return rate[a] / rate[b]

    r1, r2 = ratio("in place", "remote"), ratio("in place", "raw file read")
    print(f"in place / remote: {r1:.2f}x (target >= 3x: {'met' if r1 >= 3 else 'MISSED'})")
    print(f"in place / raw file read: {100 * r2:.1f} % (target >= 40 %: "
          f"{'met' if r2 >= 0.4 else 'MISSED'})")
    print(f"in place / confluent-kafka consumer: {ratio('in place', 'consumer'):.2f}x")
    # The ceiling: the same query over a source that does nothing. A target it cannot meet
    # is out of reach of any Python data source on this Spark cluster.
    c_raw, c_rem = ratio("null source", "raw file read"), ratio("null source", "remote")
    print(f"ceiling (null source) / raw file read: {100 * c_raw:.1f} % (the 40 % target is "
          f"{'within' if c_raw >= 0.4 else 'BEYOND'} Spark's reach)")
    print(f"ceiling / remote: {c_rem:.2f}x (the 3x target is "
          f"{'within' if c_rem >= 3 else 'BEYOND'} Spark's reach)")
    print(f"in place / ceiling: {100 * ratio('in place', 'null source'):.1f} %")
    if "in place noop" in rate:
        print(f"noop sink: in place / ceiling {100 * ratio('in place noop', 'null noop'):.1f} %"
              f", ceiling / raw file read {100 * ratio('null noop', 'raw file read'):.1f} %")
    r4 = ratio("source alone", "raw file read")
    print(f"source alone (no Spark) / raw file read: {100 * r4:.1f} %; Spark in place is "
          f"{100 * ratio('in place', 'source alone'):.1f} % of the source alone")
    # Inside the tasks (the source's own progress lines): decode rate without Spark's
    # planning, scheduling and aggregation.
    for how, rates in task_rates.items():
        print(f"  per task, {how}: median {statistics.median(rates):,.0f} records/s over "
              f"{len(rates)} tasks")
    if len(task_rates) == 2:
        t1 = statistics.median(task_rates["in-place"]) / statistics.median(task_rates["remote"])
        print(f"per task in place / remote: {t1:.2f}x")


if __name__ == "__main__":
    raise SystemExit(main())
