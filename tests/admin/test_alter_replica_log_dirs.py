"""AlterReplicaLogDirs (34): a partition moves from one disk worker's log dir to another's while
a confluent-kafka producer (idempotent) and consumer carry on: every acknowledged record is read
exactly once, in order; the files end up on the other disk and the old ones are gone. Bad
destinations (not a log dir, a full file system: a real 8 MiB ext4 loop mount) are refused with
Kafka's errors and the partition stays where it was, intact."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import warnings

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTP

from appliance.errors import ErrorCode
from tests.broker.clients import create_topic
from tests.broker.wire import RawConnection
from tests.broker_process import BrokerProcess
from tests.polling import left_after

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaAdminClient
    from kafka.structs import TopicPartitionReplica


def _holder(log_dirs: list[str], topic: str) -> list[str]:
    return [d for d in log_dirs if os.path.isdir(os.path.join(d, f"{topic}-0"))]


def _leftovers(log_dirs: list[str]) -> list[str]:
    return [n for d in log_dirs for n in os.listdir(d) if n.endswith(("-future", "-delete"))]


def _leftovers_after(log_dirs: list[str], timeout: float = 10) -> list[str]:
    """The leftovers once the log dirs' remover threads had ``timeout`` seconds to remove them
    (a move's last step queues the retired directory there, an abort the future one)."""
    return left_after(lambda: _leftovers(log_dirs), timeout)


def _read_all(bootstrap: str, topic: str, want: int, timeout: float = 120) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-check", "enable.auto.commit": False})
    c.assign([CTP(topic, 0, 0)])
    got: list[int] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < want and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and not m.error():
                got.append(int(m.value()[:8]))
    finally:
        c.close()
    return got


def test_move_under_load_loses_and_duplicates_nothing(tmp_path):
    with BrokerProcess(tmp_path, num_log_dirs=2) as b:
        topic = "mv-load"
        create_topic(b.bootstrap, topic, 1, {"segment.bytes": "200000"})
        (src,) = _holder(b.log_dirs, topic)
        dst = next(d for d in b.log_dirs if d != src)

        acked: list[int] = []
        failed: list[str] = []
        stop = threading.Event()

        def produce() -> None:
            p = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True, "linger.ms": 2})

            def done(err, msg) -> None:
                if err is None:
                    acked.append(int(msg.value()[:8]))
                else:
                    failed.append(str(err))

            i = 0
            while not stop.is_set():
                for _ in range(50):
                    p.produce(topic, b"%08d" % i + b"v" * 200, partition=0, on_delivery=done)
                    i += 1
                p.poll(0)
                time.sleep(0.005)
            p.flush(120)

        live: list[int] = []
        produced = threading.Event()  # the producer has flushed: ``acked`` is final

        def consume() -> None:
            c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "mv-live", "enable.auto.commit": False})
            c.assign([CTP(topic, 0, 0)])
            deadline = float("inf")
            while time.monotonic() < deadline:
                if produced.is_set():
                    if len(live) >= len(acked):
                        break
                    deadline = min(deadline, time.monotonic() + 120)
                m = c.poll(0.5)
                if m is not None and not m.error():
                    live.append(int(m.value()[:8]))
            c.close()

        producer, consumer = threading.Thread(target=produce), threading.Thread(target=consume)
        producer.start()
        consumer.start()
        try:
            while len(acked) < 20000:  # a few segments on disk before the move
                time.sleep(0.1)
            admin = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=120000)
            try:
                resp = admin.alter_replica_log_dirs({TopicPartitionReplica(topic, 0, 0): dst})
            finally:
                admin.close()
            moved_at = len(acked)
            while len(acked) < moved_at + 20000:  # and carry on after it
                time.sleep(0.1)
        finally:
            stop.set()
            producer.join(180)
            produced.set()
            consumer.join(180)
        assert [e.__name__ for e in resp.values()] == ["NoError"], resp

        assert not failed, failed[:3]
        assert sorted(acked) == list(range(len(acked)))
        assert live == list(range(len(acked)))  # the live consumer: exactly once, in order
        assert _read_all(b.bootstrap, topic, len(acked)) == list(range(len(acked)))

        # the files moved: all segments on the destination, nothing left on the source
        assert _holder(b.log_dirs, topic) == [dst]
        segs = [n for n in os.listdir(os.path.join(dst, f"{topic}-0")) if n.endswith(".log")]
        assert len(segs) > 3
        assert not _leftovers_after(b.log_dirs)

        # the move survives a restart (SIGKILL): the partition opens from its new log dir
        b.kill()
        b.start()
        assert _holder(b.log_dirs, topic) == [dst]
        assert _read_all(b.bootstrap, topic, len(acked)) == list(range(len(acked)))


def _alter(port: int, path: str, topic: str, partition: int) -> int:
    with RawConnection(port, timeout=120) as conn:
        r = conn.request(34, 1, {"dirs": [{"path": path, "topics": [{"name": topic, "partitions": [partition]}]}]})
    return r.results[0].partitions[0].error_code


@pytest.fixture
def tiny_fs(tmp_path):
    """An 8 MiB ext4 file system, loop-mounted (we are root), removed afterwards."""
    image, mnt = tmp_path / "tiny.img", tmp_path / "tiny"
    mnt.mkdir()
    with open(image, "wb") as f:
        f.truncate(8 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True)
    subprocess.run(["mount", "-o", "loop", str(image), str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_bad_destinations_leave_the_partition_where_it_was(tmp_path, tiny_fs):
    small = str(tiny_fs / "disk")
    os.mkdir(small)
    dirs = [str(tmp_path / "disk0"), small]
    with BrokerProcess(tmp_path, overrides={"log.dirs": ",".join(dirs)}) as b:
        # a partition on the big disk larger than the small one
        for t in ("big-a", "big-b"):
            create_topic(b.bootstrap, t, 1)
        topic = next(t for t in ("big-a", "big-b") if _holder(dirs, t) == [dirs[0]])
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5})
        for i in range(12000):
            p.produce(topic, b"%08d" % i + b"z" * 1000, partition=0)
            if i % 1000 == 0:
                p.flush(30)
        assert p.flush(60) == 0

        assert _alter(b.port, small, topic, 0) == ErrorCode.KAFKA_STORAGE_ERROR  # full
        assert _alter(b.port, str(tmp_path / "elsewhere"), topic, 0) == ErrorCode.LOG_DIR_NOT_FOUND
        assert _alter(b.port, small, "no-such-topic", 0) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert _holder(dirs, topic) == [dirs[0]] and not _leftovers_after(dirs)
        assert not [n for n in os.listdir(small) if n.startswith(topic)]
        # intact and still written to
        p.produce(topic, b"%08d" % 12000 + b"z", partition=0)
        assert p.flush(30) == 0
        assert _read_all(b.bootstrap, topic, 12001) == list(range(12001))

        # the CLI says so on one line, exit 1
        r = subprocess.run([sys.executable, "-m", "appliance.cli.main", "alter-log-dirs", "--bootstrap-server",
                            b.bootstrap, "--topic", topic, "--partition", "0", "--to-dir", small],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 1 and "KAFKA_STORAGE_ERROR" in r.stderr and len(r.stderr.strip().splitlines()) == 1
