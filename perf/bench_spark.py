"""Records/s decoded into a Spark DataFrame by the appliance source vs a confluent-kafka consumer.

Data: a 2-partition topic of ``--records`` records with 100-byte values, written straight into a
log dir with ``appliance.storage`` PartitionLog (batches of 1000 records, uncompressed) — much
faster than producing them — then served by a real broker started on that log dir.

Measured, each ``--runs`` times (median printed):

- spark: ``count(*)`` and ``sum(length(value))`` over ``spark.read.format("appliance")`` in a
  local[2] session (planning + mmap + decode to Arrow + Spark's aggregation; the session is
  started once, outside the timing);
- consumer: one process, one confluent-kafka Consumer reading every record from the broker and
  summing the value lengths.

Usage: ``.venv/bin/python perf/bench_spark.py [--records 10000000] [--runs 3]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from appliance.config import TopicConfig  # noqa: E402
from appliance.records.batch import build_batch  # noqa: E402
from appliance.storage.checkpoint import (  # noqa: E402
    REPLICATION_OFFSET_CHECKPOINT,
    write_checkpoint,
)
from appliance.storage.log import PartitionLog  # noqa: E402

TOPIC = "bench"
PARTITIONS = 2
BATCH = 1000
VALUE = 100


def write_topic(log_dir: str, records: int) -> None:
    os.makedirs(log_dir, exist_ok=True)
    template = build_batch([(None, bytes([65 + i % 26]) * VALUE) for i in range(BATCH)])
    cfg = TopicConfig.defaults()
    hws = {}
    per = records // PARTITIONS
    for p in range(PARTITIONS):
        lg = PartitionLog.open(os.path.join(log_dir, f"{TOPIC}-{p}"), cfg)
        left = per
        while left >= BATCH:
            lg.append(template)
            left -= BATCH
        if left:
            lg.append(build_batch([(None, b"x" * VALUE)] * left))
        lg.flush()
        hws[(TOPIC, p)] = lg.log_end_offset
        lg.close()
    write_checkpoint(os.path.join(log_dir, REPLICATION_OFFSET_CHECKPOINT), hws)


def bench_spark(spark, log_dir: str, shm: str, expect: int) -> float:
    from pyspark.sql import functions as F

    t = time.perf_counter()
    row = (spark.read.format("appliance").option("log.dirs", log_dir).option("shm.name", shm)
           .option("subscribe", TOPIC).load()
           .agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("b")).collect()[0])
    dt = time.perf_counter() - t
    assert row.n == expect and row.b == expect * VALUE, row
    return dt


def bench_consumer(bootstrap: str, expect: int) -> float:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "fetch.max.bytes": 52428800, "max.partition.fetch.bytes": 10485760,
                  "log_level": 3})
    # assign, not subscribe: measure fetching and decoding, not the group protocol
    c.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    n = size = 0
    t = time.perf_counter()
    while n < expect:
        for m in c.consume(10000, 1.0):
            if m.error():
                raise RuntimeError(m.error())
            n += 1
            size += len(m.value())
    dt = time.perf_counter() - t
    c.close()
    assert n == expect and size == expect * VALUE, (n, size)
    return dt


def _report(what: str, seconds: float) -> float:
    print(f"  {what} run: {seconds:.2f} s", flush=True)
    return seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    from spark import session
    from tests.broker_process import BrokerProcess, stop_on_sigterm
    stop_on_sigterm()

    work = Path(tempfile.mkdtemp(prefix="bench-spark-"))
    log_dir = str(work / "disk0")
    t = time.perf_counter()
    write_topic(log_dir, args.records)
    n = args.records // PARTITIONS * PARTITIONS
    print(f"wrote {n:,} records ({n * (VALUE + 8) / 1e6:,.0f} MB of records) in "
          f"{time.perf_counter() - t:.1f} s with PartitionLog")
    with BrokerProcess(work) as broker:
        shm = f"appliance-test-{broker.port}"
        spark = session("bench-spark")
        spark.sparkContext.setLogLevel("ERROR")
        bench_spark(spark, log_dir, shm, n)  # warm-up: Python workers, numba cache, JIT
        s_times = [_report("spark", bench_spark(spark, log_dir, shm, n)) for _ in range(args.runs)]
        c_times = [_report("consumer", bench_consumer(broker.bootstrap, n))
                   for _ in range(args.runs)]
        spark.stop()
    s_med, c_med = statistics.median(s_times), statistics.median(c_times)
    s_rate, c_rate = n / s_med, n / c_med
    print(f"spark (appliance source, local[2]): median {s_med:.2f} s  {s_rate:,.0f} records/s  "
          f"runs {[round(x, 2) for x in s_times]}")
    print(f"confluent-kafka consumer (1 process): median {c_med:.2f} s  {c_rate:,.0f} records/s  "
          f"runs {[round(x, 2) for x in c_times]}")
    ratio = s_rate / c_rate
    print(f"ratio spark/consumer: {ratio:.2f}x (target >= 3x: {'met' if ratio >= 3 else 'MISSED'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
