"""Offline load: topic -> parse JSON -> windowed aggregation -> Parquet.

Reads every committed record of a topic of JSON events straight from the segment files,
parses ``{"ts": <ms>, "user": "...", "amount": <number>}`` (other fields ignored; records that
are not JSON or miss a field are counted and dropped), and writes per-window, per-user counts
and amount sums as Parquet, partitioned by window start date.

Run (from the repository root, against a broker's log dirs)::

    .venv/bin/python -m spark.jobs.offline_load --log-dirs /data/d0,/data/d1 \\
        --topic events --out /tmp/events-agg --window "5 minutes"
"""

from __future__ import annotations

import argparse

__all__ = ["build", "main"]

EVENT_SCHEMA = "ts long, user string, amount double"


def build(spark, log_dirs: str, topic: str, window: str, shm_name: str | None = None):
    """The aggregated DataFrame (window start/end, user, events, amount)."""
    from pyspark.sql import functions as F

    r = (spark.read.format("appliance").option("log.dirs", log_dirs).option("subscribe", topic)
         .option("startingOffsets", "earliest"))
    if shm_name:
        r = r.option("shm.name", shm_name)
    events = (r.load()
              .select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e"))
              .select("e.*")
              .where(F.col("ts").isNotNull() & F.col("user").isNotNull())
              .withColumn("event_time", F.timestamp_millis("ts")))
    return (events.groupBy(F.window("event_time", window), "user")
            .agg(F.count("*").alias("events"), F.sum("amount").alias("amount"))
            .select(F.col("window.start").alias("window_start"),
                    F.col("window.end").alias("window_end"), "user", "events", "amount")
            .withColumn("date", F.to_date("window_start")))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="topic -> JSON -> windowed aggregation -> Parquet")
    ap.add_argument("--log-dirs", required=True, help="the broker's log.dirs (comma-separated)")
    ap.add_argument("--topic", required=True)
    ap.add_argument("--out", required=True, help="Parquet output directory (overwritten)")
    ap.add_argument("--window", default="5 minutes")
    ap.add_argument("--shm-name", help="broker shared memory name (default: from the log dir)")
    ap.add_argument("--master", help="default: spark-submit's --master, else local[*]")
    args = ap.parse_args(argv)
    from spark.session import session

    spark = session("appliance-offline-load", args.master)
    df = build(spark, args.log_dirs, args.topic, args.window, args.shm_name)
    df.write.mode("overwrite").partitionBy("date").parquet(args.out)
    print(f"wrote {spark.read.parquet(args.out).count()} window rows to {args.out}")
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
