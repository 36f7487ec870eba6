"""The remote path (kafka.bootstrap.servers, no log.dirs) gives the rows of the in-place path."""

from __future__ import annotations

import pytest

from tests.spark.conftest import create_topic, kcat, produce, spark_rows

N = 1500


def _records(n: int, seed: int):
    for i in range(n):
        r = {"value": f"v-{seed}-{i}-".encode() + b"y" * (i % 40)}
        if i % 5:
            r["key"] = f"k{i % 37}".encode()
        if i % 4 == 0:
            r["headers"] = [("trace", f"t{i}".encode()), ("empty", None)]
        if i % 89 == 3:
            r["value"] = None
        yield r


@pytest.fixture(scope="module")
def topics(broker):
    create_topic(broker, "r-plain", 3)
    produce(broker, "r-plain", _records(N, 0))
    for codec in ("gzip", "lz4", "zstd", "snappy"):
        create_topic(broker, f"r-{codec}", 2)
        produce(broker, f"r-{codec}", _records(600, 1), compression=codec,
                **{"batch.num.messages": 50})
    create_topic(broker, "r-idem", 2)
    produce(broker, "r-idem", _records(800, 2), compression="lz4",
            **{"enable.idempotence": True, "batch.num.messages": 64})
    return broker


def _in_place(spark, b, topic, **opts):
    r = (spark.read.format("appliance").option("log.dirs", ",".join(b.log_dirs))
         .option("shm.name", f"appliance-test-{b.port}").option("subscribe", topic)
         .option("includeHeaders", "true"))
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def _remote(spark, b, topic, **opts):
    r = (spark.read.format("appliance").option("kafka.bootstrap.servers", b.bootstrap)
         .option("subscribe", topic).option("includeHeaders", "true"))
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def _full(df):
    cols = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType",
            "headers"]
    return sorted((tuple(r) for r in df.select(*cols).collect()),
                  key=lambda t: (t[2], t[3], t[4]))


TOPICS = ["r-plain", "r-gzip", "r-lz4", "r-zstd", "r-snappy", "r-idem"]


def test_remote_rows_equal_in_place_rows(spark, topics):
    # One query per path over every topic (plain, each codec, idempotent batches).
    remote = _full(_remote(spark, topics, ",".join(TOPICS)))
    assert remote == _full(_in_place(spark, topics, ",".join(TOPICS)))
    for topic in TOPICS:
        got = [(r[3], r[4]) for r in remote if r[2] == topic]
        assert got == [(p, o) for p, o, *_ in kcat(topics, topic)], topic


def test_remote_offsets_and_small_fetches(spark, topics):
    opts = {"startingOffsets": '{"r-plain": {"0": 3, "1": -2, "2": -1}}',
            "endingOffsets": '{"r-plain": {"0": 250, "1": 40, "2": -1}}'}
    # 4 KiB fetches: many round trips, batches cut at the answer's end.
    remote = _remote(spark, topics, "r-plain", **opts, **{"read.chunk.bytes": "4096"})
    assert spark_rows(remote) == spark_rows(_in_place(spark, topics, "r-plain", **opts))
    assert remote.count() == 247 + 40


def test_both_options_read_in_place_when_local(spark, topics):
    df = (spark.read.format("appliance").option("log.dirs", ",".join(topics.log_dirs))
          .option("kafka.bootstrap.servers", topics.bootstrap).option("subscribe", "r-gzip")
          .option("includeHeaders", "true").load())
    assert _full(df) == _full(_in_place(spark, topics, "r-gzip"))
