"""LogDir: checkpoints, clean-shutdown marker, topic.properties, partition delete; checkpoints."""

from __future__ import annotations

import os

import pytest

from appliance.config import BrokerConfig, TopicConfig
from appliance.errors import InvalidTopicError, KafkaStorageError, TopicAlreadyExistsError
from appliance.storage.checkpoint import read_checkpoint, write_checkpoint
from appliance.storage.log_dir import CLEAN_SHUTDOWN_FILE, LogDir

from .conftest import Clock, all_records, batch


def test_checkpoint_round_trip_and_format(tmp_path):
    p = str(tmp_path / "recovery-point-offset-checkpoint")
    entries = {("a", 0): 5, ("my-topic", 12): 2**40, ("b.c_d", 3): 0}
    write_checkpoint(p, entries)
    assert read_checkpoint(p) == entries
    lines = open(p).read().splitlines()
    assert lines[:2] == ["0", "3"] and "my-topic 12 1099511627776" in lines
    assert read_checkpoint(str(tmp_path / "missing")) == {}
    with open(p, "w") as f:
        f.write("0\n2\na 0 1\n")
    with pytest.raises(KafkaStorageError):
        read_checkpoint(p)


def _broker(tmp_path, **kw):
    return BrokerConfig.load(overrides={"log.dirs": str(tmp_path / "d"),
                                        "log.writeback.mode": "os", **kw})


def test_create_append_close_reopen(tmp_path):
    bc = _broker(tmp_path)
    clock = Clock()
    d = LogDir.open(str(tmp_path / "d"), bc, now_ms=clock)
    assert not d.had_clean_shutdown
    topic_cfg = TopicConfig.from_overrides(bc, {"segment.bytes": "4096", "retention.ms": "1000"})
    lg = d.create_partition("my-topic", 3, topic_cfg)
    with pytest.raises(TopicAlreadyExistsError):
        d.create_partition("my-topic", 3, topic_cfg)
    with pytest.raises(InvalidTopicError):
        d.create_partition("bad/name", 0, topic_cfg)
    for _ in range(30):
        lg.append(batch(n=2, ts=clock.now))
    lg.high_watermark = lg.log_end_offset  # committed (a one-broker Partition's rule)
    assert len(lg.segments()) > 1
    d.close()
    root = str(tmp_path / "d")
    assert os.path.exists(os.path.join(root, CLEAN_SHUTDOWN_FILE))
    assert read_checkpoint(os.path.join(root, "recovery-point-offset-checkpoint")) == {("my-topic", 3): 60}
    assert read_checkpoint(os.path.join(root, "replication-offset-checkpoint")) == {("my-topic", 3): 60}
    assert read_checkpoint(os.path.join(root, "log-start-offset-checkpoint")) == {("my-topic", 3): 0}

    d = LogDir.open(root, bc, now_ms=clock)
    assert d.had_clean_shutdown and not os.path.exists(os.path.join(root, CLEAN_SHUTDOWN_FILE))
    lg = d.partitions[("my-topic", 3)]
    assert lg.config.segment_bytes == 4096 and lg.config.retention_ms == 1000  # topic.properties
    assert [r.offset for r in all_records(lg)] == list(range(60))
    # periodic retention deletes by time once the check interval has passed
    clock.now += 10_000
    d.run_periodic(clock.now + bc["log.retention.check.interval.ms"])
    assert lg.log_start_offset > 0
    d.close(clean=False)
    assert not os.path.exists(os.path.join(root, CLEAN_SHUTDOWN_FILE))


def test_delete_partition_and_leftover_delete_dirs(tmp_path):
    bc = _broker(tmp_path)
    root = str(tmp_path / "d")
    d = LogDir.open(root, bc)
    d.create_partition("t", 0, bc.topic_defaults()).append(batch())
    d.create_partition("t", 1, bc.topic_defaults())
    d.delete_partition("t", 0)
    assert ("t", 0) not in d.partitions
    assert "t-0" not in os.listdir(root)  # renamed at once: the name is free for a new topic
    assert d.remover.wait_idle(10)  # its files go on the remover's thread
    assert not any(n.startswith("t-0") for n in os.listdir(root))
    d.close()
    os.makedirs(os.path.join(root, "t-7.abc-delete"))
    d = LogDir.open(root, bc)
    assert set(d.partitions) == {("t", 1)}
    d.close()  # waits for the removals it queued
    assert not os.path.exists(os.path.join(root, "t-7.abc-delete"))


