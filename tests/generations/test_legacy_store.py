"""Topics stored in a pre-0.11 message format, through the real broker process: a topic with
message.format.version=0.8.2 holds magic 0 entries and one with 0.10.2 magic 1 entries (byte 16
of every entry in the .log files), written by kafka-python pinned to 0.8.2 and 0.10.1 and
unpinned, confluent-kafka and kcat, gzip and snappy included, and read back identically by each
of them. Then: headers refused with UNSUPPORTED_FOR_MESSAGE_FORMAT, DeleteRecords inside a
wrapper, a format switch to 3.0 by `appliance configs --alter` (both parts readable), compaction
of a legacy compacted topic, and, last, SIGKILL mid-produce (every acknowledged record is read
back) and deleted index files rebuilt at restart. One broker for the module."""

from __future__ import annotations

import glob
import os
import struct
import subprocess
import sys
import threading
import time
import warnings

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import AdminClient

from appliance.records.legacy import iter_entries
from native.scan import ScanStop, scan_batches
from tests.broker.clients import create_topic
from tests.broker_process import BrokerProcess

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.errors import UnsupportedForMessageFormatError

TIMEOUT = 60
PER_WRITER = 6
TOPICS = {"legacy-082": ("0.8.2", 0), "legacy-0102": ("0.10.2", 1)}
# (writer, how it writes, compression)
WRITERS = [("kp-0.8.2", (0, 8, 2), "gzip"), ("kp-0.10.1", (0, 10, 1), "snappy"),
           ("kp-new", None, "gzip"), ("confluent", "confluent", "snappy"), ("kcat", "kcat", "gzip")]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    # short cleaner backoff: the compaction test waits for a pass
    with BrokerProcess(tmp_path_factory.mktemp("legacy"),
                       overrides={"log.cleaner.backoff.ms": "200"}) as b:
        yield b


def _records(writer: str, topic: str) -> list[tuple[bytes, bytes]]:
    return [(f"{writer}-k{i}".encode(), f"{writer} {topic} value {i} ".encode() * (i + 1))
            for i in range(PER_WRITER)]


def _kp(ver) -> dict:
    return {} if ver is None else {"api_version": ver}


def _kp_producer(ver) -> dict:
    # kafka-python 3 is idempotent by default, which a pre-0.11 format refuses (as Kafka does)
    return {"enable_idempotence": False, **_kp(ver)} if ver is None else _kp(ver)


def _write(bootstrap: str, topic: str, writer: str, how, codec: str) -> None:
    recs = _records(writer, topic)
    if how == "confluent":
        p = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 20})
        for k, v in recs:
            p.produce(topic, v, k, partition=0)
        assert p.flush(TIMEOUT) == 0
    elif how == "kcat":
        lines = b"".join(k + b"\t" + v + b"\n" for k, v in recs)
        subprocess.run(["kcat", "-b", bootstrap, "-P", "-t", topic, "-p", "0", "-K", "\t",
                        "-z", codec], input=lines, check=True, timeout=TIMEOUT)
    else:
        p = KafkaProducer(bootstrap_servers=bootstrap, compression_type=codec, linger_ms=50,
                          **_kp_producer(how))
        for f in [p.send(topic, key=k, value=v, partition=0) for k, v in recs]:
            f.get(timeout=TIMEOUT)
        p.close()


def _read(bootstrap: str, topic: str, how, n: int, start: int = 0) -> list[tuple[int, bytes, bytes]]:
    if how == "appliance":  # our own client, through the console consumer
        out = subprocess.run([sys.executable, "-m", "appliance.cli.main", "console-consumer",
                              "--bootstrap-server", bootstrap, "--topic", topic, "--partition", "0",
                              "--offset", str(start), "--max-messages", str(n),
                              "--timeout-ms", "20000", "--property", "print.offset=true",
                              "--property", "print.key=true"],
                             check=True, capture_output=True, timeout=TIMEOUT).stdout
        return [(int(o.split(b":", 1)[1]), k, v) for o, k, v in
                (line.split(b"\t", 2) for line in out.splitlines())]
    if how == "kcat":
        out = subprocess.run(["kcat", "-b", bootstrap, "-C", "-t", topic, "-p", "0", "-o", str(start),
                              "-c", str(n), "-e", "-f", "%o\t%k\t%s\n"],
                             check=True, capture_output=True, timeout=TIMEOUT).stdout
        return [(int(o), k, v) for o, k, v in (line.split(b"\t", 2) for line in out.splitlines())]
    got: list[tuple[int, bytes, bytes]] = []
    deadline = time.monotonic() + TIMEOUT
    if how == "confluent":
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "legacy-reader",
                      "enable.auto.commit": False})
        c.assign([CTP(topic, 0, start)])
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append((m.offset(), m.key(), m.value()))
        c.close()
        return got
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                      consumer_timeout_ms=5000, **_kp(how))
    tp = TopicPartition(topic, 0)
    c.assign([tp])
    c.seek(tp, start)
    while len(got) < n and time.monotonic() < deadline:
        for m in c:
            got.append((m.offset, m.key, m.value))
            if len(got) == n:
                break
    c.close()
    return got


