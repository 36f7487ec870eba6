"""The example jobs run end to end against a real broker."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from spark.jobs import offline_load, stream_filter
from tests.spark.conftest import create_topic, kcat, produce


def test_offline_load_writes_window_aggregates(spark, broker, tmp_path):
    create_topic(broker, "events", 2)
    base = 1_700_000_000_000  # 2023-11-14 22:13:20 UTC
    evs = [{"ts": base + 60_000 * i, "user": f"u{i % 3}", "amount": float(i)} for i in range(30)]
    produce(broker, "events", [{"value": json.dumps(e).encode()} for e in evs]
            + [{"value": b"not json"}])
    out = str(tmp_path / "agg")
    # build() is what main() runs (main() also stops the session, which the tests share)
    offline_load.build(spark, ",".join(broker.log_dirs), "events", "10 minutes") \
        .write.mode("overwrite").partitionBy("date").parquet(out)
    got = {(r.window_start.isoformat(), r.user): (r.events, r.amount)
           for r in spark.read.parquet(out).collect()}
    want: dict = {}
    for e in evs:
        start = (e["ts"] // 600_000) * 600_000
        k = (datetime.fromtimestamp(start / 1000, UTC).replace(tzinfo=None).isoformat(),
             e["user"])
        n, a = want.get(k, (0, 0.0))
        want[k] = (n + 1, a + e["amount"])
    assert got == want


def test_stream_filter_job(spark, broker, tmp_path):
    create_topic(broker, "logs", 1)
    produce(broker, "logs", [{"value": b'{"level":"%s","n":%d}' % (
        b"error" if i % 4 == 0 else b"info", i)} for i in range(40)])
    q = stream_filter.start(spark, log_dirs=",".join(broker.log_dirs), bootstrap=broker.bootstrap,
                            source="logs", sink="errors", contains='"level":"error"',
                            checkpoint=str(tmp_path / "ck"), available_now=True)
    q.awaitTermination(120)
    assert q.exception() is None
    vals = [json.loads(v)["n"] for *_, v, _ in kcat(broker, "errors")]
    assert sorted(vals) == list(range(0, 40, 4))
