"""A streaming query for tests/spark/test_exactly_once_sink.py, run as its own process so the
test can SIGKILL it: topic (read in place) -> exactly-once appliance sink, Trigger.AvailableNow.

python tests/spark/eos_job.py --bootstrap H:P --log-dirs D --shm NAME --source T --sink T
    --checkpoint DIR [--master local[2]] [--max-per-trigger N] [--slow-ms MS] [--option k=v]...

Prints "done <batches>" when the query stopped by itself.
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    for name in ("--bootstrap", "--log-dirs", "--shm", "--source", "--sink", "--checkpoint"):
        ap.add_argument(name, required=True)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--max-per-trigger", default="100")
    ap.add_argument("--slow-ms", type=float, default=0.0, help="sleep per row (a slow stage)")
    ap.add_argument("--option", action="append", default=[])
    a = ap.parse_args()

    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType

    from spark import session

    spark = session("eos-job", master=a.master, **{"spark.sql.shuffle.partitions": "2"})
    spark.sparkContext.setLogLevel("ERROR")
    df = (spark.readStream.format("appliance").option("log.dirs", a.log_dirs)
          .option("shm.name", a.shm).option("subscribe", a.source)
          .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", a.max_per_trigger)
          .load())
    value = F.col("value")
    if a.slow_ms:
        pause = a.slow_ms / 1000

        def slow(v):
            time.sleep(pause)
            return v

        value = F.udf(slow, BinaryType())(value)
    w = (df.select("key", value.alias("value")).writeStream.format("appliance")
         .option("kafka.bootstrap.servers", a.bootstrap).option("topic", a.sink)
         .option("exactlyOnce", "true").option("checkpointLocation", a.checkpoint)
         .trigger(availableNow=True))
    for kv in a.option:
        k, _, v = kv.partition("=")
        w = w.option(k, v)
    q = w.start()
    q.awaitTermination()
    if q.exception() is not None:
        raise SystemExit(f"query failed: {q.exception()}")
    print("done", len(q.recentProgress), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