def test_topic_names_with_dashes_split_on_last(tmp_path):
    bc = _broker(tmp_path)
    root = str(tmp_path / "d")
    d = LogDir.open(root, bc)
    d.create_partition("a-b-c", 12, bc.topic_defaults())
    d.close()
    d = LogDir.open(root, bc)
    assert set(d.partitions) == {("a-b-c", 12)}
    d.close()


def test_unclean_open_recovers_from_checkpointed_recovery_point(tmp_path):
    bc = _broker(tmp_path)
    root = str(tmp_path / "d")
    d = LogDir.open(root, bc)
    lg = d.create_partition("t", 0, bc.topic_defaults())
    for _ in range(5):
        lg.append(batch())
    lg.flush()
    d.write_checkpoints()
    log_file = lg.segments()[0].path
    for p in d.partitions.values():
        p.close()  # crash: no marker
    with open(log_file, "ab") as f:
        f.write(b"\x00" * 100)
    d = LogDir.open(root, bc)
    assert not d.had_clean_shutdown
    assert d.partitions[("t", 0)].log_end_offset == 15
    assert os.path.getsize(log_file) == 15 // 3 * len(batch())
    d.close()


@pytest.mark.parametrize("scheduler_ms, flushed_at", [(1000, 1000), (None, None)])
def test_flush_ms_is_applied_every_flush_scheduler_interval(tmp_path, scheduler_ms, flushed_at):
    """log.flush.scheduler.interval.ms: how often the time rule (log.flush.interval.ms) is
    looked at; at its default (Long.MAX, Kafka's) never."""
    given = {"log.flush.interval.ms": "100"}
    if scheduler_ms is not None:
        given["log.flush.scheduler.interval.ms"] = str(scheduler_ms)
    bc = _broker(tmp_path, **given)
    clock = Clock()
    start = clock.now
    d = LogDir.open(str(tmp_path / "d"), bc, now_ms=clock)
    lg = d.create_partition("t", 0, bc.topic_defaults())
    lg.append(batch(n=2, ts=clock.now))
    for after in (100, 500, 999, 1000, 10_000_000):
        clock.now = start + after
        d.run_periodic(clock.now)
        assert lg.recovery_point == (2 if flushed_at is not None and after >= flushed_at else 0), after
    d.close()


def test_flush_interval_below_the_scheduler_warns(tmp_path, caplog):
    with caplog.at_level("WARNING"):
        _broker(tmp_path, **{"log.flush.interval.ms": "100"})
    assert "log.flush.scheduler.interval.ms: never" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):
        _broker(tmp_path, **{"log.flush.interval.ms": "100", "log.flush.scheduler.interval.ms": "50"})
    assert "log.flush" not in caplog.text


def test_high_watermark_checkpoint_has_its_own_interval(tmp_path):
    """replica.high.watermark.checkpoint.interval.ms writes replication-offset-checkpoint,
    independently of the recovery point's log.flush.offset.checkpoint.interval.ms."""
    bc = _broker(tmp_path, **{"replica.high.watermark.checkpoint.interval.ms": "1000",
                              "log.flush.offset.checkpoint.interval.ms": "60000"})
    clock = Clock()
    start = clock.now
    root = str(tmp_path / "d")
    d = LogDir.open(root, bc, now_ms=clock)
    lg = d.create_partition("t", 0, bc.topic_defaults())
    lg.append(batch(n=3, ts=clock.now))
    lg.high_watermark = 3
    hw_file = os.path.join(root, "replication-offset-checkpoint")
    rp_file = os.path.join(root, "recovery-point-offset-checkpoint")
    clock.now = start + 999
    d.run_periodic(clock.now)
    assert read_checkpoint(hw_file).get(("t", 0)) is None
    clock.now = start + 1000
    d.run_periodic(clock.now)
    assert read_checkpoint(hw_file) == {("t", 0): 3}
    assert read_checkpoint(rp_file).get(("t", 0)) is None  # its own, longer interval
    d.close()
