"""Clickstream sessionization: IPC producer -> topic -> streaming Spark job -> compacted topic +
Parquet.

1. **Produce**: web servers on the broker's host hand click events to the broker through shared
   memory (the local IPC producer, no socket): JSON ``{"user": "u7", "page": "/cart", "ts": ms}``
   keyed by user, to the topic ``clicks``.
2. **Sessionize**: a streaming query reads ``clicks`` in place, takes event time from ``ts``,
   allows events to arrive up to ``--watermark`` late, and groups each user's clicks into
   session windows closed by ``--gap`` of inactivity (Spark's ``session_window``). A session is
   emitted once the watermark passes its end (append mode), so it is final when written.
3. **Write**: every micro-batch of closed sessions goes to Parquet (partitioned by date) and to
   the compacted topic ``sessions`` keyed ``user@session_start``: a replayed micro-batch after a
   restart rewrites the same keys, and compaction keeps one record per session.

Run (from the repository root, against a running broker)::

    .venv/bin/python -m spark.jobs.clickstream produce --bootstrap 127.0.0.1:9092 \\
        --topic clicks --users 50 --events 10000
    spark-submit --master spark://127.0.0.1:7077 spark/jobs/clickstream.py sessionize \\
        --log-dirs /data/d0 --bootstrap 127.0.0.1:9092 --topic clicks \\
        --sessions-topic sessions --out /tmp/sessions --checkpoint /tmp/sessions-ckpt
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Iterable

__all__ = ["click_events", "produce_clicks", "sessionize", "SESSION_COLUMNS", "main"]

EVENT_SCHEMA = "user string, page string, ts long"
SESSION_COLUMNS = ("user", "session_start", "session_end", "clicks", "pages", "first_page",
                   "date")
PAGES = ("/", "/search", "/item", "/cart", "/checkout", "/help")


def click_events(users: int, events: int, *, start_ms: int = 1_700_000_000_000,
                 gap_ms: int = 30 * 60_000, seed: int = 0) -> list[dict]:
    """Synthetic clicks: each user browses in bursts separated by more than ``gap_ms``."""
    rng = random.Random(seed)
    clock = {f"u{i}": start_ms + rng.randrange(60_000) for i in range(users)}
    out = []
    for _ in range(events):
        user = rng.choice(sorted(clock))
        step = rng.randrange(5_000, 120_000) if rng.random() < 0.9 else gap_ms + rng.randrange(
            60_000, 600_000)
        clock[user] += step
        out.append({"user": user, "page": rng.choice(PAGES), "ts": clock[user]})
    out.sort(key=lambda e: e["ts"])
    return out


def produce_clicks(bootstrap: str, topic: str, events: Iterable[dict], *,
                   transport: str = "ipc", shm_name: str | None = None) -> int:
    """Send events keyed by user with the project's producer over ``transport`` (ipc: shared
    memory to the local broker). Returns how many were acknowledged."""
    from appliance.client.producer import Producer

    conf = {"bootstrap.servers": bootstrap, "transport": transport, "acks": -1,
            "enable.idempotence": True, "linger.ms": 5}
    if shm_name:
        conf["shm.name"] = shm_name
    p = Producer(conf)
    n = 0
    try:
        for e in events:
            p.send(topic, (e["user"].encode(), json.dumps(e).encode()))
            n += 1
        if not p.flush(60):
            raise RuntimeError(f"not every click was acknowledged within 60 s ({n} sent)")
    finally:
        p.close()
    return n


def sessions_frame(clicks, gap: str, watermark: str):
    """Closed sessions (one row per user session) from a DataFrame of the topic's records."""
    from pyspark.sql import functions as F

    ev = (clicks.select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e"))
          .select("e.*").where(F.col("user").isNotNull() & F.col("ts").isNotNull())
          .withColumn("event_time", F.timestamp_millis("ts"))
          .withWatermark("event_time", watermark))
    s = (ev.groupBy("user", F.session_window("event_time", gap).alias("s"))
         .agg(F.count("*").alias("clicks"), F.approx_count_distinct("page").alias("pages"),
              F.min_by("page", "ts").alias("first_page")))
    return s.select("user", F.col("s.start").alias("session_start"),
                    F.col("s.end").alias("session_end"), "clicks", "pages", "first_page",
                    F.to_date("s.start").alias("date"))


def sessionize(spark, *, topic: str, sessions_topic: str, out: str, checkpoint: str,
               bootstrap: str, log_dirs: str | None = None, gap: str = "30 minutes",
               watermark: str = "10 minutes", available_now: bool = False,
               interval: str = "5 seconds"):
    """Start the streaming query; returns the StreamingQuery."""
    from pyspark.sql import functions as F

    r = (spark.readStream.format("appliance").option("subscribe", topic)
         .option("startingOffsets", "earliest").option("kafka.bootstrap.servers", bootstrap))
    if log_dirs:
        r = r.option("log.dirs", log_dirs)
    sessions = sessions_frame(r.load(), gap, watermark)

    def write(batch, batch_id: int) -> None:
        batch.persist()
        batch.write.mode("append").partitionBy("date").parquet(out)
        (batch.select(F.concat_ws("@", "user", F.date_format("session_start",
                                                               "yyyy-MM-dd'T'HH:mm:ss"))
                      .alias("key"),
                      F.to_json(F.struct(*[c for c in SESSION_COLUMNS if c != "date"]))
                      .alias("value"))
         .write.format("appliance").option("kafka.bootstrap.servers", bootstrap)
         .option("topic", sessions_topic).mode("append").save())
        batch.unpersist()

    w = (sessions.writeStream.outputMode("append").foreachBatch(write)
         .option("checkpointLocation", checkpoint))
    w = w.trigger(availableNow=True) if available_now else w.trigger(processingTime=interval)
    return w.start()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="clickstream sessionization pipeline")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("produce", help="send synthetic clicks through the IPC producer")
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", default="clicks")
    p.add_argument("--users", type=int, default=50)
    p.add_argument("--events", type=int, default=10000)
    p.add_argument("--transport", default="ipc", choices=("ipc", "tcp", "auto"))
    s = sub.add_parser("sessionize", help="the streaming job")
    s.add_argument("--bootstrap", required=True, help="broker host:port (reads and writes)")
    s.add_argument("--log-dirs", help="the broker's log.dirs, to read in place")
    s.add_argument("--topic", default="clicks")
    s.add_argument("--sessions-topic", default="sessions", help="compacted output topic")
    s.add_argument("--out", required=True, help="Parquet directory of the sessions")
    s.add_argument("--checkpoint", required=True)
    s.add_argument("--gap", default="30 minutes")
    s.add_argument("--watermark", default="10 minutes")
    s.add_argument("--available-now", action="store_true")
    s.add_argument("--master", help="default: spark-submit's --master, else local[*]")
    args = ap.parse_args(argv)
    if args.cmd == "produce":
        n = produce_clicks(args.bootstrap, args.topic,
                           click_events(args.users, args.events), transport=args.transport)
        print(f"produced {n} clicks to {args.topic}")
        return 0
    from spark.jobs import run_until_stopped
    from spark.session import session

    spark = session("appliance-clickstream", args.master)
    q = sessionize(spark, topic=args.topic, sessions_topic=args.sessions_topic, out=args.out,
                   checkpoint=args.checkpoint, bootstrap=args.bootstrap, log_dirs=args.log_dirs,
                   gap=args.gap, watermark=args.watermark, available_now=args.available_now)
    return run_until_stopped(spark, q)


if __name__ == "__main__":
    sys.exit(main())
