"""Flush policy (flush.messages / flush.ms) and chunked write-back."""

from __future__ import annotations

import os

import pytest

from appliance.storage.flush import (
    ChunkedWriteback,
    choose_writeback_mode,
    flush_due,
    have_sync_file_range,
)

from .conftest import batch, cfg, open_log


def test_flush_messages_advances_recovery_point(log_path, clock):
    lg = open_log(log_path, cfg(flush_messages=6), clock)
    lg.append(batch(n=3))
    assert lg.recovery_point == 0
    lg.append(batch(n=3))  # 6 unflushed -> flushed by the append itself
    assert lg.recovery_point == 6


def test_flush_ms(log_path, clock):
    lg = open_log(log_path, cfg(flush_ms=1000), clock)
    lg.append(batch(n=3))
    lg.maybe_flush(clock.now + 999)
    assert lg.recovery_point == 0
    lg.maybe_flush(clock.now + 1000)
    assert lg.recovery_point == 3
    assert not flush_due(0, 0, 10**9, 1, 1)  # nothing unflushed: nothing to do


@pytest.mark.skipif(not have_sync_file_range(), reason="needs Linux sync_file_range")
def test_chunked_writeback_and_log_integration(tmp_path, log_path, clock):
    path = tmp_path / "f"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND)
    wb = ChunkedWriteback(4096)
    os.write(fd, b"x" * 4000)
    assert wb.after_append(fd, 4000) == 0
    os.write(fd, b"x" * 9000)
    assert wb.after_append(fd, 13000) == 3 and wb.started == 12288
    os.close(fd)
    lg = open_log(log_path, clock=clock, writeback_chunk_bytes=4096)
    for _ in range(20):
        lg.append(batch(n=3, value_size=500))
    assert lg.active_segment.writeback.started == lg.active_segment.size // 4096 * 4096


def test_choose_writeback_mode(tmp_path):
    assert choose_writeback_mode(str(tmp_path), "os")[0] == "os"
    mode, reason = choose_writeback_mode(str(tmp_path), "auto")
    assert mode in ("os", "writeback") and reason
    with pytest.raises(ValueError):
        choose_writeback_mode(str(tmp_path), "bogus")
