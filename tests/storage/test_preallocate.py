"""Blocks reserved ahead of the active segment (appliance/storage/preallocate.py), on real file
systems: a loop-mounted ext4 image (reserves; full), and an ext2 one, which cannot reserve.

With ``preallocate`` on, what must hold: the file's size is exactly the bytes appended (readers and recovery see nothing
else), the reservation goes at most WINDOW_BYTES past the end and is given back at roll and at
close, a log reopened without a close (a crash) reads every record back, and a file system that
cannot reserve or a full one appends (or refuses) exactly as without it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from appliance.config import TopicConfig
from appliance.errors import KafkaStorageError
from appliance.records.batch import build_batch, decode_records
from appliance.storage.log import PartitionLog
from appliance.storage.preallocate import BULK_APPEND_BYTES, NEVER, WINDOW_BYTES
from tests.faults.loopfs import cannot_mount_reason, one_loop_disk

BLOCK = 4096
VALUE = 1000
PER_BATCH = 100


@pytest.fixture
def ext4(tmp_path):
    with one_loop_disk(tmp_path, 128) as d:
        yield d


def _batch(i: int) -> bytes:
    return build_batch([(None, f"{i}:{k}".encode().ljust(VALUE, b".")) for k in range(PER_BATCH)],
                       base_timestamp=1_700_000_000_000)


def _open(path: Path, **cfg: object) -> PartitionLog:
    cfg.setdefault("preallocate", True)  # off by default (see the module)
    return PartitionLog.open(str(path), TopicConfig.defaults(**cfg))


def _allocated(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_size, st.st_blocks * 512


def _values(lg: PartitionLog) -> list[bytes]:
    out, offset = [], lg.log_start_offset
    while offset < lg.log_end_offset:  # a read stops at a segment's end
        records = decode_records(lg.read_bytes(offset, 1 << 30))
        out += [r.value for r in records]
        offset = records[-1].offset + 1
    return out


def _expected(n: int) -> list[bytes]:
    return [f"{i}:{k}".encode().ljust(VALUE, b".") for i in range(n) for k in range(PER_BATCH)]


def test_reserved_past_the_end_with_the_size_unchanged_and_given_back(ext4):
    lg = _open(ext4.mount / "t-0", segment_bytes=1 << 20)
    appended = 0
    for i in range(3):
        appended += len(b := _batch(i))
        lg.append(b)
    active = lg._segs[-1].log_path
    size, blocks = _allocated(active)
    assert size == appended == lg._segs[-1].size  # not a byte more than the batches
    # reserved at the first append, a window past it, and not again while appends fit
    assert lg._segs[-1].reserved_to == len(_batch(0)) + WINDOW_BYTES
    assert blocks >= lg._segs[-1].reserved_to - BLOCK
    assert blocks <= lg._segs[-1].reserved_to + BLOCK
    for i in range(3, 12):  # past segment.bytes: rolls
        lg.append(_batch(i))
    segs = list(lg._segs)
    assert len(segs) >= 2
    for s in segs[:-1]:  # rolled: given back to the block holding the last byte
        size, blocks = _allocated(s.log_path)
        assert blocks < size + BLOCK, (s.log_path, size, blocks)
    last = segs[-1].log_path
    assert _allocated(last)[1] > _allocated(last)[0] + BLOCK  # the new active one reserves
    lg.close()
    size, blocks = _allocated(last)
    assert blocks < size + BLOCK  # and at close
    lg = _open(ext4.mount / "t-0", segment_bytes=1 << 20)
    try:
        assert _values(lg) == _expected(12)
    finally:
        lg.close()


def test_off_reserves_nothing_for_small_appends(ext4):
    assert TopicConfig.defaults().preallocate is False  # Kafka's default, and ours
    lg = _open(ext4.mount / "t-0", preallocate=False)
    try:
        for i in range(30):  # 3 MB in appends of ~100 KB, under BULK_APPEND_BYTES
            lg.append(_batch(i))
        size, blocks = _allocated(lg._segs[-1].log_path)
        assert size == 30 * len(_batch(0)) and blocks < size + BLOCK
        assert lg._segs[-1].reserved_to == 0
    finally:
        lg.close()


def _bulk(i: int) -> bytes:
    """One batch of ~300 KB: a bulk producer's."""
    return build_batch([(None, f"bulk{i}:{k}".encode().ljust(VALUE, b".")) for k in range(3 * PER_BATCH)],
                       base_timestamp=1_700_000_000_000)


