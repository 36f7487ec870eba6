"""Broker keys honoured end to end, on one real broker with small values: fetch.max.bytes,
offsets.topic.segment.bytes, log.flush.scheduler.interval.ms (with log.flush.interval.ms) and
replica.high.watermark.checkpoint.interval.ms (the checkpoint files in the log dir)."""

from __future__ import annotations

import os
import time

import pytest

from appliance.records.batch import build_batch, decode_records
from appliance.storage.checkpoint import read_checkpoint
from appliance.storage.log_dir import read_topic_properties
from tests.broker.clients import create_topic
from tests.broker.wire import RawConnection, fetch_body, produce_body
from tests.broker_process import BrokerProcess

pytestmark = pytest.mark.timeout(90)

FETCH_MAX = 4096
OFFSETS_SEGMENT = 1 << 20


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("keys"), overrides={
            "fetch.max.bytes": str(FETCH_MAX), "offsets.topic.segment.bytes": str(OFFSETS_SEGMENT),
            "offsets.topic.num.partitions": "1",
            "log.flush.interval.ms": "100", "log.flush.scheduler.interval.ms": "200",
            "log.flush.offset.checkpoint.interval.ms": "200",
            "replica.high.watermark.checkpoint.interval.ms": "200"}) as b:
        yield b


def _produce(c: RawConnection, topic: str, n: int, size: int) -> None:
    for i in range(n):
        r = c.request(0, 7, produce_body(topic, 0, build_batch([(b"k", bytes([65 + i]) * size)])))
        assert r.responses[0].partition_responses[0].error_code == 0


def test_fetch_max_bytes_bounds_every_response(broker):
    create_topic(broker.bootstrap, "bounded-fetch")
    with RawConnection(broker.port) as c:
        _produce(c, "bounded-fetch", 4, 1500)  # ~1.6 KB batches
        r = c.request(1, 11, fetch_body("bounded-fetch", 0, 0, max_bytes=10 << 20))
        got = list(decode_records(r.responses[0].partitions[0].records))
        assert 1 <= len(got) <= 2  # 4 batches asked for, the broker's 4 KiB holds two at most
        big = "big-first"
        create_topic(broker.bootstrap, big)
        _produce(c, big, 1, 10_000)  # a first batch over the bound still goes out whole
        r = c.request(1, 11, fetch_body(big, 0, 0, max_bytes=10 << 20))
        assert [len(x.value) for x in decode_records(r.responses[0].partitions[0].records)] == [10_000]


def test_offsets_topic_is_created_with_its_segment_bytes(broker):
    with RawConnection(broker.port) as c:
        deadline = time.monotonic() + 30
        while c.request(10, 2, {"key": "g", "key_type": 0}).error_code:  # creates the topic
            assert time.monotonic() < deadline
            time.sleep(0.2)
    props = read_topic_properties(os.path.join(broker.log_dirs[0], "__consumer_offsets-0"))
    assert props["segment.bytes"] == str(OFFSETS_SEGMENT) and props["cleanup.policy"] == "compact"


def test_flush_and_high_watermark_checkpoints_follow_their_intervals(broker):
    create_topic(broker.bootstrap, "flushed")
    with RawConnection(broker.port) as c:
        _produce(c, "flushed", 3, 100)
    root = broker.log_dirs[0]
    deadline = time.monotonic() + 20
    while True:
        # the log flusher flushes by log.flush.interval.ms, run every 200 ms; the recovery point
        # and high watermark checkpoints are written every 200 ms
        rp = read_checkpoint(os.path.join(root, "recovery-point-offset-checkpoint")).get(("flushed", 0))
        hw = read_checkpoint(os.path.join(root, "replication-offset-checkpoint")).get(("flushed", 0))
        if rp == 3 and hw == 3:
            break
        assert time.monotonic() < deadline, (rp, hw)
        time.sleep(0.1)


def test_offsets_load_in_steps_of_offsets_load_buffer_size(tmp_path):
    """offsets.load.buffer.size=1: a restarted broker loads __consumer_offsets one batch per
    step of its disk worker, and every group's committed offsets are back."""
    with BrokerProcess(tmp_path, overrides={"offsets.load.buffer.size": "1",
                                            "offsets.topic.num.partitions": "1"}) as b:
        create_topic(b.bootstrap, "t", partitions=2)
        want = {f"g{i}": {0: 10 * i + 1, 1: 10 * i + 2} for i in range(5)}
        with RawConnection(b.port) as c:
            deadline = time.monotonic() + 30
            while c.request(10, 2, {"key": "g0", "key_type": 0}).error_code:
                assert time.monotonic() < deadline
                time.sleep(0.2)
            for group, offsets in want.items():
                for p, off in offsets.items():  # one commit (one batch) per partition
                    r = c.request(8, 3, {"group_id": group, "generation_id_or_member_epoch": -1,
                                         "member_id": "", "retention_time_ms": -1, "topics": [
                                             {"name": "t", "partitions": [
                                                 {"partition_index": p, "committed_offset": off,
                                                  "committed_metadata": ""}]}]})
                    assert r.topics[0].partitions[0].error_code == 0
        b.stop()
        b.start()
        with RawConnection(b.port) as c:
            for group, offsets in want.items():
                deadline = time.monotonic() + 30
                while True:
                    r = c.request(9, 3, {"group_id": group, "topics": [
                        {"name": "t", "partition_indexes": [0, 1]}]})
                    if r.error_code == 0:
                        break
                    assert time.monotonic() < deadline  # COORDINATOR_LOAD_IN_PROGRESS meanwhile
                    time.sleep(0.1)
                assert {p.partition_index: p.committed_offset for p in r.topics[0].partitions} == offsets


@pytest.mark.timeout(150)
def test_expired_offsets_go_at_the_retention_check_interval(tmp_path):
    """offsets.retention.minutes=1 with offsets.retention.check.interval.ms=500: an empty
    group's committed offset is gone a minute after the commit, not at the default check ten
    minutes on (a minute-long test: retention counts in whole minutes)."""
    with BrokerProcess(tmp_path, overrides={"offsets.retention.minutes": "1",
                                            "offsets.retention.check.interval.ms": "500",
                                            "offsets.topic.num.partitions": "1"}) as b:
        create_topic(b.bootstrap, "t")
        with RawConnection(b.port) as c:
            deadline = time.monotonic() + 30
            while c.request(10, 2, {"key": "g", "key_type": 0}).error_code:
                assert time.monotonic() < deadline
                time.sleep(0.2)
            r = c.request(8, 3, {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "",
                                 "retention_time_ms": -1, "topics": [{"name": "t", "partitions": [
                                     {"partition_index": 0, "committed_offset": 7,
                                      "committed_metadata": ""}]}]})
            assert r.topics[0].partitions[0].error_code == 0
            committed = time.monotonic()

            def offset() -> int:
                f = c.request(9, 3, {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0]}]})
                return f.topics[0].partitions[0].committed_offset

            while offset() == 7:
                assert time.monotonic() - committed < 75, "not expired a minute after the commit"
                time.sleep(0.5)
            assert time.monotonic() - committed >= 59  # not before offsets.retention.minutes
