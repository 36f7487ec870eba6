"""Streaming job: topic -> filter -> topic, with a checkpoint (restartable, at least once).

Reads a topic in place from the segment files as new records arrive, keeps the records whose
value contains ``--contains`` (bytes, as UTF-8), and produces key, value and headers to the
output topic through the broker.

Run (from the repository root)::

    .venv/bin/python -m spark.jobs.stream_filter --log-dirs /data/d0 \\
        --bootstrap 127.0.0.1:9092 --source events --sink errors --contains '"level":"error"' \\
        --checkpoint /tmp/stream-filter-ckpt [--available-now]

``--available-now`` processes what is there and stops (Trigger.AvailableNow); without it the
query runs until interrupted (one micro-batch per ``--interval``).
"""

from __future__ import annotations

import argparse

__all__ = ["start", "main"]


def start(spark, *, log_dirs: str, bootstrap: str, source: str, sink: str, contains: str,
          checkpoint: str, available_now: bool = False, interval: str = "2 seconds",
          max_per_trigger: int | None = None, shm_name: str | None = None):
    """Start the query and return it (a StreamingQuery)."""
    from pyspark.sql import functions as F

    r = (spark.readStream.format("appliance").option("log.dirs", log_dirs)
         .option("subscribe", source).option("startingOffsets", "earliest")
         .option("includeHeaders", "true"))
    if shm_name:
        r = r.option("shm.name", shm_name)
    if max_per_trigger:
        r = r.option("maxOffsetsPerTrigger", str(max_per_trigger))
    kept = (r.load().where(F.col("value").cast("string").contains(contains))
            .select("key", "value", "headers"))
    w = (kept.writeStream.format("appliance").option("kafka.bootstrap.servers", bootstrap)
         .option("topic", sink).option("checkpointLocation", checkpoint))
    w = w.trigger(availableNow=True) if available_now else w.trigger(processingTime=interval)
    return w.start()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="topic -> filter -> topic (streaming)")
    ap.add_argument("--log-dirs", required=True)
    ap.add_argument("--bootstrap", required=True, help="broker host:port for the output topic")
    ap.add_argument("--source", required=True)
    ap.add_argument("--sink", required=True)
    ap.add_argument("--contains", required=True, help="keep values containing this text")
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--available-now", action="store_true")
    ap.add_argument("--interval", default="2 seconds")
    ap.add_argument("--max-per-trigger", type=int)
    ap.add_argument("--shm-name")
    ap.add_argument("--master", help="default: spark-submit's --master, else local[*]")
    args = ap.parse_args(argv)
    from spark.jobs import run_until_stopped
    from spark.session import session

    spark = session("appliance-stream-filter", args.master)
    q = start(spark, log_dirs=args.log_dirs, bootstrap=args.bootstrap, source=args.source,
              sink=args.sink, contains=args.contains, checkpoint=args.checkpoint,
              available_now=args.available_now, interval=args.interval,
              max_per_trigger=args.max_per_trigger, shm_name=args.shm_name)
    return run_until_stopped(spark, q)


if __name__ == "__main__":
    raise SystemExit(main())
