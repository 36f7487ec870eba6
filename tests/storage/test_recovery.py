"""Crash recovery: damaged files are cut back to exactly the last valid batch."""

from __future__ import annotations

import logging
import os
import random

import pytest

from .conftest import all_records, batch, cfg, open_log

N_BATCHES = 40


def _fill(log_path, config=None):
    lg = open_log(log_path, config)
    ends = []
    for i in range(N_BATCHES):
        lg.append(batch(n=3, ts=1000 + i, value_size=60))
        ends.append(lg.active_segment.size)
    lg.close()  # files as a crash would leave them: no clean-shutdown marker is involved here
    return ends


def _log_file(log_path, base=0):
    return os.path.join(log_path, f"{base:020d}.log")


def _reopen_and_check(log_path, expect_batches, caplog=None):
    lg = open_log(log_path, clean_shutdown=False)
    assert lg.log_end_offset == 3 * expect_batches
    assert [r.offset for r in all_records(lg)] == list(range(3 * expect_batches))
    # appendable at the right offset
    info = lg.append(batch(n=2))
    assert info.first_offset == 3 * expect_batches
    assert [r.offset for r in all_records(lg)][-2:] == [info.first_offset, info.first_offset + 1]
    lg.close()
    return lg


def test_truncated_mid_batch(log_path, caplog):
    ends = _fill(log_path)
    with open(_log_file(log_path), "r+b") as f:
        f.truncate(ends[-1] - 17)
    with caplog.at_level(logging.WARNING):
        _reopen_and_check(log_path, N_BATCHES - 1)
    assert "partial batch" in caplog.text and "00000000000000000000.log" in caplog.text


def test_garbage_after_last_batch(log_path, caplog):
    ends = _fill(log_path)
    with open(_log_file(log_path), "ab") as f:
        f.write(random.Random(1).randbytes(700))
    with caplog.at_level(logging.WARNING):
        _reopen_and_check(log_path, N_BATCHES)
    assert os.path.getsize(_log_file(log_path)) > ends[-1]  # the new batch went after the cut
    assert "cut 700 bytes" in caplog.text


def test_flipped_byte_in_last_batch(log_path, caplog):
    ends = _fill(log_path)
    with open(_log_file(log_path), "r+b") as f:
        f.seek(ends[-1] - 5)
        b = f.read(1)
        f.seek(ends[-1] - 5)
        f.write(bytes([b[0] ^ 0x40]))
    with caplog.at_level(logging.WARNING):
        _reopen_and_check(log_path, N_BATCHES - 1)
    assert "CRC" in caplog.text


def test_zero_filled_tail(log_path):
    _fill(log_path)
    with open(_log_file(log_path), "ab") as f:
        f.write(bytes(8192))
    _reopen_and_check(log_path, N_BATCHES)


def test_zero_filled_inside_last_batches(log_path):
    # The inode grew but the last blocks never reached the disk: they read back as zeros.
    ends = _fill(log_path)
    with open(_log_file(log_path), "r+b") as f:
        f.seek(ends[-4] + 3)
        f.write(bytes(ends[-1] - ends[-4] - 3))
    _reopen_and_check(log_path, N_BATCHES - 3)


@pytest.mark.parametrize("which", [".index", ".timeindex"])
def test_missing_index_rebuilt(log_path, which, caplog):
    _fill(log_path)
    idx = os.path.join(log_path, f"{0:020d}{which}")
    before = open(idx, "rb").read()
    os.unlink(idx)
    with caplog.at_level(logging.WARNING):
        lg = open_log(log_path, clean_shutdown=True)
    assert "rebuilt" in caplog.text
    assert [r.offset for r in all_records(lg)] == list(range(3 * N_BATCHES))
    lg.close()
    assert open(idx, "rb").read() == before  # rebuilt identically


def test_corrupt_index_rebuilt(log_path):
    _fill(log_path)
    idx = os.path.join(log_path, f"{0:020d}.index")
    good = open(idx, "rb").read()
    with open(idx, "wb") as f:
        f.write(random.Random(7).randbytes(len(good)))
    lg = open_log(log_path, clean_shutdown=True)
    for off in range(0, 3 * N_BATCHES, 5):
        assert lg.read(off, 1).first_offset == off - off % 3
    lg.close()
    assert open(idx, "rb").read() == good


def test_corruption_deletes_later_segments(log_path):
    b = batch(n=3, value_size=60)
    config = cfg(segment_bytes=len(b) * 4)
    lg = open_log(log_path, config)
    for i in range(12):
        lg.append(batch(n=3, ts=1000 + i, value_size=60))
    assert len(lg.segments()) == 3
    lg.close()
    with open(_log_file(log_path, 12), "r+b") as f:  # second segment, second batch
        f.seek(len(b) + 30)
        f.write(b"\xff\xff")
    lg = open_log(log_path, config, clean_shutdown=False)
    assert lg.log_end_offset == 15 and len(lg.segments()) == 2
    assert not os.path.exists(_log_file(log_path, 24))
    assert lg.append(batch(n=1)).first_offset == 15


def test_clean_shutdown_skips_the_scan_and_recovery_point_bounds_it(log_path):
    b = batch(n=3, value_size=60)
    config = cfg(segment_bytes=len(b) * 4)
    lg = open_log(log_path, config)
    for i in range(12):
        lg.append(batch(n=3, ts=1000 + i, value_size=60))
    lg.close()
    with open(_log_file(log_path, 0), "r+b") as f:  # damage the first segment's last batch
        f.seek(3 * len(b) + 40)
        f.write(b"\x00\x01")
    size = os.path.getsize(_log_file(log_path, 0))
    lg = open_log(log_path, config, clean_shutdown=True)
    lg.close()
    assert os.path.getsize(_log_file(log_path, 0)) == size  # trusted, not scanned
    lg = open_log(log_path, config, clean_shutdown=False, recovery_point=12)
    lg.close()
    assert os.path.getsize(_log_file(log_path, 0)) == size  # below the recovery point
    lg = open_log(log_path, config, clean_shutdown=False, recovery_point=0)
    assert os.path.getsize(_log_file(log_path, 0)) == 3 * len(b)
    assert lg.log_end_offset == 9 and len(lg.segments()) == 1


def test_vectorized_index_rebuild_matches_append_path(log_path):
    # Batches larger than index.interval.bytes take the vectorized rebuild; timestamps jump
    # around so the time index's "only when the max grows" rule is exercised.
    rnd = random.Random(3)
    config = cfg(index_interval_bytes=100, segment_index_bytes=8 * 1000)
    lg = open_log(log_path, config)
    for _ in range(300):
        lg.append(batch(n=2, ts=rnd.randrange(10_000), value_size=rnd.randrange(60, 200)))
    lg.close()
    names = [f"{0:020d}.index", f"{0:020d}.timeindex"]
    before = [open(os.path.join(log_path, n), "rb").read() for n in names]
    lg = open_log(log_path, config, clean_shutdown=False)
    lg.close()
    after = [open(os.path.join(log_path, n), "rb").read() for n in names]
    assert len(before[0]) == 299 * 8
    assert after == before
