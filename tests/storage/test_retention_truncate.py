"""Retention by time, size and log start offset; .deleted files; reads racing deletes; truncation."""

from __future__ import annotations

import os

from appliance.records.batch import decode_records

from .conftest import all_records, batch, cfg, open_log

B = batch(n=2, value_size=100)


def _log(log_path, clock, **kw):
    config = cfg(segment_bytes=len(B) * 2, **kw)
    lg = open_log(log_path, config, clock)
    for i in range(10):  # 5 segments of 2 batches; batch i has timestamp 1000*i
        lg.append(batch(n=2, value_size=100, ts=1000 * i))
    assert len(lg.segments()) == 5
    return lg


def _names(path):
    return sorted(os.listdir(path))


def test_retention_by_time(log_path, clock):
    lg = _log(log_path, clock, retention_ms=5000, file_delete_delay_ms=60_000)
    # segment k holds timestamps 2000k, 2000k+1000; expired when now - largest > 5000
    n = lg.apply_retention(9000)
    assert n == 2  # largest 1000 and 3000
    assert lg.log_start_offset == 8 and [s.base_offset for s in lg.segments()] == [8, 12, 16]
    deleted = [x for x in _names(log_path) if x.endswith(".deleted")]
    assert len(deleted) == 6
    assert lg.purge_deleted(clock.now + 59_999) == 0
    assert lg.purge_deleted(clock.now + 60_000) == 2
    assert not any(x.endswith(".deleted") for x in _names(log_path))


def test_retention_rolls_the_expired_active_segment(log_path, clock):
    lg = _log(log_path, clock, retention_ms=0)
    assert lg.apply_retention(10**9) == 5
    assert lg.log_start_offset == lg.log_end_offset == 20
    assert [s.base_offset for s in lg.segments()] == [20] and lg.active_segment.size == 0
    assert lg.append(batch()).first_offset == 20
    assert lg.apply_retention(10**9) == 0 or len(lg.segments()) == 1


def test_retention_by_size(log_path, clock):
    lg = _log(log_path, clock, retention_bytes=len(B) * 5)
    # Kafka deletes whole segments only while the rest stays >= retention.bytes: 10 -> 6 batches
    assert lg.apply_retention(0) == 2
    assert lg.size_bytes == len(B) * 6 and lg.log_start_offset == 8


def test_retention_by_log_start_offset(log_path, clock):
    lg = _log(log_path, clock)
    lg.high_watermark = lg.log_end_offset  # committed (a one-broker Partition's rule)
    lg.maybe_increment_log_start_offset(9)
    assert lg.apply_retention(0) == 2  # segments [0,4) and [4,8) are wholly below 9
    assert lg.log_start_offset == 9
    assert all_records(lg, 9)[0].offset == 9


def test_read_races_delete(log_path, clock):
    lg = _log(log_path, clock, retention_ms=0, file_delete_delay_ms=1000)
    held = lg.read(0, 1 << 20)
    segs_snapshot = lg.segments()
    expect = os.pread(held.fd, held.length, held.position)
    lg.apply_retention(10**9)
    assert not os.path.exists(held.path)  # renamed .deleted
    assert os.path.exists(held.path + ".deleted")
    # the slice's fd still reads the same bytes, and the old snapshot is intact
    assert os.pread(held.fd, held.length, held.position) == expect
    assert [r.offset for r in decode_records(expect)] == [0, 1, 2, 3]
    assert segs_snapshot[0].base_offset == 0 and len(segs_snapshot) == 5
    lg.purge_deleted(clock.now + 1000)
    assert not os.path.exists(held.path + ".deleted")


def test_truncate_to_inside_and_across_segments(log_path, clock):
    lg = _log(log_path, clock)
    lg.truncate_to(13)  # offset 13 is inside batch 12-13 -> the whole batch goes
    assert lg.log_end_offset == 12 and [s.base_offset for s in lg.segments()] == [0, 4, 8, 12]
    assert lg.active_segment.size == 0
    assert [r.offset for r in all_records(lg)] == list(range(12))
    assert lg.append(batch(n=2)).first_offset == 12
    lg.high_watermark = lg.log_end_offset
    lg.truncate_to(6)  # the high watermark comes down with the log end
    assert lg.log_end_offset == 6 and lg.high_watermark == 6
    assert lg.append(batch(n=1)).first_offset == 6
    lg.close()
    lg = open_log(log_path, lg.config, clock, clean_shutdown=False)
    assert [r.offset for r in all_records(lg)] == list(range(7))


def test_truncate_fully_and_start_at(log_path, clock):
    lg = _log(log_path, clock)
    lg.truncate_fully_and_start_at(100)
    assert (lg.log_start_offset, lg.log_end_offset, lg.high_watermark) == (100, 100, 100)
    assert lg.append(batch(n=1)).first_offset == 100
    assert [r.offset for r in all_records(lg, 100)] == [100]
