"""The 0.8.2 producer as its documentation has it, driven by a 0.8.2 ``producer.properties``:
keyed records land where ``abs(String.hashCode) % partitions`` sends them (read back with
confluent-kafka), class names resolve or are refused by name, ``compressed.topics`` compresses
only the listed topics (seen in the segment through ``appliance dump-log``)."""

from __future__ import annotations

import glob
import os
import socket
import subprocess
import sys

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import TopicPartition as CKTopicPartition

from appliance.client import AdminClient, NewTopic, Producer
from appliance.client.config import load_properties
from appliance.client.java_hash import HashCodePartitioner, java_hash_code
from appliance.errors import InvalidConfigError

PARTITIONS = 7


def java_string_hash_code(s: str) -> int:
    """Java's String.hashCode written out here, apart from the code under test: over UTF-16
    code units, 32-bit wrap-around, signed."""
    units = [int.from_bytes(s.encode("utf-16-be")[i:i + 2], "big") for i in range(0, len(s.encode("utf-16-be")), 2)]
    h = 0
    for u in units:
        h = (h * 31 + u) % 2**32
    return h - 2**32 if h >= 2**31 else h


def expected_partition(key: str, n: int) -> int:
    """0.8.2's DefaultPartitioner: Utils.abs (Integer.MIN_VALUE -> 0) of hashCode, mod n."""
    h = java_string_hash_code(key)
    return (0 if h == -2**31 else abs(h)) % n


KEYS = ["a", "hello", "order-17", "polygenelubricants",  # hashCode == Integer.MIN_VALUE
        "zzzzzzzz", "ключ", "é", "中文键", "😀", "𝄞 clef", "naïve-😀-中", "", "x" * 40]


def test_the_keys_cover_the_cases():
    hashes = [java_string_hash_code(k) for k in KEYS]
    assert java_string_hash_code("hello") == 99162322  # Java's value
    assert -2**31 in hashes and any(-2**31 < h < 0 for h in hashes)
    assert any(ord(c) > 0xFFFF for k in KEYS for c in k) and any(0x7F < ord(c) <= 0xFFFF for k in KEYS for c in k)


def test_hash_codes_of_other_key_types():
    """bytes: Arrays.hashCode over signed bytes; int: Integer.hashCode, Long.hashCode past 32 bits."""
    assert java_hash_code(b"") == 1 and java_hash_code(b"\x01\x02\x03") == 30817
    assert java_hash_code(b"\xff") == 31 - 1  # the byte -1
    assert java_hash_code(-5) == -5 and java_hash_code(1 << 32) == 1 and java_hash_code(2**63 - 1) == -2**31
    p = HashCodePartitioner()
    assert p.partition(-5, 3) == 2 and p.partition("polygenelubricants", 3) == 0
    with pytest.raises(TypeError, match="float"):
        p.partition(1.5, 3)


def test_null_keys_keep_a_random_partition_until_the_refresh_interval():
    kept = HashCodePartitioner(refresh_interval_ms=-1)  # never re-chosen
    assert len({kept.partition(None, 50, "t") for _ in range(20)}) == 1
    every_time = HashCodePartitioner(refresh_interval_ms=0)
    assert len({every_time.partition(None, 50, "t") for _ in range(40)}) > 1


