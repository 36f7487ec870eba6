"""Interop with real clients: what appliance.client produces, kcat and confluent-kafka read, and
the reverse; keyed records land on the partitions librdkafka's murmur2 partitioner picks."""

from __future__ import annotations

import json
import subprocess

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import Producer as CKProducer
from confluent_kafka import TopicPartition as CKTopicPartition

from appliance.client import (
    AdminClient,
    Consumer,
    NewTopic,
    Producer,
    ProducerRecord,
    SimpleConsumer,
)


def _ck_read(bootstrap: str, topic: str, partitions: int, count: int) -> list:
    c = CKConsumer({"bootstrap.servers": bootstrap, "group.id": f"ck-{topic}", "enable.auto.commit": False,
                    "auto.offset.reset": "earliest"})
    c.assign([CKTopicPartition(topic, p, 0) for p in range(partitions)])
    out = []
    try:
        for _ in range(200):
            if len(out) >= count:
                break
            for m in c.consume(1000, 1.0):
                assert m.error() is None, m.error()
                out.append(m)
    finally:
        c.close()
    return out


@pytest.mark.parametrize("codec", ["none", "gzip", "zstd"])
def test_confluent_and_kcat_read_what_we_produce(module_broker, topic_name, codec):
    with AdminClient(module_broker.bootstrap) as a:
        a.create_topics([NewTopic(topic_name, 2)])
    with Producer(bootstrap_servers=module_broker.bootstrap, compression_type=codec) as p:
        for i in range(300):
            p.send(topic_name, ProducerRecord(b"val-%d" % i, key=b"key-%d" % i, headers=[("seq", b"%d" % i)],
                                              timestamp=1_600_000_000_000 + i, partition=i % 2))
        p.flush()
    msgs = _ck_read(module_broker.bootstrap, topic_name, 2, 300)
    got = sorted((m.partition(), int(m.value()[4:]), m.key(), m.headers(), m.timestamp()[1]) for m in msgs)
    assert got == sorted((i % 2, i, b"key-%d" % i, [("seq", b"%d" % i)], 1_600_000_000_000 + i) for i in range(300))
    out = subprocess.run(["kcat", "-C", "-b", module_broker.bootstrap, "-t", topic_name, "-p", "1", "-o", "beginning",
                          "-e", "-J"], capture_output=True, text=True, timeout=30, check=True).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [(r["key"], r["payload"], r["ts"], r["offset"]) for r in rows] == [
        (f"key-{i}", f"val-{i}", 1_600_000_000_000 + i, n) for n, i in enumerate(range(1, 300, 2))]
    assert rows[0]["headers"] == ["seq", "1"]


def test_we_read_what_confluent_and_kcat_produce(module_broker, topic_name):
    with AdminClient(module_broker.bootstrap) as a:
        a.create_topics([NewTopic(topic_name, 1)])
    p = CKProducer({"bootstrap.servers": module_broker.bootstrap, "compression.type": "lz4", "linger.ms": 5})
    for i in range(500):
        p.produce(topic_name, b"ck-%d" % i, b"k%d" % i, partition=0, headers=[("h", b"%d" % i)],
                  timestamp=1_700_000_000_000 + i)
    assert p.flush(20) == 0
    subprocess.run(["kcat", "-P", "-b", module_broker.bootstrap, "-t", topic_name, "-p", "0", "-K", ":", "-z", "snappy"],
                   input=b"".join(b"kk%d:kcat-%d\n" % (i, i) for i in range(100)), timeout=30, check=True)
    with SimpleConsumer(module_broker.bootstrap) as sc:
        assert sc.get_offsets_before(topic_name, 0, -1) == [600]
        assert sc.get_offsets_before(topic_name, 0, -2) == [0]
        assert sc.get_offsets_before(topic_name, 0, 1_700_000_000_250) == [250]
        first = sc.fetch(topic_name, 0, 499, max_bytes=100000)
        assert (first[0].offset, first[0].key, first[0].value, first[0].headers) == (499, b"k499", b"ck-499", (("h", b"499"),))
        assert first[1].value == b"kcat-0" and first[1].key == b"kk0"
    with Consumer(bootstrap_servers=module_broker.bootstrap, auto_offset_reset="earliest") as c:
        c.assign([(topic_name, 0)])
        got = []
        while len(got) < 600:
            recs = c.poll(5.0)
            assert recs
            got += recs
    assert [r.value for r in got] == [b"ck-%d" % i for i in range(500)] + [b"kcat-%d" % i for i in range(100)]
    assert got[10].timestamp == 1_700_000_000_010 and got[10].timestamp_type == 0


def test_keyed_partitioning_matches_librdkafka_murmur2(module_broker, topic_name):
    parts = 7
    with AdminClient(module_broker.bootstrap) as a:
        a.create_topics([NewTopic(topic_name, parts)])
    keys = [b"user-%d" % i for i in range(200)] + [b"", b"21", b"foobar", b"\xff\x00\x80"]
    p = CKProducer({"bootstrap.servers": module_broker.bootstrap, "partitioner": "murmur2_random"})
    theirs: dict[bytes, int] = {}
    for k in keys:
        p.produce(topic_name, b"ck", k, on_delivery=lambda err, m: theirs.__setitem__(m.key(), m.partition()))
    assert p.flush(20) == 0
    with Producer(bootstrap_servers=module_broker.bootstrap) as ours:
        futs = {k: ours.send(topic_name, (k, b"ours")) for k in keys}
        ours.flush()
    mine = {k: f.result().partition for k, f in futs.items()}
    assert mine == theirs
    assert len(set(mine.values())) == parts
