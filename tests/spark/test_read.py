"""Batch reads over segments written by the real broker, checked against kcat."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from pyspark.sql import functions as F

from tests.spark.conftest import create_topic, kcat, produce, reader, spark_rows

N = 3000


def _records(n: int, seed: int = 0, headers: bool = True):
    for i in range(n):
        r = {"value": f"value-{seed}-{i}-".encode() + b"x" * (i % 50)}
        if i % 7:
            r["key"] = f"key-{i % 101}".encode()
        if headers and i % 3 == 0:
            r["headers"] = [("h", f"hv{i}".encode()), ("n", None)]
        if i % 97 == 5:
            r["value"] = None
        yield r


@pytest.fixture(scope="module")
def topics(broker):
    create_topic(broker, "plain", 3)
    produce(broker, "plain", _records(N))
    for codec in ("gzip", "snappy", "lz4", "zstd"):
        create_topic(broker, f"c-{codec}", 2)
        produce(broker, f"c-{codec}", _records(800, seed=1), compression=codec,
                **{"batch.num.messages": 100})
    # Small segments: several closed segments per partition for the minPartitions split.
    create_topic(broker, "segs", 2, **{"segment.bytes": "20000"})
    produce(broker, "segs", _records(4000, headers=False))
    create_topic(broker, "ts", 1, **{"retention.ms": "-1"})  # old timestamps: keep them
    produce(broker, "ts", ({"value": b"t%d" % i, "timestamp": 1_600_000_000_000 + 1000 * i}
                           for i in range(100)), **{"batch.num.messages": 10})
    return broker


def test_all_records_equal_kcat(spark, topics):
    df = reader(spark, topics, subscribe="plain", includeHeaders="true").load()
    got = spark_rows(df)
    assert len(got) == N
    assert got == kcat(topics, "plain")


def test_schema_is_sparks_kafka_schema(spark, topics):
    df = reader(spark, topics, subscribe="plain").load()
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int>")
    with_h = reader(spark, topics, subscribe="plain", includeHeaders="true").load()
    assert with_h.schema["headers"].dataType.simpleString() == \
        "array<struct<key:string,value:binary>>"
    row = df.filter("partition = 0 and offset = 0").collect()[0]
    assert row.topic == "plain" and row.timestampType == 0
    # Create time, set by the producer moments ago.
    assert abs(row.timestamp.timestamp() - time.time()) < 3600


CODECS = ["gzip", "snappy", "lz4", "zstd"]


def test_compressed_topics(spark, topics):
    # One query over the four topics (one per codec), split by topic afterwards.
    df = reader(spark, topics, subscribe=",".join(f"c-{c}" for c in CODECS),
                includeHeaders="true").load()
    rows = df.collect()
    for codec in CODECS:
        got = spark_rows(SimpleNamespace(columns=df.columns, collect=lambda c=codec: [
            r for r in rows if r.topic == f"c-{c}"]))
        assert got == kcat(topics, f"c-{codec}"), codec


def test_pattern_and_assign(spark, topics):
    df = reader(spark, topics, subscribePattern="c-(gzip|lz4)").load()
    assert df.count() == 1600
    df = reader(spark, topics, assign='{"plain": [0, 2]}').load()
    want = [r for r in kcat(topics, "plain") if r[0] in (0, 2)]
    assert [(r.partition, r.offset) for r in df.select("partition", "offset").collect()] \
        == [(p, o) for p, o, *_ in want] or \
        sorted((r.partition, r.offset) for r in df.collect()) == [(p, o) for p, o, *_ in want]


def test_starting_and_ending_offsets(spark, topics):
    ref = kcat(topics, "plain")
    ends = {p: max(o for q, o, *_ in ref if q == p) + 1 for p in range(3)}
    # latest start: nothing
    assert reader(spark, topics, subscribe="plain", startingOffsets="latest").load().count() == 0
    df = reader(spark, topics, subscribe="plain",
                startingOffsets='{"plain": {"0": 5, "1": -2, "2": -1}}',
                endingOffsets='{"plain": {"0": 20, "1": 7, "2": -1}}').load()
    got = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    want = [(0, o) for o in range(5, 20)] + [(1, o) for o in range(0, 7)]
    assert got == want
    df = reader(spark, topics, subscribe="plain", endingOffsets="latest").load()
    assert df.count() == sum(ends.values())


def test_starting_timestamp(spark, topics):
    t = 1_600_000_000_000 + 1000 * 42 + 1  # between record 42 and 43
    df = reader(spark, topics, subscribe="ts", startingTimestamp=str(t)).load()
    offs = sorted(r.offset for r in df.select("offset").collect())
    assert offs == list(range(43, 100))
    row = df.filter("offset = 43").collect()[0]
    assert row.value == b"t43"
    assert int(row.timestamp.timestamp() * 1000) == 1_600_000_000_000 + 43_000
    df = reader(spark, topics, subscribe="ts",
                startingOffsetsByTimestamp='{"ts": {"0": 1600000010000}}',
                endingTimestamp="1600000020000").load()
    assert sorted(r.offset for r in df.select("offset").collect()) == list(range(10, 20))
    with pytest.raises(Exception, match="no record has a timestamp"):
        reader(spark, topics, subscribe="ts", startingTimestamp="1900000000000").load().collect()
    assert reader(spark, topics, subscribe="ts", startingTimestamp="1900000000000",
                  startingOffsetsByTimestampStrategy="latest").load().count() == 0


def test_min_partitions_split_gives_same_rows(spark, topics):
    base = reader(spark, topics, subscribe="segs").load()
    split = reader(spark, topics, subscribe="segs", minPartitions="9").load()
    assert split.rdd.getNumPartitions() >= 9 > base.rdd.getNumPartitions()
    cols = ["partition", "offset", "key", "value"]
    a = sorted(tuple(r) for r in base.select(*cols).collect())
    b = sorted(tuple(r) for r in split.select(*cols).collect())
    assert a == b and len(a) == 4000
    assert spark_rows(split) == kcat(topics, "segs")


def test_aggregation_over_values(spark, topics):
    df = reader(spark, topics, subscribe="plain").load()
    row = df.agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("bytes")).collect()[0]
    ref = kcat(topics, "plain")
    assert row.n == N
    assert row.bytes == sum(len(v) for *_, v, _ in ref if v != "NULL")
