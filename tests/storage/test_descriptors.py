"""Descriptors scale with partitions, not segments; running out of them gives a clear error.

Open descriptors are counted in /proc/self/fd (those pointing into the test's directory). The
EMFILE cases run in a child process that really exhausts its descriptors (RLIMIT_NOFILE lowered
with resource.setrlimit, then the rest opened), so the failure comes from the kernel.
"""

from __future__ import annotations

import os
import subprocess
import sys

from appliance.storage.log import PartitionLog
from appliance.storage.reader import LogReader
from tests.storage.conftest import all_records, batch, cfg, open_log


def fds_under(path: str) -> list[str]:
    """Targets of this process's descriptors that lie under ``path``."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(path):
            out.append(target)
    return out


def _many_segments(log_path: str, n_segments: int = 30) -> PartitionLog:
    lg = open_log(log_path, cfg(segment_bytes=1024))
    while len(lg.segments()) < n_segments:
        lg.append(batch(n=5, value_size=100))
    return lg


def _active_files(lg: PartitionLog) -> set[str]:
    return {os.path.realpath(p) for p in lg.active_segment.paths()}


def test_only_the_active_segment_holds_descriptors(log_path):
    lg = _many_segments(log_path)
    open_now = fds_under(log_path)
    assert set(open_now) <= _active_files(lg), open_now
    assert len(open_now) <= 5  # log + two indexes (+ their mappings)
    lg.close()
    assert fds_under(log_path) == []


def test_reopened_log_holds_only_the_active_segment_and_reads_old_ones(log_path):
    lg = _many_segments(log_path)
    expected = all_records(lg)
    lg.close()
    for clean in (True, False):  # clean open, and a full recovery scan of every segment
        lg = open_log(log_path, cfg(segment_bytes=1024), clean_shutdown=clean)
        assert len(lg.segments()) >= 30
        assert set(fds_under(log_path)) <= _active_files(lg)
        # reads of old segments open them again ...
        assert all_records(lg) == expected
        assert len(fds_under(log_path)) > 5
        # ... until they are idle
        assert lg.release_idle_segments(idle_ms=0) >= 29
        assert set(fds_under(log_path)) <= _active_files(lg)
        assert all_records(lg) == expected
        lg.close()
        assert fds_under(log_path) == []


def test_recently_read_segments_stay_open_for_their_slices(log_path):
    lg = _many_segments(log_path)
    held = lg.read(0, 1 << 20)
    data = os.pread(held.fd, held.length, held.position)
    assert lg.release_idle_segments() == 0  # read just now: its descriptor is still promised
    assert os.pread(held.fd, held.length, held.position) == data
    lg.close()


def test_released_segments_still_flush_truncate_and_expire(log_path, clock):
    lg = open_log(log_path, cfg(segment_bytes=1024, retention_ms=1000), clock)
    while len(lg.segments()) < 10:
        lg.append(batch(n=5, value_size=100, ts=clock.now))
    lg.flush()  # the released segments are fsynced through short-lived descriptors
    assert lg.recovery_point == lg.log_end_offset
    mid = lg.segments()[4].base_offset + 2
    lg.truncate_to(mid)  # a released segment becomes the active one again
    assert lg.log_end_offset <= mid
    lg.append(batch(n=5, value_size=100, ts=clock.now))
    assert [r.offset for r in all_records(lg)] == list(range(lg.log_end_offset))
    clock.now += 10_000
    assert lg.apply_retention(clock.now) >= 4
    lg.close()
    assert fds_under(log_path) == []


def test_reader_closes_idle_segments(log_path):
    lg = _many_segments(log_path)
    r = LogReader(log_path, retire_delay_s=0)
    assert r.read_bytes(0, 1 << 20)
    off = 0
    while off < lg.log_end_offset:  # touch every segment
        s = r.read(off, 1 << 20)
        off = s.segment_base + 10**6 if s is None else off + 5
    r.refresh()  # idle for 0 s: everything but the newest segment is closed
    mine = [t for t in fds_under(log_path) if t not in _active_files(lg)]
    assert len(mine) <= 3, mine  # the reader's newest segment: log + two indexes
    assert r.read_bytes(0, 1 << 20) == lg.read_bytes(0, 1 << 20)
    r.close()
    lg.close()


_EMFILE_CHILD = r"""
import os, resource, sys
from appliance.config import TopicConfig
from appliance.storage.log import PartitionLog
from appliance.errors import KafkaStorageError
from appliance.storage.segment import LogSegment

root, mode = sys.argv[1], sys.argv[2]
conf = TopicConfig.defaults(segment_index_bytes=4096, index_interval_bytes=256,
                            file_delete_delay_ms=0, segment_bytes=1024)

def count():
    # probe with fstat: listing /proc/self/fd would need a descriptor itself
    n = 0
    for fd in range(128):
        try:
            os.fstat(fd)
            n += 1
        except OSError:
            pass
    return n

