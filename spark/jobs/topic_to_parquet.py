"""Export a topic to Parquet, as a batch job or as a checkpointed streaming query.

Columns: Spark's Kafka source schema with headers (key, value, topic, partition, offset,
timestamp, timestampType, headers). Reads in place (``--log-dirs``), through the broker
(``--bootstrap``), or both (each task reads in place when the partition's log is on its host).
The streaming form writes with Spark's Parquet file sink and a checkpoint: after a crash or a
kill, restarting with the same ``--checkpoint`` and ``--out`` continues where the last committed
micro-batch ended, and every record is in the output exactly once (the file sink's commit log).

Run (from the repository root)::

    spark-submit --master spark://127.0.0.1:7077 spark/jobs/topic_to_parquet.py \\
        --log-dirs /data/d0,/data/d1 --topic events --out /tmp/events-parquet
    spark-submit --master 'local[*]' spark/jobs/topic_to_parquet.py \\
        --bootstrap 127.0.0.1:9092 --topic events --out /tmp/events-parquet \\
        --stream --checkpoint /tmp/events-ckpt
"""

from __future__ import annotations

import argparse

__all__ = ["reader", "main"]


def reader(spark, *, topic: str, log_dirs: str | None = None, bootstrap: str | None = None,
           stream: bool = False, max_per_trigger: int | None = None):
    """A DataFrame (or streaming DataFrame) of the topic's records, headers included."""
    r = (spark.readStream if stream else spark.read).format("appliance")
    r = r.option("subscribe", topic).option("includeHeaders", "true") \
        .option("startingOffsets", "earliest")
    if log_dirs:
        r = r.option("log.dirs", log_dirs)
    if bootstrap:
        r = r.option("kafka.bootstrap.servers", bootstrap)
    if max_per_trigger:
        r = r.option("maxOffsetsPerTrigger", str(max_per_trigger))
    return r.load()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="topic -> Parquet (batch or streaming)")
    ap.add_argument("--topic", required=True)
    ap.add_argument("--out", required=True, help="Parquet directory (batch: overwritten)")
    ap.add_argument("--log-dirs", help="the broker's log.dirs, to read in place")
    ap.add_argument("--bootstrap", help="the broker's host:port, to read through it")
    ap.add_argument("--stream", action="store_true", help="a streaming query (needs --checkpoint)")
    ap.add_argument("--checkpoint")
    ap.add_argument("--interval", default="1 second", help="streaming trigger interval")
    ap.add_argument("--max-per-trigger", type=int)
    ap.add_argument("--master", help="default: spark-submit's --master, else local[*]")
    args = ap.parse_args(argv)
    if not args.log_dirs and not args.bootstrap:
        ap.error("give --log-dirs, --bootstrap or both")
    if args.stream and not args.checkpoint:
        ap.error("--stream needs --checkpoint")
    from spark.jobs import run_until_stopped
    from spark.session import session

    spark = session("appliance-topic-to-parquet", args.master)
    df = reader(spark, topic=args.topic, log_dirs=args.log_dirs, bootstrap=args.bootstrap,
                stream=args.stream, max_per_trigger=args.max_per_trigger)
    if not args.stream:
        df.write.mode("overwrite").parquet(args.out)
        print(f"wrote {spark.read.parquet(args.out).count()} records to {args.out}", flush=True)
        spark.stop()
        return 0
    q = (df.writeStream.format("parquet").option("path", args.out)
         .option("checkpointLocation", args.checkpoint)
         .trigger(processingTime=args.interval).start())
    print(f"streaming {args.topic} to {args.out}", flush=True)
    return run_until_stopped(spark, q)


if __name__ == "__main__":
    raise SystemExit(main())
