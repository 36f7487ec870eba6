"""The copy job of a replica move (replica_move._CopyJob): copies files byte for byte with the
kernel's copy calls, resumes a grown file from where it stopped, is paced by the throttle and
stops promptly when cancelled."""

from __future__ import annotations

import os
import threading
import time

import pytest

from appliance.broker.disk import replica_move as rm

MiB = 1 << 20


def _pace(rate: int = 1 << 62) -> rm._Pace:
    return rm._Pace(rate, threading.Event())


def test_a_file_is_copied_exactly_and_a_grown_log_from_where_it_stopped(tmp_path):
    src, dst = tmp_path / "a.log", tmp_path / "b.log"
    data = os.urandom(9 * MiB + 123)
    src.write_bytes(data)
    assert rm._copy_from(str(src), str(dst), 0, _pace()) == len(data)
    assert dst.read_bytes() == data
    more = os.urandom(5 * MiB)
    with open(src, "ab") as f:
        f.write(more)
    dst.write_bytes(dst.read_bytes()[:-7] + b"garbage")  # past ``start``: cut and rewritten
    assert rm._copy_from(str(src), str(dst), len(data) - 7, _pace()) == len(data) + len(more)
    assert dst.read_bytes() == data + more


def test_the_throttle_paces_and_a_cancel_stops_the_copy(tmp_path):
    src, dst = tmp_path / "a.log", tmp_path / "b.log"
    src.write_bytes(os.urandom(8 * MiB))
    done = threading.Event()

    def work(pace: rm._Pace) -> None:
        rm._copy_from(str(src), str(dst), 0, pace)
        done.set()

    job = rm._CopyJob(work, 2 * MiB, "test copy")  # 8 MiB at 2 MiB/s: ~4 s
    time.sleep(0.5)
    assert job.running and not done.is_set()
    copied = os.path.getsize(dst)
    assert 0 < copied < 8 * MiB
    t0 = time.monotonic()
    job.stop()
    assert time.monotonic() - t0 < 2.0  # the pacing sleep wakes on the cancel
    assert not done.is_set() and isinstance(job.error, rm._Cancelled)


def test_a_failed_copy_hands_its_error_over(tmp_path):
    def work(pace: rm._Pace) -> None:
        rm._copy_from(str(tmp_path / "missing.log"), str(tmp_path / "b.log"), 0, pace)

    job = rm._CopyJob(work, 1 << 62, "test copy")
    job.thread.join(10)
    assert not job.running
    with pytest.raises(FileNotFoundError):
        raise job.error
