"""Every client generation against one broker: kafka-python pinned to the protocol of Kafka
0.8.2, 0.9, 0.10.1 and 2.0 and unpinned, kcat with API-version negotiation off falling back to
0.8.2.2 and 0.10.0.0, and confluent-kafka at its newest. Each writes its own records, with its
own compression, into one shared partition; every one of them then reads the whole partition
back and must see the same offsets, keys and values (the old ones through the broker's
down-conversion of the stored v2 batches to magic 0 / magic 1)."""

from __future__ import annotations

import subprocess
import time
import warnings

import pytest
from confluent_kafka import Consumer, Producer

from appliance.errors import ErrorCode
from appliance.records.legacy import iter_message_set
from tests.broker.clients import create_topic
from tests.broker.wire import RawConnection

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

# (name, kafka-python api_version or None = negotiate, compression it writes with)
KAFKA_PYTHON = [("kp-0.8.2", (0, 8, 2), "gzip"), ("kp-0.9", (0, 9), "snappy"),
                ("kp-0.10.1", (0, 10, 1), "lz4"), ("kp-2.0", (2, 0), "gzip"), ("kp-new", None, "snappy")]
KCAT = [("kcat-0.8.2.2", "0.8.2.2", "snappy"), ("kcat-0.10.0.0", "0.10.0.0", "gzip")]
PER_WRITER = 7
NO_TIMESTAMP_WRITERS = {"kp-0.8.2", "kp-0.9", "kcat-0.8.2.2"}  # they write magic 0: timestamp -1


def _stamped(key: bytes) -> bool:
    """Whether the record with this key was written with a timestamp (magic 1 or 2)."""
    return key.rsplit(b"-k", 1)[0].decode() not in NO_TIMESTAMP_WRITERS
TIMEOUT = 60


def _kp_args(ver):
    return {} if ver is None else {"api_version": ver}


def _kcat_args(fallback: str) -> list[str]:
    return ["-X", "api.version.request=false", "-X", f"broker.version.fallback={fallback}"]


def _records_of(writer: str) -> list[tuple[bytes, bytes]]:
    return [(f"{writer}-k{i}".encode(), f"{writer} value {i} ".encode() * (i + 1)) for i in range(PER_WRITER)]


def _write_kafka_python(bootstrap, topic, name, ver, codec):
    p = KafkaProducer(bootstrap_servers=bootstrap, compression_type=codec, linger_ms=50,
                      **_kp_args(ver))
    futures = [p.send(topic, key=k, value=v, partition=0) for k, v in _records_of(name)]
    for f in futures:
        f.get(timeout=TIMEOUT)
    p.close()


def _write_kcat(bootstrap, topic, name, fallback, codec):
    lines = b"".join(k + b"\t" + v + b"\n" for k, v in _records_of(name))
    subprocess.run(["kcat", "-b", bootstrap, "-P", "-t", topic, "-p", "0", "-K", "\t", "-z", codec,
                    *_kcat_args(fallback)], input=lines, check=True, timeout=TIMEOUT)


def _write_confluent(bootstrap, topic, name):
    # current client: v2 batches with headers, which the old readers must see without them
    p = Producer({"bootstrap.servers": bootstrap, "compression.type": "lz4", "linger.ms": 20})
    for k, v in _records_of(name):
        p.produce(topic, v, k, partition=0, headers=[("h", b"x")])
    assert p.flush(TIMEOUT) == 0


def _read_kafka_python(bootstrap, topic, ver, n, meta=None):
    c = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False,
                      consumer_timeout_ms=10000, **_kp_args(ver))
    c.assign([TopicPartition(topic, 0)])
    got = []
    deadline = time.monotonic() + TIMEOUT
    while len(got) < n and time.monotonic() < deadline:
        for m in c:
            got.append((m.offset, m.key, m.value))
            if meta is not None:
                meta.append((m.timestamp, list(m.headers or [])))
            if len(got) == n:
                break
    c.close()
    return got


def _read_kcat(bootstrap, topic, fallback, n):
    out = subprocess.run(["kcat", "-b", bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning",
                          "-c", str(n), "-e", "-f", "%o\t%T\t%k\t%s\n", *_kcat_args(fallback)],
                         check=True, capture_output=True, timeout=TIMEOUT).stdout
    rows, stamps = [], []
    for line in out.splitlines():
        o, t, k, v = line.split(b"\t", 3)
        rows.append((int(o), k, v))
        stamps.append(int(t) > 0)
    # magic 0 (0.8.2.2) carries no timestamps, magic 1 (0.10.0.0) those the writers gave
    assert stamps == [fallback != "0.8.2.2" and _stamped(k) for _, k, _ in rows]
    return rows


