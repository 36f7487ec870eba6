"""The failing-file-system harness itself: an image fills to ENOSPC, a shutdown turns every I/O
into EIO, and a remount brings back what was fsynced before."""

from __future__ import annotations

import errno
import os

import pytest

from tests.faults.loopfs import one_loop_disk


@pytest.fixture
def disk(tmp_path):
    with one_loop_disk(tmp_path, 16) as d:
        yield d


def test_fill_shutdown_and_remount(disk):
    kept = disk.mount / "kept"
    with open(kept, "wb") as f:
        f.write(b"x" * 4096)
        os.fsync(f.fileno())
    disk.fill()
    with pytest.raises(OSError) as full:
        with open(disk.mount / "more", "wb") as f:
            f.write(b"y" * (1 << 20))
            os.fsync(f.fileno())
    assert full.value.errno == errno.ENOSPC
    disk.free_filler()
    assert disk.free_bytes() > 8 << 20

    disk.shutdown()
    with pytest.raises(OSError) as dead:
        (disk.mount / "after").write_bytes(b"z")
    assert dead.value.errno == errno.EIO
    disk.unmount()
    disk.mount_again()
    assert kept.read_bytes() == b"x" * 4096
    assert not (disk.mount / "after").exists()
