"""Streaming (exactly once into a file sink across restarts), writes through Kafka, data loss."""

from __future__ import annotations

import os
import time

import pytest
from pyspark.sql import functions as F

from appliance.config import TopicConfig
from appliance.errors import OffsetOutOfRangeError
from appliance.records.batch import build_batch
from appliance.storage.log import PartitionLog
from spark.arrow_reader import read_range
from tests.spark.conftest import create_topic, kcat, produce, reader


def _stream(spark, broker, out, ckpt, **opts):
    r = (spark.readStream.format("appliance").option("log.dirs", ",".join(broker.log_dirs))
         .option("shm.name", f"appliance-test-{broker.port}").option("subscribe", "st")
         .option("startingOffsets", "earliest"))
    for k, v in opts.items():
        r = r.option(k, v)
    q = (r.load().select("partition", "offset", "value").writeStream.format("parquet")
         .option("path", out).option("checkpointLocation", ckpt).trigger(availableNow=True)
         .start())
    q.awaitTermination(120)
    assert q.exception() is None, q.exception()
    return q


def test_stream_restart_exactly_once(spark, broker, tmp_path):
    create_topic(broker, "st", 2)
    produce(broker, "st", ({"value": b"a%d" % i, "key": b"%d" % i} for i in range(500)))
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    q = _stream(spark, broker, out, ckpt, maxOffsetsPerTrigger="200")
    assert len(q.recentProgress) >= 3  # 500 records, at most 200 per micro-batch
    first = spark.read.parquet(out).count()
    assert first == 500
    produce(broker, "st", ({"value": b"b%d" % i, "key": b"%d" % i} for i in range(300)))
    _stream(spark, broker, out, ckpt)
    rows = [(r.partition, r.offset, r.value) for r in spark.read.parquet(out).collect()]
    assert len(rows) == 800 and len(set(rows)) == 800  # every record once
    want = [(p, o, v.encode()) for p, o, _, v, _ in kcat(broker, "st")]
    assert sorted(rows) == want


def test_write_then_read_back(spark, broker):
    create_topic(broker, "w", 3)
    rows = [(f"k{i}", f"v{i}", i % 3 if i % 2 else None, [("h", b"x")] if i % 5 == 0 else [])
            for i in range(200)]
    df = spark.createDataFrame(rows, "key string, value string, partition int, "
                                     "headers array<struct<key:string,value:binary>>")
    (df.write.format("appliance").option("kafka.bootstrap.servers", broker.bootstrap)
     .option("topic", "w").mode("append").save())
    got = kcat(broker, "w")
    assert len(got) == 200
    assert sorted((k, v, h) for _, _, k, v, h in got) == sorted(
        (k, v, "h=x" if hs else "") for k, v, _, hs in rows)
    by_key = {k: p for p, _, k, _, _ in got}
    for k, _, p, _ in rows:
        if p is not None:
            assert by_key[k] == p


def test_stream_topic_filter_topic(spark, broker, tmp_path):
    create_topic(broker, "src", 2)
    create_topic(broker, "dst", 1)
    produce(broker, "src", ({"value": b"%d" % i} for i in range(100)))
    q = (spark.readStream.format("appliance").option("log.dirs", ",".join(broker.log_dirs))
         .option("shm.name", f"appliance-test-{broker.port}").option("subscribe", "src")
         .option("startingOffsets", "earliest").load()
         .filter(F.expr("cast(cast(value as string) as int) % 10 = 0"))
         .select("key", "value").writeStream.format("appliance")
         .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", "dst")
         .option("checkpointLocation", str(tmp_path / "c")).trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert q.exception() is None
    assert sorted(int(v) for *_, v, _ in kcat(broker, "dst")) == list(range(0, 100, 10))


def _wait_earliest_above(broker, topic, minimum, timeout=20.0):
    path = next(os.path.join(d, f"{topic}-0") for d in broker.log_dirs
                if os.path.isdir(os.path.join(d, f"{topic}-0")))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        bases = sorted(int(n[:20]) for n in os.listdir(path) if n.endswith(".log"))
        if bases and bases[0] > minimum:
            return bases[0]
        time.sleep(0.2)
    raise AssertionError(f"retention did not delete the first segments of {path}")


def test_fail_on_data_loss(spark, broker):
    create_topic(broker, "ret", 1, **{"segment.bytes": "4096", "retention.bytes": "8192"})
    produce(broker, "ret", ({"value": b"r%05d" % i + b"." * 90} for i in range(1000)),
            **{"batch.num.messages": 10})
    earliest = _wait_earliest_above(broker, "ret", 0)
    json0 = '{"ret": {"0": 0}}'
    with pytest.raises(Exception, match="removed by retention"):
        reader(spark, broker, subscribe="ret", startingOffsets=json0).load().collect()
    df = reader(spark, broker, subscribe="ret", startingOffsets=json0,
                failOnDataLoss="false").load()
    offs = sorted(r.offset for r in df.select("offset").collect())
    assert offs and offs[0] >= earliest and offs == list(range(offs[0], 1000))
    assert offs == [o for _, o, *_ in kcat(broker, "ret")]


def _small_segments_log(path: str) -> list[int]:
    cfg = TopicConfig.defaults(segment_bytes=2048, segment_index_bytes=4096,
                               file_delete_delay_ms=0)
    lg = PartitionLog.open(path, cfg)
    for i in range(60):
        lg.append(build_batch([(None, b"v%03d" % i + b"." * 200)]))
    lg.flush()
    lg.close()
    return sorted(int(n[:20]) for n in os.listdir(path) if n.endswith(".log"))


@pytest.mark.parametrize("fail", [True, False])
def test_segments_deleted_during_read(tmp_path, fail):
    """Retention deletes the oldest segments (the one being read included) while a task is
    between two chunks."""
    path = str(tmp_path / "t-0")
    bases = _small_segments_log(path)
    assert len(bases) > 4
    it = read_range(path, "t", 0, 0, 60, fail_on_data_loss=fail, chunk_bytes=1)
    assert next(it).column("offset").to_pylist() == [0]
    for b in bases[:3]:  # what retention does: rename .deleted (removed later)
        for suffix in (".log", ".index", ".timeindex"):
            p = os.path.join(path, f"{b:020d}{suffix}")
            if os.path.exists(p):
                os.rename(p, p + ".deleted")
    if fail:
        with pytest.raises(OffsetOutOfRangeError, match="offset 1 is no longer on disk"):
            list(it)
    else:
        rest = [o for b in it for o in b.column("offset").to_pylist()]
        assert rest == list(range(bases[3], 60))
