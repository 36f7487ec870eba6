"""DeleteRecords (21) through kafka-python's and confluent-kafka's admin clients and
`appliance delete-records`: the log start offset moves, whole segments below it go, consumers
below it get OFFSET_OUT_OF_RANGE, ListOffsets earliest answers it, and it survives a restart."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import AdminClient

from appliance.errors import ErrorCode
from tests.broker.clients import create_topic
from tests.broker.wire import RawConnection
from tests.broker_process import BrokerProcess

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaAdminClient, KafkaProducer, TopicPartition


def _produce(bootstrap: str, topic: str, count: int, partition: int = 0) -> None:
    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0, batch_size=1)
    for i in range(count):
        p.send(topic, b"v%05d" % i + b"x" * 200, partition=partition)
        p.flush()  # one batch per record: the small segments roll often
    p.close()


def _fetch_error(port: int, topic: str, offset: int) -> int:
    with RawConnection(port) as conn:
        r = conn.request(1, 4, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                                "isolation_level": 0, "topics": [{"topic": topic, "partitions": [
                                    {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}]}]})
    return r.responses[0].partitions[0].error_code


def _watermarks(bootstrap: str, topic: str) -> tuple[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "dr-wm"})
    try:
        return c.get_watermark_offsets(CTP(topic, 0), timeout=20)
    finally:
        c.close()


def _live_segments(log_dir: str, topic: str) -> list[int]:
    names = os.listdir(os.path.join(log_dir, f"{topic}-0"))
    return sorted(int(n[:-4]) for n in names if n.endswith(".log"))


def _first_offset_read(bootstrap: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "dr-read", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.assign([CTP(topic, 0, 10)])  # below the log start: the client resets to the earliest
    try:
        for _ in range(60):
            m = c.poll(1.0)
            if m is not None and not m.error():
                return m.offset()
        raise AssertionError("no record read")
    finally:
        c.close()


def test_delete_records_with_both_admin_clients_and_a_restart(tmp_path):
    with BrokerProcess(tmp_path) as b:
        topic = "dr-a"
        create_topic(b.bootstrap, topic, 2, {"segment.bytes": "2000", "file.delete.delay.ms": "0"})
        _produce(b.bootstrap, topic, 60)
        assert len(_live_segments(b.log_dirs[0], topic)) > 3

        # kafka-python: up to 25
        kadmin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
        try:
            res = kadmin.delete_records({TopicPartition(topic, 0): 25}, timeout_ms=20000)
        finally:
            kadmin.close()
        (meta,) = res.values()
        assert meta["low_watermark"] == 25
        assert _watermarks(b.bootstrap, topic) == (25, 60)
        assert _fetch_error(b.port, topic, 24) == ErrorCode.OFFSET_OUT_OF_RANGE
        assert _fetch_error(b.port, topic, 25) == 0
        assert _first_offset_read(b.bootstrap, topic) == 25
        # every segment wholly below 25 is gone; the one holding 25 stays
        segs = _live_segments(b.log_dirs[0], topic)
        assert segs[0] <= 25 and (len(segs) == 1 or segs[1] > 25)

        # confluent-kafka: a lower offset changes nothing; beyond the high watermark is
        # refused; -1 = the high watermark
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        assert admin.delete_records([CTP(topic, 0, 10)])[CTP(topic, 0, 10)].result(20).low_watermark == 25
        tp = CTP(topic, 0, 61)
        try:
            admin.delete_records([tp])[tp].result(20)
            raise AssertionError("an offset beyond the high watermark was accepted")
        except Exception as e:  # KafkaException carrying the broker's error
            assert "OFFSET_OUT_OF_RANGE" in str(e), e
        # an unknown partition (librdkafka refuses it itself, so on the wire)
        with RawConnection(b.port) as conn:
            r = conn.request(21, 1, {"topics": [{"name": topic, "partitions": [
                {"partition_index": 7, "offset": 1}]}], "timeout_ms": 1000})
        assert r.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert _watermarks(b.bootstrap, topic) == (25, 60)
        tp = CTP(topic, 0, -1)
        assert admin.delete_records([tp])[tp].result(20).low_watermark == 60
        _produce(b.bootstrap, topic, 3)
        assert _watermarks(b.bootstrap, topic) == (60, 63)

        # the other partition was not touched
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "dr-wm1"})
        assert c.get_watermark_offsets(CTP(topic, 1), timeout=20) == (0, 0)
        c.close()

        # a restart (clean, then SIGKILL) keeps the log start offset
        b.stop()
        b.start()
        assert _watermarks(b.bootstrap, topic) == (60, 63)
        b.kill()
        b.start()
        assert _watermarks(b.bootstrap, topic) == (60, 63)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "appliance.cli.main", *args],
                          capture_output=True, text=True, timeout=60)


def test_delete_records_cli(module_broker, tmp_path):
    b = module_broker.bootstrap
    create_topic(b, "dr-cli", 1)
    _produce(b, "dr-cli", 20)
    f = tmp_path / "offsets.json"
    f.write_text(json.dumps({"partitions": [{"topic": "dr-cli", "partition": 0, "offset": 12}], "version": 1}))
    r = _cli("delete-records", "--bootstrap-server", b, "--offset-json-file", str(f))
    assert r.returncode == 0, r.stderr
    assert "partition: dr-cli-0\tlow_watermark: 12" in r.stdout
    assert _watermarks(b, "dr-cli") == (12, 20)

    # beyond the high watermark: the partition's error, exit 1, nothing moved
    f.write_text(json.dumps({"partitions": [{"topic": "dr-cli", "partition": 0, "offset": 99}], "version": 1}))
    r = _cli("delete-records", "--bootstrap-server", b, "--offset-json-file", str(f))
    assert r.returncode == 1 and "error: OFFSET_OUT_OF_RANGE" in r.stdout
    assert _watermarks(b, "dr-cli") == (12, 20)

    # bad files: one line naming the bad part, no traceback
    for doc, named in (("{", "not JSON"), ('{"partitions": [{"topic": "dr-cli", "partition": "x", "offset": 1}]}',
                                            '"partition"'),
                       ('{"partitions": [{"topic": "dr-cli", "partition": 0, "offset": -5}]}', '"offset"')):
        f.write_text(doc)
        r = _cli("delete-records", "--bootstrap-server", b, "--offset-json-file", str(f))
        assert r.returncode == 2 and named in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
