"""`appliance mirror-maker` between two real brokers: 1,000,000 keyed records mirrored with the
same per-key order, a SIGKILL of the mirror maker midway and a restart lose nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import defaultdict

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.broker.clients import create_topic
from tests.broker_process import BrokerProcess

N = 1_000_000
KEYS = 1000
PARTS = 4


@pytest.fixture
def two_brokers(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "dst").mkdir()
    with BrokerProcess(tmp_path / "src") as src, BrokerProcess(tmp_path / "dst") as dst:
        yield src, dst


def _end_offsets(bootstrap: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe"})
    try:
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTS))
    except Exception:
        return 0  # not created yet
    finally:
        c.close()


def _committed(bootstrap: str, topic: str, group: str) -> int:
    """The group's committed offsets summed (OffsetFetch; the probe does not join the group)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return sum(max(tp.offset, 0) for tp in c.committed([TopicPartition(topic, p) for p in range(PARTS)],
                                                           timeout=10))
    except Exception:
        return 0
    finally:
        c.close()


def _start_mm(tmp_path, src, dst) -> subprocess.Popen:
    # a short session: the killed member's partitions go to its successor after 6 s, not 45
    (tmp_path / "consumer.properties").write_text(
        f"bootstrap.servers={src.bootstrap}\ngroup.id=mirror\nsession.timeout.ms=6000\n")
    (tmp_path / "producer.properties").write_text(f"bootstrap.servers={dst.bootstrap}\n")
    return subprocess.Popen(
        [sys.executable, "-m", "appliance.cli.main", "mirror-maker",
         "--consumer.config", str(tmp_path / "consumer.properties"),
         "--producer.config", str(tmp_path / "producer.properties"),
         "--whitelist", "mirror.*", "--offset.commit.interval.ms", "1000", "--report.interval.ms", "2000"],
        stdout=subprocess.DEVNULL, stderr=open(tmp_path / "mm.log", "ab"), start_new_session=True)


def _wait_for(pred, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, what
        time.sleep(0.5)


def test_mirror_one_million_keyed_records_with_a_kill(tmp_path, two_brokers):
    src, dst = two_brokers
    create_topic(src.bootstrap, "mirror-me", partitions=PARTS)
    p = Producer({"bootstrap.servers": src.bootstrap, "linger.ms": 20, "batch.num.messages": 10000,
                  "queue.buffering.max.messages": N, "partitioner": "murmur2_random"})
    for i in range(N):  # value = the record's sequence number within its key
        p.produce("mirror-me", value=b"%d" % (i // KEYS), key=b"k%d" % (i % KEYS))
        if i % 100_000 == 0:
            p.poll(0)
    assert p.flush(120) == 0
    mm = _start_mm(tmp_path, src, dst)
    try:
        _wait_for(lambda: _end_offsets(dst.bootstrap, "mirror-me") >= N // 4, 180, "mirroring did not start")
        mm.send_signal(signal.SIGKILL)
        mm.wait(30)
        killed_at = _end_offsets(dst.bootstrap, "mirror-me")
        assert killed_at < N, "the kill came too late to test anything"
        mm = _start_mm(tmp_path, src, dst)
        # done when the group has committed everything: commits follow the target's acknowledgements
        _wait_for(lambda: _committed(src.bootstrap, "mirror-me", "mirror") >= N, 300, "mirroring did not finish")
        mm.send_signal(signal.SIGTERM)
        assert mm.wait(60) == 0
    finally:
        if mm.poll() is None:
            os.killpg(mm.pid, signal.SIGKILL)
            mm.wait(30)
    # read the whole target topic back
    c = Consumer({"bootstrap.servers": dst.bootstrap, "group.id": "verify", "enable.auto.commit": False,
                  "enable.partition.eof": True})
    c.assign([TopicPartition("mirror-me", q, 0) for q in range(PARTS)])
    seqs: dict[bytes, list[int]] = defaultdict(list)
    where: dict[bytes, set[int]] = defaultdict(set)
    eof: set[int] = set()
    total = 0
    deadline = time.monotonic() + 180
    while len(eof) < PARTS:
        assert time.monotonic() < deadline
        for m in c.consume(10000, 1.0):
            if m.error():
                eof.add(m.partition())
                continue
            seqs[m.key()].append(int(m.value()))
            where[m.key()].add(m.partition())
            total += 1
    c.close()
    assert len(seqs) == KEYS
    for key, got in seqs.items():
        assert len(where[key]) == 1, key  # a key stays on one partition
        # per key: the source order, where a restart may only replay a suffix it already sent
        firsts = list(dict.fromkeys(got))
        assert firsts == list(range(N // KEYS)), key
        for a, b in zip(got, got[1:], strict=False):
            assert b == a + 1 or b <= a, (key, a, b)
    dupes = total - N
    assert 0 <= dupes < N // 2
    print(f"mirrored {N} records, {dupes} duplicates after the kill at {killed_at}")
