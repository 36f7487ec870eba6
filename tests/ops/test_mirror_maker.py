"""`appliance mirror-maker` between two real brokers: 1,000,000 keyed records mirrored with the
same per-key order, a SIGKILL of the mirror maker midway and a restart lose nothing; its
Prometheus metrics scraped and checked against what was mirrored."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import defaultdict

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.broker.clients import create_topic
from tests.broker_process import BrokerProcess
from tests.ops.procs import appliance, free_port

N = 1_000_000
KEYS = 1000
PARTS = 4


@pytest.fixture
def two_brokers(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "dst").mkdir()
    # the mirror's group starts at once, without the 3 s wait for more members (Kafka's own
    # test brokers set 0 too)
    fast_groups = {"group.initial.rebalance.delay.ms": "0"}
    with BrokerProcess(tmp_path / "src", overrides=fast_groups) as src, BrokerProcess(tmp_path / "dst") as dst:
        yield src, dst


def _end_offsets(bootstrap: str, topic: str, parts: int = PARTS) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe"})
    try:
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(parts))
    except Exception:
        return 0  # not created yet
    finally:
        c.close()


def _committed(bootstrap: str, topic: str, group: str, parts: int = PARTS) -> int:
    """The group's committed offsets summed (OffsetFetch; the probe does not join the group)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return sum(max(tp.offset, 0) for tp in c.committed([TopicPartition(topic, p) for p in range(parts)],
                                                           timeout=10))
    except Exception:
        return 0
    finally:
        c.close()


def _start_mm(tmp_path, src, dst, *extra: str) -> subprocess.Popen:
    # a short session: the killed member's partitions go to its successor after 6 s, not 45
    (tmp_path / "consumer.properties").write_text(
        f"bootstrap.servers={src.bootstrap}\ngroup.id=mirror\nsession.timeout.ms=6000\n")
    (tmp_path / "producer.properties").write_text(f"bootstrap.servers={dst.bootstrap}\n")
    return subprocess.Popen(
        [sys.executable, "-m", "appliance.cli.main", "mirror-maker",
         "--consumer.config", str(tmp_path / "consumer.properties"),
         "--producer.config", str(tmp_path / "producer.properties"),
         "--whitelist", "mirror.*", "--offset.commit.interval.ms", "1000", "--report.interval.ms", "2000",
         *extra],
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


def _scrape(port: int) -> dict[tuple[str, tuple], float]:
    """name, sorted labels -> value, from the real endpoint."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_mirror_maker_metrics_count_what_was_mirrored(tmp_path, two_brokers):
    src, dst = two_brokers
    n, parts = 3000, 2
    create_topic(src.bootstrap, "mirror-a", partitions=parts)
    create_topic(src.bootstrap, "mirror-b", partitions=parts)
    sizes = {"mirror-a": 0, "mirror-b": 0}
    p = Producer({"bootstrap.servers": src.bootstrap, "linger.ms": 5})
    for i in range(n):
        topic = "mirror-a" if i % 3 else "mirror-b"
        key, value = b"k%d" % (i % 50), b"v" * (i % 17)
        sizes[topic] += len(key) + len(value)
        p.produce(topic, value=value, key=key)
    assert p.flush(60) == 0
    counts = {"mirror-a": n - (n + 2) // 3, "mirror-b": (n + 2) // 3}
    port = free_port()
    mm = _start_mm(tmp_path, src, dst, "--metrics.listener", f"127.0.0.1:{port}")
    try:
        def done() -> bool:
            return all(_committed(src.bootstrap, t, "mirror", parts) >= counts[t] for t in counts)
        _wait_for(done, 180, (tmp_path / "mm.log").read_text())
        time.sleep(2.5)  # the lag gauges are published once a second
        m = _scrape(port)
        for topic in counts:
            assert m[("kafka_connect_mirror_source_connector_record_count", (("topic", topic),))] \
                == counts[topic]
            assert m[("kafka_connect_mirror_source_connector_byte_count", (("topic", topic),))] \
                == sizes[topic]
            assert _end_offsets(dst.bootstrap, topic, parts) == counts[topic]
        assert m[("appliance_mirror_maker_offset_commits_total", ())] >= 1
        lags = {dict(labels)["topic"] + "-" + dict(labels)["partition"]: v for (name, labels), v in m.items()
                if name == "kafka_consumer_consumer_fetch_manager_metrics_records_lag"}
        assert set(lags) == {f"{t}-{q}" for t in counts for q in range(parts)}, lags
        assert all(v == 0 for v in lags.values()), lags
        mm.send_signal(signal.SIGTERM)
        assert mm.wait(60) == 0
    finally:
        if mm.poll() is None:
            os.killpg(mm.pid, signal.SIGKILL)
            mm.wait(30)


def test_mirror_maker_metrics_listener_on_a_taken_port(tmp_path):
    (tmp_path / "c.properties").write_text("bootstrap.servers=127.0.0.1:1\ngroup.id=g\n")
    (tmp_path / "p.properties").write_text("bootstrap.servers=127.0.0.1:1\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = appliance("mirror-maker", "--consumer.config", str(tmp_path / "c.properties"),
                      "--producer.config", str(tmp_path / "p.properties"), "--whitelist", "x",
                      "--metrics.listener", f"127.0.0.1:{port}")
    assert r.returncode == 1, r.stderr
    assert f"127.0.0.1:{port}" in r.stderr and "metrics.listener" in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