def _log_files(b: BrokerProcess, topic: str) -> list[str]:
    return sorted(glob.glob(os.path.join(b.log_dirs[0], f"{topic}-0", "*.log")))


def _magics(b: BrokerProcess, topic: str) -> list[int]:
    """Byte 16 (the magic) of every entry in the partition's .log files, CRCs checked."""
    out = []
    for path in _log_files(b, topic):
        data = open(path, "rb").read()
        r = scan_batches(data, legacy=True, verify_crc=True)
        assert r.stop_reason == ScanStop.END, path
        out += [data[int(p) + 16] for p in r.positions]
    return out


@pytest.fixture(scope="module")
def written(broker):
    """Both topics, written by every writer in turn; returns topic -> expected rows."""
    expected = {}
    for topic, (version, _) in TOPICS.items():
        create_topic(broker.bootstrap, topic, 1, {"message.format.version": version})
        rows: list[tuple[bytes, bytes]] = []
        for writer, how, codec in WRITERS:
            _write(broker.bootstrap, topic, writer, how, codec)
            rows += _records(writer, topic)
        expected[topic] = [(i, k, v) for i, (k, v) in enumerate(rows)]
    return expected


def test_segments_hold_the_topic_magic(broker, written):
    for topic, (_, magic) in TOPICS.items():
        magics = _magics(broker, topic)
        assert set(magics) == {magic}, topic
        data = b"".join(open(p, "rb").read() for p in _log_files(broker, topic))
        codecs = {e.compression.name for e in iter_entries(data)}
        assert {"GZIP", "SNAPPY"} <= codecs  # compressed writers keep a wrapper with their codec


def test_dump_log_prints_legacy_entries(broker, written):
    for topic, (_, magic) in TOPICS.items():
        out = subprocess.run([sys.executable, "-m", "appliance.cli.main", "dump-log", "--files",
                              ",".join(_log_files(broker, topic)), "--verify-crc", "--print-data-log"],
                             check=True, capture_output=True, timeout=TIMEOUT).stdout.decode()
        entries = [line for line in out.splitlines() if line.startswith("offset: ")]
        assert entries and all(f"magic: {magic}" in e and "isvalid: true" in e for e in entries)
        assert any("compresscodec: gzip" in e for e in entries)
        assert ("NoTimestampType: -1" in entries[0]) == (magic == 0)
        payloads = [line.rsplit("payload: ", 1)[1] for line in out.splitlines() if line.startswith("| offset")]
        assert payloads == [v.decode() for _, _, v in written[topic]]


@pytest.mark.parametrize("reader", [w for w, _, _ in WRITERS] + ["appliance"])
def test_every_client_reads_back_identically(broker, written, reader):
    how = dict((w, h) for w, h, _ in WRITERS).get(reader, reader)
    for topic, rows in written.items():
        assert _read(broker.bootstrap, topic, how, len(rows)) == rows, (reader, topic)


def test_headers_and_idempotence_are_refused_and_nothing_written(broker, written):
    topic = "legacy-0102"
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=True)
    with pytest.raises(UnsupportedForMessageFormatError):
        p.send(topic, key=b"k", value=b"v", partition=0).get(TIMEOUT)
    p.close()
    errors = []
    p = Producer({"bootstrap.servers": broker.bootstrap, "retries": 0})
    p.produce(topic, b"v", b"k", partition=0, headers=[("h", b"x")],
              on_delivery=lambda err, msg: errors.append(err))
    p.flush(TIMEOUT)
    assert errors and errors[0].code() == KafkaError.UNSUPPORTED_FOR_MESSAGE_FORMAT
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "legacy-hw"})
    assert c.get_watermark_offsets(CTP(topic, 0), timeout=20)[1] == len(written[topic])
    c.close()