def test_off_reserves_ahead_of_bulk_appends_and_gives_back_when_idle(ext4):
    """preallocate off (the default): an append of BULK_APPEND_BYTES or more reserves a window,
    which the periodic idle check gives back once the segment took no append for a whole
    interval; a bulk append after that reserves again."""
    assert len(_bulk(0)) >= BULK_APPEND_BYTES > len(_batch(0))
    lg = _open(ext4.mount / "t-0", preallocate=False)
    try:
        active = lg._segs[-1]
        lg.append(_bulk(0))
        size, blocks = _allocated(active.log_path)
        assert size == len(_bulk(0)) == active.size  # the file's size is the bytes appended
        assert active.reserved_to == size + WINDOW_BYTES and blocks >= active.reserved_to - BLOCK
        lg.give_back_idle_reservation()  # first look: remembers the size
        lg.append(_batch(100))  # appended since: not idle
        lg.give_back_idle_reservation()
        assert _allocated(active.log_path)[1] >= active.reserved_to - BLOCK
        lg.give_back_idle_reservation()  # nothing appended since the last look: idle
        size, blocks = _allocated(active.log_path)
        assert active.reserved_to == 0 and blocks < size + BLOCK
        lg.append(_bulk(1))  # bulk again: a new window
        size, blocks = _allocated(active.log_path)
        assert active.reserved_to == size + WINDOW_BYTES and blocks >= active.reserved_to - BLOCK
    finally:
        lg.close()
    lg = _open(ext4.mount / "t-0", preallocate=False)
    try:
        expected = [f"bulk0:{k}".encode().ljust(VALUE, b".") for k in range(3 * PER_BATCH)]
        expected += [f"100:{k}".encode().ljust(VALUE, b".") for k in range(PER_BATCH)]
        expected += [f"bulk1:{k}".encode().ljust(VALUE, b".") for k in range(3 * PER_BATCH)]
        assert _values(lg) == expected
    finally:
        lg.close()


def test_reopened_without_a_close_reads_every_record(ext4):
    """A crash: the reservation is still there, the size is what was written; recovery reads
    exactly the batches, and the next roll gives the blocks back."""
    lg = _open(ext4.mount / "t-0", segment_bytes=1 << 20)
    for i in range(4):
        lg.append(_batch(i))
    lg.flush()
    path = lg._segs[-1].log_path
    assert _allocated(path)[1] > _allocated(path)[0] + BLOCK  # reserved when it "crashed"
    again = _open(ext4.mount / "t-0", segment_bytes=1 << 20)  # the first one is never closed
    try:
        assert again.log_end_offset == 4 * PER_BATCH
        assert _values(again) == _expected(4)
        again.roll()
        size, blocks = _allocated(path)
        assert blocks < size + BLOCK
    finally:
        again.close()


def test_full_disk_refuses_as_without_it_and_keeps_what_was_appended(ext4):
    lg = _open(ext4.mount / "t-0")
    try:
        ext4.fill(leave_bytes=600 << 10)  # less than a window: the reservation fails first
        done = 0
        with pytest.raises(KafkaStorageError):
            for i in range(1000):
                lg.append(_batch(i))
                done += 1
        assert done > 0
        ext4.free_filler()
        lg.append(_batch(done))  # room again: appends go on
    finally:
        lg.close()
    lg = _open(ext4.mount / "t-0")
    try:
        assert _values(lg) == _expected(done + 1)
    finally:
        lg.close()


@pytest.fixture
def ext2(tmp_path):
    """An ext2 image (no extents): fallocate answers EOPNOTSUPP there."""
    reason = cannot_mount_reason(tmp_path)
    if reason:
        pytest.skip(reason)
    image, mount = tmp_path / "ext2.img", tmp_path / "ext2"
    with open(image, "wb") as f:
        f.truncate(128 << 20)  # room for a window and FREE_MARGIN_BYTES: the call is made
    subprocess.run(["mkfs.ext2", "-q", "-F", str(image)], check=True, capture_output=True, timeout=60)
    mount.mkdir()
    subprocess.run(["mount", "-t", "ext2", "-o", "loop", str(image), str(mount)], check=True,
                   capture_output=True, timeout=60)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True, timeout=60)
        image.unlink(missing_ok=True)


def test_a_file_system_that_cannot_reserve_is_written_as_before(ext2):
    lg = _open(ext2 / "t-0")
    try:
        for i in range(3):
            lg.append(_batch(i))
        assert lg._segs[-1].reserve_at == NEVER  # asked once, not again
        size, blocks = _allocated(lg._segs[-1].log_path)
        assert blocks < size + 2 * BLOCK  # ext2 counts an indirect block too
        assert _values(lg) == _expected(3)
    finally:
        lg.close()