def _properties(tmp_path, bootstrap: str, **extra: str) -> str:
    lines = [
        "# a 0.8.2 producer.properties",
        f"metadata.broker.list={bootstrap}",
        "serializer.class=kafka.serializer.StringEncoder",
        "partitioner.class=kafka.producer.DefaultPartitioner",
        "compression.codec=none",
        "request.required.acks=1",
    ] + [f"{k.replace('_', '.')}={v}" for k, v in extra.items()]
    path = tmp_path / f"producer-{len(list(tmp_path.iterdir()))}.properties"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def _read_partitions(bootstrap: str, topic: str, count: int) -> list:
    c = CKConsumer({"bootstrap.servers": bootstrap, "group.id": f"ck-{topic}", "enable.auto.commit": False})
    c.assign([CKTopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    out = []
    try:
        for _ in range(100):
            if len(out) >= count:
                break
            for m in c.consume(1000, 0.5):
                assert m.error() is None, m.error()
                out.append(m)
    finally:
        c.close()
    return out


@pytest.mark.parametrize("producer_type, codec", [("sync", "gzip"), ("async", "snappy")])
def test_keyed_records_land_where_string_hashcode_sends_them(module_broker, topic_name, tmp_path,
                                                              producer_type, codec):
    with AdminClient(module_broker.bootstrap) as a:
        a.create_topics([NewTopic(topic_name, PARTITIONS)])
    props = load_properties(_properties(tmp_path, module_broker.bootstrap, producer_type=producer_type,
                                        compression_codec=codec))
    with Producer(props) as p:
        futures = [p.send(topic_name, (k, f"value of {k}")) for k in KEYS]
        p.flush()
        placed = {k: f.result(10).partition for k, f in zip(KEYS, futures, strict=True)}
    msgs = _read_partitions(module_broker.bootstrap, topic_name, len(KEYS))
    got = {m.key().decode("utf-8"): (m.partition(), m.value().decode("utf-8")) for m in msgs}
    assert len(msgs) == len(KEYS)
    assert got == {k: (expected_partition(k, PARTITIONS), f"value of {k}") for k in KEYS}
    assert placed == {k: expected_partition(k, PARTITIONS) for k in KEYS}
    assert got["polygenelubricants"][0] == 0  # abs(Integer.MIN_VALUE) is 0 in 0.8.2's Utils.abs


def test_key_serializer_defaults_to_serializer_class(module_broker):
    """0.8.2: key.serializer.class unset -> the keys go through serializer.class's encoder too;
    NullEncoder makes every value null."""
    p = Producer({"metadata.broker.list": module_broker.bootstrap,
                  "serializer.class": "kafka.serializer.NullEncoder"})
    try:
        assert p.key_encoder.to_bytes("k") is None and p.value_encoder.to_bytes("v") is None
    finally:
        p.close()
    p = Producer({"metadata.broker.list": module_broker.bootstrap,
                  "serializer.class": "kafka.serializer.StringEncoder",
                  "key.serializer.class": "kafka.serializer.DefaultEncoder"})
    try:
        assert p.key_encoder.to_bytes(b"\xff") == b"\xff" and p.value_encoder.to_bytes(7) == b"7"
    finally:
        p.close()


@pytest.mark.parametrize("key, name", [
    ("serializer.class", "kafka.serializer.AvroEncoder"),
    ("key.serializer.class", "com.example.KeyEncoder"),
    ("partitioner.class", "kafka.producer.RoundRobinPartitioner"),
])
def test_unknown_class_names_are_refused_by_name(key, name):
    with pytest.raises(InvalidConfigError) as ei:
        Producer({"metadata.broker.list": "127.0.0.1:1", key: name})
    msg = str(ei.value)
    assert key in msg and name in msg
    accepted = "kafka.producer.DefaultPartitioner" if key == "partitioner.class" else "kafka.serializer.StringEncoder"
    assert accepted in msg


def test_python_objects_still_work_for_the_class_keys(module_broker, topic_name):
    with AdminClient(module_broker.bootstrap) as a:
        a.create_topics([NewTopic(topic_name, 3)])
    with Producer({"metadata.broker.list": module_broker.bootstrap, "producer.type": "sync",
                   "serializer.class": lambda v: v.upper().encode(),
                   "partitioner.class": lambda key, n: 2}) as p:
        md = p.send(topic_name, ("k", "value")).result(10)
    assert md.partition == 2


def _codecs(log_dir: str, topic: str) -> list[str]:
    """Every batch's codec in the topic's segments, as `appliance dump-log` prints it."""
    files = sorted(glob.glob(os.path.join(log_dir, f"{topic}-*", "*.log")))
    out = subprocess.run([sys.executable, "-m", "appliance.cli.main", "dump-log", "--files", ",".join(files)],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return [line.split("compresscodec: ")[1].split()[0] for line in out.splitlines() if "compresscodec:" in line]


def test_compressed_topics_compresses_only_those(module_broker, topic_name, tmp_path):
    listed, other = f"{topic_name}-listed", f"{topic_name}-other"
    props = load_properties(_properties(tmp_path, module_broker.bootstrap, producer_type="sync",
                                        compression_codec="1", compressed_topics=f"{listed},elsewhere"))
    with Producer(props) as p:
        for i in range(3):
            p.send(listed, (f"k{i}", f"v{i}" * 20))
            p.send(other, (f"k{i}", f"v{i}" * 20))
    log_dir = module_broker.log_dirs[0]
    assert set(_codecs(log_dir, listed)) == {"gzip"}
    assert set(_codecs(log_dir, other)) == {"none"}


def test_new_producer_keys_of_0_8_2_are_accepted(module_broker, caplog):
    cfg = {"bootstrap.servers": module_broker.bootstrap, "buffer.memory": "33554432",
           "block.on.buffer.full": "false", "receive.buffer.bytes": "32768", "send.buffer.bytes": "131072",
           "timeout.ms": "30000", "metadata.fetch.timeout.ms": "60000", "metadata.max.age.ms": "300000",
           "metric.reporters": "", "metrics.num.samples": "2", "metrics.sample.window.ms": "30000",
           "reconnect.backoff.ms": "10", "retry.backoff.ms": "100", "batch.num.messages": "200",
           "topic.metadata.refresh.interval.ms": "-1", "queue.buffering.max.ms": "50",
           "queue.buffering.max.messages": "10000", "queue.enqueue.timeout.ms": "-1",
           "message.send.max.retries": "3", "request.timeout.ms": "10000", "client.id": "old-app"}
    p = Producer(cfg)
    try:
        assert p.enqueue_timeout == 0 and p.batch_records == 200 and p.ack_timeout_ms == 30000
        assert p.config["max.block.ms"] == 60000 and p.retries == 3 and p.linger == 0.05
        assert p.cluster.metadata_max_age == float("inf")
        assert p.send("old-new-keys", b"x").result(10).offset == 0
        sock = next(iter(p.cluster._conns.values()))._sock  # Linux reports twice the size asked for
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) == 2 * 131072
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) == 2 * 32768
    finally:
        p.close()
    assert "buffer.memory=33554432 is accepted but has no effect here" in caplog.text


def test_batch_num_messages_cuts_async_batches_by_count(module_broker, topic_name, tmp_path):
    props = load_properties(_properties(tmp_path, module_broker.bootstrap, producer_type="async",
                                        batch_num_messages="3", queue_buffering_max_ms="60000"))
    with Producer(props) as p:
        futures = [p.send(topic_name, (f"k{i}", f"v{i}"), partition=0) for i in range(7)]
        assert [f.result(20).offset for f in futures[:6]] == list(range(6))  # sent without lingering
        p.flush()
    files = sorted(glob.glob(os.path.join(module_broker.log_dirs[0], f"{topic_name}-0", "*.log")))
    out = subprocess.run([sys.executable, "-m", "appliance.cli.main", "dump-log", "--files", ",".join(files)],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert [int(line.split(" count: ")[1].split()[0]) for line in out.splitlines() if " count: " in line] == [3, 3, 1]