def _read_confluent(bootstrap, topic, n):
    from confluent_kafka import TopicPartition as CTP
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "gen-confluent", "enable.auto.commit": False})
    c.assign([CTP(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + TIMEOUT
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(1.0)
        if m is not None and m.error() is None:
            got.append((m.offset(), m.key(), m.value()))
    c.close()
    return got


@pytest.fixture(scope="module")
def shared_topic(module_broker):
    """One partition written by every generation in turn; returns (topic, expected rows)."""
    b = module_broker.bootstrap
    topic = "generations"
    create_topic(b, topic, 1)
    expected: list[tuple[bytes, bytes]] = []
    for name, ver, codec in KAFKA_PYTHON:
        _write_kafka_python(b, topic, name, ver, codec)
        expected += _records_of(name)
    for name, fallback, codec in KCAT:
        _write_kcat(b, topic, name, fallback, codec)
        expected += _records_of(name)
    _write_confluent(b, topic, "confluent")
    expected += _records_of("confluent")
    return topic, [(i, k, v) for i, (k, v) in enumerate(expected)]


@pytest.mark.parametrize("name,ver", [(n, v) for n, v, _ in KAFKA_PYTHON], ids=[n for n, _, _ in KAFKA_PYTHON])
def test_kafka_python_generation_reads_every_writer(module_broker, shared_topic, name, ver):
    topic, expected = shared_topic
    meta: list = []
    assert _read_kafka_python(module_broker.bootstrap, topic, ver, len(expected), meta) == expected
    # the format it was sent: magic 0 has no timestamps, magic 0/1 no headers (dropped by the
    # down-conversion), v2 carries the confluent writer's headers
    stamps, headers = zip(*meta, strict=True)
    if ver is not None and ver < (0, 10):
        assert set(stamps) == {None}
    else:
        assert [ts > 0 for ts in stamps] == [_stamped(k) for _, k, _ in expected]
    confluent_headers = headers[-PER_WRITER:]
    if ver is not None and ver < (0, 11):
        assert set(map(tuple, headers)) == {()}
    else:
        assert all(h == [("h", b"x")] for h in confluent_headers)


@pytest.mark.parametrize("name,fallback", [(n, f) for n, f, _ in KCAT], ids=[n for n, _, _ in KCAT])
def test_kcat_generation_reads_every_writer(module_broker, shared_topic, name, fallback):
    topic, expected = shared_topic
    assert _read_kcat(module_broker.bootstrap, topic, fallback, len(expected)) == expected


def test_confluent_reads_every_writer(module_broker, shared_topic):
    topic, expected = shared_topic
    assert _read_confluent(module_broker.bootstrap, topic, len(expected)) == expected


@pytest.mark.parametrize("name,ver", [(n, v) for n, v, _ in KAFKA_PYTHON], ids=[n for n, _, _ in KAFKA_PYTHON])
def test_commit_and_fetch_offsets_per_generation(module_broker, shared_topic, name, ver):
    """0.8.2: a standalone consumer commits through OffsetCommit v0-1 (generation -1);
    from 0.9: a group member (JoinGroup/SyncGroup/Heartbeat) commits; a new consumer of the same
    group, of the same generation, resumes from the committed offset."""
    topic, expected = shared_topic
    group = f"group-{name}"
    tp = TopicPartition(topic, 0)

    def consumer():
        c = KafkaConsumer(bootstrap_servers=module_broker.bootstrap, group_id=group,
                          auto_offset_reset="earliest", enable_auto_commit=False,
                          consumer_timeout_ms=10000, max_poll_records=5, **_kp_args(ver))
        if ver is not None and ver < (0, 9):
            c.assign([tp])
        else:
            c.subscribe([topic])
        return c

    c = consumer()
    first = []
    deadline = time.monotonic() + TIMEOUT
    while len(first) < 10 and time.monotonic() < deadline:
        for m in c:
            first.append((m.offset, m.key, m.value))
            if len(first) == 10:
                break
    assert first == expected[:10]
    c.commit()
    assert c.committed(tp) == 10
    c.close()
    c = consumer()
    nxt = next(iter(c))
    assert (nxt.offset, nxt.key, nxt.value) == expected[10]
    c.close()


def test_old_fetch_of_zstd_answers_unsupported_compression(module_broker):
    """Magic 0/1 have no ZSTD: a Fetch v0-3 of a ZSTD batch answers UNSUPPORTED_COMPRESSION_TYPE
    for the partition, as Kafka does, and the connection carries on."""
    topic = "generations-zstd"
    create_topic(module_broker.bootstrap, topic, 1)
    p = Producer({"bootstrap.servers": module_broker.bootstrap, "compression.type": "zstd"})
    p.produce(topic, b"z" * 100, b"k", partition=0)
    assert p.flush(TIMEOUT) == 0
    with RawConnection(module_broker.port) as conn:
        for version in (0, 2):
            r = conn.request(1, version, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "topics": [
                {"topic": topic, "partitions": [{"partition": 0, "fetch_offset": 0,
                                                 "partition_max_bytes": 1 << 20}]}]})
            part = r.responses[0].partitions[0]
            assert part.error_code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
            assert part.records is None or len(part.records) == 0
        r = conn.request(1, 4, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "isolation_level": 0,
                                "topics": [{"topic": topic, "partitions": [
                                    {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]})
        assert r.responses[0].partitions[0].error_code == 0 and len(r.responses[0].partitions[0].records) > 0


def test_down_conversion_keeps_offsets_timestamps_and_codecs(module_broker):
    """A v2 batch with headers, read at Fetch v1 (magic 0) and v2 (magic 1): the same offsets,
    keys and values, one wrapper per compressed batch with the batch's codec, magic 1 keeps the
    create timestamps, and the headers are gone (the old formats have none)."""
    topic = "generations-convert"
    create_topic(module_broker.bootstrap, topic, 1)
    p = Producer({"bootstrap.servers": module_broker.bootstrap, "compression.type": "gzip", "linger.ms": 50})
    for i in range(5):
        p.produce(topic, b"v%d" % i, b"k%d" % i, partition=0, timestamp=1_700_000_000_000 + i,
                  headers=[("h", b"x")])
    assert p.flush(TIMEOUT) == 0
    with RawConnection(module_broker.port) as conn:
        for version, magic in ((1, 0), (2, 1), (3, 1)):
            body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "topics": [
                {"topic": topic, "partitions": [{"partition": 0, "fetch_offset": 0,
                                                 "partition_max_bytes": 1 << 20}]}]}
            part = conn.request(1, version, body).responses[0].partitions[0]
            assert part.error_code == 0 and part.high_watermark == 5
            data = bytes(part.records)
            assert data[16] == magic  # the wrapper's magic byte
            assert data[17] & 0x07 == 1  # gzip, kept on the wrapper
            msgs = list(iter_message_set(data))
            assert [(m.offset, m.key, m.value) for m in msgs] == [(i, b"k%d" % i, b"v%d" % i) for i in range(5)]
            want_ts = [1_700_000_000_000 + i for i in range(5)] if magic == 1 else [-1] * 5
            assert [m.timestamp for m in msgs] == want_ts


def test_down_conversion_disabled_refuses_old_fetchers(module_broker):
    """message.downconversion.enable=false: Fetch v0-3 answer UNSUPPORTED_VERSION for the topic's
    partitions (Kafka's rule), current fetchers read as usual."""
    topic = "generations-no-convert"
    create_topic(module_broker.bootstrap, topic, 1, {"message.downconversion.enable": "false"})
    p = Producer({"bootstrap.servers": module_broker.bootstrap})
    p.produce(topic, b"v", b"k", partition=0)
    assert p.flush(TIMEOUT) == 0
    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "isolation_level": 0, "topics": [
        {"topic": topic, "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]}
    with RawConnection(module_broker.port) as conn:
        for version in (0, 3):
            part = conn.request(1, version, body).responses[0].partitions[0]
            assert part.error_code == ErrorCode.UNSUPPORTED_VERSION and not part.records
        part = conn.request(1, 4, body).responses[0].partitions[0]
        assert part.error_code == 0 and len(part.records) > 0


@pytest.mark.parametrize("ver", [(0, 8, 2), (0, 10)], ids=["magic0", "magic1"])
def test_old_consumers_read_many_small_fetches(module_broker, ver):
    """A 5000-byte fetch size: each answer holds a few whole batches (the reader never cuts one),
    so the old consumer goes through many down-converted answers, each starting where the last
    ended, across uncompressed and compressed batches with and without headers (the kernel's and
    the wrapper's paths), and reads every record once, in order."""
    topic = f"generations-cuts-{ver[1]}"
    create_topic(module_broker.bootstrap, topic, 1)
    expected = []
    for codec in ("none", "lz4", "none", "gzip", "snappy"):
        p = Producer({"bootstrap.servers": module_broker.bootstrap, "compression.type": codec,
                      "linger.ms": 50, "batch.num.messages": 25})
        for i in range(100):
            k, v = b"%s-%d" % (codec.encode(), i), bytes([i]) * (i % 7 * 20)
            p.produce(topic, v, k, partition=0, headers=[("h", b"x")] if i % 3 else None)
            expected.append((len(expected), k, v))
        assert p.flush(TIMEOUT) == 0
    c = KafkaConsumer(bootstrap_servers=module_broker.bootstrap, auto_offset_reset="earliest",
                      enable_auto_commit=False, api_version=ver,
                      max_partition_fetch_bytes=5000, fetch_max_bytes=5000)
    c.assign([TopicPartition(topic, 0)])
    got = []
    deadline = time.monotonic() + TIMEOUT
    # polled until every record is in (iterating would idle out a consumer timeout at the end)
    while len(got) < len(expected) and time.monotonic() < deadline:
        for msgs in c.poll(timeout_ms=500).values():
            got += [(m.offset, m.key, m.value) for m in msgs]
    extra = [m for msgs in c.poll(timeout_ms=300).values() for m in msgs]
    c.close()
    assert got == expected and not extra  # nothing more than what was produced