def test_delete_records_inside_a_wrapper(broker, written):
    topic = "legacy-082"
    rows = written[topic]
    # kp-0.8.2 wrote offsets 0-5 as one gzip wrapper: start the log at 3, inside it
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    tp = CTP(topic, 0, 3)
    assert admin.delete_records([tp])[tp].result(20).low_watermark == 3
    for how in (None, "confluent"):
        assert _read(broker.bootstrap, topic, how, 3, start=3) == rows[3:6]
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "legacy-lw"})
    assert c.get_watermark_offsets(CTP(topic, 0), timeout=20)[0] == 3
    c.close()


def test_list_offsets_by_timestamp_in_magic_1(broker, written):
    topic = "legacy-times"
    create_topic(broker.bootstrap, topic, 1, {"message.format.version": "0.10.2"})
    t0 = int(time.time() * 1000) - 60_000
    for codec, first in (("gzip", 0), ("none", 6)):  # a wrapper of 6, then 3 plain messages
        p = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec,
                      "linger.ms": 100})
        for i in range(first, first + (6 if first == 0 else 3)):
            p.produce(topic, b"v%d" % i * 40, b"k%d" % i, partition=0, timestamp=t0 + 10 * i)
        assert p.flush(TIMEOUT) == 0
    assert _magics(broker, topic) == [1, 1, 1, 1]
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "legacy-times"})
    for ts, want in ((t0 + 35, 4), (t0 + 70, 7), (t0, 0), (t0 + 1000, -1)):
        got = c.offsets_for_times([CTP(topic, 0, ts)], timeout=20)[0].offset
        assert got == want, ts
    c.close()


def test_format_switch_to_3_0_keeps_both_parts_readable(broker, written):
    topic = "legacy-switch"
    create_topic(broker.bootstrap, topic, 1, {"message.format.version": "0.10.2"})
    _write(broker.bootstrap, topic, "before", None, "snappy")
    subprocess.run([sys.executable, "-m", "appliance.cli.main", "configs", "--bootstrap-server",
                    broker.bootstrap, "--entity-type", "topics", "--entity-name", topic, "--alter",
                    "--add-config", "message.format.version=3.0"], check=True, timeout=TIMEOUT)
    # a v2 topic again: headers are fine now
    deadline = time.monotonic() + 20
    errors: list = []
    while errors[-1:] != [None] and time.monotonic() < deadline:
        p = Producer({"bootstrap.servers": broker.bootstrap, "retries": 0})
        p.produce(topic, b"with-header", b"h", partition=0, headers=[("h", b"x")],
                  on_delivery=lambda err, msg: errors.append(err))
        p.flush(TIMEOUT)
        time.sleep(0.2 if errors[-1:] != [None] else 0)  # the alter reaches the disk worker
    assert errors[-1:] == [None]
    _write(broker.bootstrap, topic, "after", "confluent", "gzip")
    magics = _magics(broker, topic)
    assert magics[0] == 1 and magics[-1] == 2 and set(magics) == {1, 2}
    rows = [(i, k, v) for i, (k, v) in enumerate(
        _records("before", topic) + [(b"h", b"with-header")] + _records("after", topic))]
    for how in (None, (0, 10, 1), (0, 8, 2), "confluent", "kcat", "appliance"):
        assert _read(broker.bootstrap, topic, how, len(rows)) == rows, how


