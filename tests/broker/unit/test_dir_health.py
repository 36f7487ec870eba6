"""dir_health: which errors take a log dir offline, and the rate-limited log of the rest."""

from __future__ import annotations

import errno
import logging

from appliance.broker.disk.dir_health import ThrottledLog, io_errno, is_dead_disk
from appliance.errors import KafkaStorageError


def _storage_error(code: int) -> KafkaStorageError:
    try:
        try:
            raise OSError(code, "boom")
        except OSError as e:
            raise KafkaStorageError("write to /d/t-0/0.log failed") from e
    except KafkaStorageError as e:
        return e


def test_dead_and_full_disks_are_told_apart_through_the_storage_error():
    assert is_dead_disk(OSError(errno.EIO, "x")) and is_dead_disk(_storage_error(errno.EROFS))
    assert not is_dead_disk(_storage_error(errno.ENOSPC))
    assert io_errno(_storage_error(errno.ENOSPC)) == errno.ENOSPC
    assert io_errno(KafkaStorageError("no cause")) is None
    assert not is_dead_disk(ValueError("not I/O"))


def test_throttled_log_says_it_once_then_counts(caplog):
    t = ThrottledLog(interval_s=3600)
    with caplog.at_level(logging.WARNING, logger="appliance.disk"):
        assert t(logging.WARNING, "full", "log dir %s is full", "/d1")
        for _ in range(500):
            assert not t(logging.WARNING, "full", "log dir %s is full", "/d1")
        assert t(logging.WARNING, "other", "log dir %s: other", "/d1")  # another key: its own line
    assert [r.getMessage() for r in caplog.records] == ["log dir /d1 is full", "log dir /d1: other"]
    t.interval_s = 0.0  # the interval has passed: the next line carries the count
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="appliance.disk"):
        assert t(logging.WARNING, "full", "log dir %s is full", "/d1")
    assert "500 more times" in caplog.records[0].getMessage()