def exhaust(leave):
    # open /dev/null until EMFILE, then give back `leave` descriptors
    held = []
    while True:
        try:
            held.append(os.open("/dev/null", os.O_RDONLY))
        except OSError:
            break
    for _ in range(leave):
        os.close(held.pop())
    return held

resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))
if mode == "partition":
    from appliance.config import BrokerConfig
    from appliance.storage.log_dir import LogDir
    d = LogDir.open(root, BrokerConfig.load(overrides={"log.dirs": root,
                                                       "log.writeback.mode": "os"}))
# warm up (lazy imports of numpy/numba need descriptors too), as a broker's start-up does
warm = PartitionLog.open(os.path.join(root, "warm-0"), conf)
warm.append(open(os.path.join(root, "batch"), "rb").read())
warm.read_bytes(0, 1 << 20)
warm.close()
PartitionLog.open(os.path.join(root, "warm-0"), conf).close()
if mode == "segments":
    # a log with many segments opens (and is recovered) within a small limit
    lg = PartitionLog.open(os.path.join(root, "t-0"), conf, clean_shutdown=False)
    print("opened", len(lg.segments()), "segments", count(), "fds")
    lg.close()
    sys.exit(0)
for leave in range(0, 12):
    held = exhaust(leave)
    before = count()
    try:
        if mode == "create":
            LogSegment.open(root, 10**6 + leave, conf, create=True)
        elif mode == "partition":
            d.create_partition("new", leave, conf)
        else:
            PartitionLog.open(os.path.join(root, "t-0"), conf, clean_shutdown=False)
    except KafkaStorageError as e:
        assert count() == before, (leave, count(), before)  # nothing half-opened is left
        print("leave", leave, type(e).__name__, getattr(e, "errno", None), getattr(e, "path", None))
        print("message", e)
    else:
        print("leave", leave, "opened")
    for fd in held:
        os.close(fd)
"""


def _child(root: str, mode: str) -> str:
    with open(os.path.join(root, "batch"), "wb") as f:
        f.write(batch(n=5, value_size=100))
    p = subprocess.run([sys.executable, "-c", _EMFILE_CHILD, root, mode],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    assert "AttributeError" not in p.stderr
    return p.stdout


def test_a_log_of_many_segments_opens_within_a_small_open_file_limit(tmp_path):
    lg = open_log(str(tmp_path / "t-0"), cfg(segment_bytes=1024))
    while len(lg.segments()) < 300:  # more segments than the child's 128 descriptors
        lg.append(batch(n=5, value_size=100))
    lg.close()
    out = _child(str(tmp_path), "segments")
    assert "opened" in out and "segments" in out, out


def test_emfile_while_creating_a_segment_is_a_clear_error_and_leaves_nothing(tmp_path):
    out = _child(str(tmp_path), "create")
    lines = out.splitlines()
    # with no descriptor left the log file fails; with one, an index; with enough, it opens
    assert "leave 0 SegmentOpenError 24" in lines[0] and lines[0].endswith(".log"), out
    failed_paths = [ln.rsplit(" ", 1)[1] for ln in lines if ln.startswith("leave") and "Error" in ln]
    assert any(p.endswith(".index") or p.endswith(".timeindex") for p in failed_paths), out
    assert lines[-1].endswith("opened"), out
    assert all("out of file descriptors" in ln for ln in lines if ln.startswith("message")), out


def test_emfile_in_recovery_is_a_clear_error_not_an_attribute_error(tmp_path):
    lg = open_log(str(tmp_path / "t-0"), cfg(segment_bytes=1024))
    while len(lg.segments()) < 5:
        lg.append(batch(n=5, value_size=100))
    expected = all_records(lg)
    lg.close()
    out = _child(str(tmp_path), "recover")
    assert "leave 0 SegmentOpenError 24" in out, out
    assert out.splitlines()[-1].endswith("opened"), out
    # and nothing was damaged by the failed attempts
    lg = open_log(str(tmp_path / "t-0"), cfg(segment_bytes=1024))
    assert all_records(lg) == expected
    lg.close()


def test_emfile_while_creating_a_partition_leaves_no_half_made_partition(tmp_path):
    out = _child(str(tmp_path), "partition")
    lines = [ln for ln in out.splitlines() if ln.startswith("leave")]
    failed = [int(ln.split()[1]) for ln in lines if "Error" in ln]
    made = [int(ln.split()[1]) for ln in lines if ln.endswith("opened")]
    assert failed and made, out
    assert all("KafkaStorageError" in ln or "SegmentOpenError" in ln for ln in lines if "Error" in ln)
    # every failed partition left nothing on disk; every made one is whole
    dirs = sorted(n for n in os.listdir(tmp_path) if n.startswith("new-"))
    assert dirs == sorted(f"new-{p}" for p in made), (dirs, out)
    for p in made:
        assert os.path.exists(tmp_path / f"new-{p}" / f"{0:020d}.log")