def test_compaction_of_a_legacy_topic(broker, written):
    topic = "legacy-compact"
    create_topic(broker.bootstrap, topic, 1, {
        "message.format.version": "0.10.2", "cleanup.policy": "compact", "segment.bytes": "1024",
        "min.cleanable.dirty.ratio": "0.01", "segment.ms": "100"})
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type="gzip", linger_ms=5,
                      enable_idempotence=False)
    latest = {}
    for r in range(6):
        for k in range(5):
            key = b"key-%d" % k
            latest[key] = b"round-%d-" % r + b"x" * 40
            p.send(topic, key=key, value=latest[key], partition=0).get(TIMEOUT)
        p.flush()
    p.close()
    total = 30
    # the segments before the active one are cleanable at once (segment.bytes 1024); a record
    # every 2 s rolls the active one too (segment.ms), in case the first ones were all active
    extra = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": "gzip"})
    deadline = time.monotonic() + TIMEOUT
    next_send = time.monotonic() + 2
    while time.monotonic() < deadline:
        data = b"".join(open(f, "rb").read() for f in _log_files(broker, topic))
        count = sum(len(e.messages) for e in iter_entries(data, allow_partial=True))
        if count < total - 10:
            break
        if time.monotonic() > next_send:
            extra.produce(topic, latest[b"key-0"], b"key-0", partition=0)
            assert extra.flush(TIMEOUT) == 0
            total += 1
            next_send = time.monotonic() + 2
        time.sleep(0.1)
    assert count < total - 10, "the cleaner did not compact the legacy topic"
    assert set(_magics(broker, topic)) == {1}
    got = _read(broker.bootstrap, topic, None, count)
    offsets = [o for o, _, _ in got]
    assert offsets == sorted(offsets) and offsets[-1] == total - 1  # offsets kept, with gaps
    assert {k: v for _, k, v in got} == latest


def test_sigkill_mid_produce_then_index_rebuild(broker, written):
    """Last in the module: kills the broker mid-produce and deletes every index file of the
    partition before the restart, which must recover the log (CRC32 scan of the legacy entries)
    and rebuild the indexes: every acknowledged record is read back, from the start and from the
    middle (an index lookup), and each rebuilt index entry points at an entry holding it."""
    topic = "legacy-crash"
    create_topic(broker.bootstrap, topic, 1, {"message.format.version": "0.10.2",
                                              "index.interval.bytes": "128"})
    acked: dict[int, bytes] = {}
    stop = threading.Event()

    def produce() -> None:
        # at most 50 records a wrapper, so a slow broker still gets many entries to index
        p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 2, "acks": 1,
                      "batch.num.messages": 50, "compression.type": "snappy",
                      "message.timeout.ms": 3000})
        i = 0

        def done(err, msg) -> None:
            if err is None:
                acked[msg.offset()] = msg.value()
        while not stop.is_set():
            p.produce(topic, b"crash-%06d" % i, b"k", partition=0, on_delivery=done)
            p.poll(0)
            i += 1
            if i % 200 == 0:
                time.sleep(0.005)
        p.purge()  # what the dead broker never acknowledged does not count
        p.flush(1)

    t = threading.Thread(target=produce)
    t.start()
    deadline = time.monotonic() + TIMEOUT
    while len(acked) < 1000 and time.monotonic() < deadline:
        time.sleep(0.02)
    broker.kill()
    stop.set()
    t.join(30)
    assert len(acked) >= 1000
    part = os.path.join(broker.log_dirs[0], f"{topic}-0")
    indexes = glob.glob(os.path.join(part, "*.index")) + glob.glob(os.path.join(part, "*.timeindex"))
    assert indexes
    for p in indexes:
        os.unlink(p)
    broker.start()
    n = max(acked) + 1
    got = {o: v for o, _, v in _read(broker.bootstrap, topic, "confluent", n)}
    assert all(got.get(o) == v for o, v in acked.items())
    mid = n // 2
    assert _read(broker.bootstrap, topic, None, 5, start=mid) == [(o, b"k", got[o]) for o in range(mid, mid + 5)]
    assert set(_magics(broker, topic)) == {1}
    broker.stop()  # trims the rebuilt indexes
    for log_path in _log_files(broker, topic):
        data = open(log_path, "rb").read()
        r = scan_batches(data, legacy=True)
        last_at = dict(zip(r.positions.tolist(), r.last_offsets.tolist(), strict=True))
        base = int(os.path.basename(log_path)[:20])
        raw = open(log_path[:-4] + ".index", "rb").read()
        entries = [struct.unpack_from(">ii", raw, i) for i in range(0, len(raw), 8)]
        assert len(entries) >= 2 and all(last_at.get(pos) == base + rel for rel, pos in entries)
        raw = open(log_path[:-4] + ".timeindex", "rb").read()
        stamps = [struct.unpack_from(">qi", raw, i) for i in range(0, len(raw), 12)]
        assert stamps and all(base + rel in last_at.values() for _, rel in stamps)
