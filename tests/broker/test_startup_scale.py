"""Start-up with many partitions (issue 14): a broker holding 1,000 partitions over 2 log dirs
starts, serves every partition, and after a SIGKILL restarts with every acknowledged record at its
offset and every log end offset right.

The data dirs are written in-process with the storage layer (1,000 CreateTopics partitions through
the broker would cost most of this module's time budget); everything after that goes through the
real broker and a real client (confluent-kafka).
"""

from __future__ import annotations

import os
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from appliance.config import BrokerConfig
from appliance.records.batch import build_batch
from appliance.storage.checkpoint import RECOVERY_POINT_CHECKPOINT, read_checkpoint
from appliance.storage.log_dir import CLEAN_SHUTDOWN_FILE, SYNCFS_MIN_PARTITIONS, LogDir
from tests.broker.procs import wait_gone
from tests.broker_process import BrokerProcess

pytestmark = pytest.mark.timeout(300)

TOPICS, PER_TOPIC, DIRS = 10, 100, 2
TOTAL = TOPICS * PER_TOPIC


def _topics() -> list[str]:
    return [f"many-{i:02d}" for i in range(TOPICS)]


def _write_dirs(b: BrokerProcess) -> None:
    """Partition p of topic i goes to dir (i + p) % DIRS, with one record ``<topic>-<p>-0``;
    the dirs are closed cleanly (one syncfs each: more than SYNCFS_MIN_PARTITIONS)."""
    assert TOTAL // DIRS > SYNCFS_MIN_PARTITIONS
    dirs = [LogDir.open(d, BrokerConfig.load(overrides={"log.dirs": ",".join(b.log_dirs)}))
            for d in b.log_dirs]
    for i, topic in enumerate(_topics()):
        for p in range(PER_TOPIC):
            d = dirs[(i + p) % DIRS]
            plog = d.create_partition(topic, p, d.broker_config.topic_defaults(), durable=False)
            plog.append(build_batch([(None, f"{topic}-{p}-0".encode())]))
    for d in dirs:
        d.close(clean=True)  # its syncfs makes the new partitions durable too
        assert os.path.exists(os.path.join(d.path, CLEAN_SHUTDOWN_FILE))
        # the one-sync close still advanced every recovery point to the log end
        rp = read_checkpoint(os.path.join(d.path, RECOVERY_POINT_CHECKPOINT))
        assert len(rp) == TOTAL // DIRS and set(rp.values()) == {1}


def _wait_all_led(b: BrokerProcess, timeout: float = 120) -> float:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    t0 = time.monotonic()
    seen = 0
    while time.monotonic() - t0 < timeout:
        md = admin.list_topics(timeout=30)
        seen = sum(1 for t in md.topics.values() if t.topic.startswith("many-")
                   for p in t.partitions.values() if p.leader >= 0 and p.error is None)
        if seen == TOTAL:
            return time.monotonic() - t0
        time.sleep(0.2)
    raise AssertionError(f"only {seen} of {TOTAL} partitions led after {timeout} s")


def _read_all(b: BrokerProcess) -> dict[tuple[str, int], list[tuple[int, bytes]]]:
    """Every record of every partition, from the beginning, with one consumer."""
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "startup-scale",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 50})
    try:
        c.assign([TopicPartition(t, p, 0) for t in _topics() for p in range(PER_TOPIC)])
        out: dict[tuple[str, int], list[tuple[int, bytes]]] = {}
        got, deadline = 0, time.monotonic() + 120
        while got < 2 * TOTAL and time.monotonic() < deadline:
            for m in c.consume(2000, 1.0):
                assert m.error() is None, m.error()
                out.setdefault((m.topic(), m.partition()), []).append((m.offset(), m.value()))
                got += 1
        # and nothing more: no record past the expected log end offsets
        for m in c.consume(2000, 1.0):
            assert m.error() is None, m.error()
            out.setdefault((m.topic(), m.partition()), []).append((m.offset(), m.value()))
        return out
    finally:
        c.close()


def test_many_partitions_start_and_survive_sigkill(tmp_path) -> None:
    b = BrokerProcess(tmp_path, num_log_dirs=DIRS)
    _write_dirs(b)
    b.start(timeout=180)
    try:
        _wait_all_led(b)
        log_text = b.log()
        for d in b.log_dirs:
            assert f"log dir {d} open: {TOTAL // DIRS} partitions" in log_text

        # a second record to every partition, acknowledged by all replicas (this broker)
        acked: dict[tuple[str, int], int] = {}
        errors: list[str] = []

        def cb(err, msg) -> None:
            if err is None:
                acked[(msg.topic(), msg.partition())] = msg.offset()
            else:
                errors.append(str(err))

        p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 20,
                      "message.timeout.ms": 60_000})
        for t in _topics():
            for part in range(PER_TOPIC):
                p.produce(t, f"{t}-{part}-1".encode(), partition=part, on_delivery=cb)
            p.poll(0)
        assert p.flush(90) == 0
        assert not errors, errors[:5]
        assert len(acked) == TOTAL and set(acked.values()) == {1}

        b.kill()  # the whole process group: the next start recovers every partition
        wait_gone(b, 30)
        b._log.close()
        b.start(timeout=180)
        _wait_all_led(b)
        records = _read_all(b)
        assert len(records) == TOTAL
        for t in _topics():
            for part in range(PER_TOPIC):
                assert records[(t, part)] == [(0, f"{t}-{part}-0".encode()),
                                              (1, f"{t}-{part}-1".encode())], (t, part)
    finally:
        b.stop(timeout=120)
        b.kill()
