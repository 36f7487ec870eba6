"""Real failing file systems for tests: small ext4 images loop-mounted as log dirs, which a test
can fill (ENOSPC), kill the way a disk dies (an ext4 shutdown, after which every I/O on it
returns EIO), and bring back (unmount, mount again: the journal replays).

Needs root, mkfs.ext4 (e2fsprogs), mount/losetup and xfs_io (xfsprogs); ``loop_disks`` skips
with the reason when the machine cannot mount a loop device."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["LoopDisk", "loop_disks", "one_loop_disk", "cannot_mount_reason"]


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=60)


class LoopDisk:
    """One ext4 image file mounted (loop, autoclear) on ``mount``, which is used as a log dir."""

    def __init__(self, image: Path, mount: Path, size_mb: int) -> None:
        self.image, self.mount, self.size_mb = image, mount, size_mb
        self.mounted = False

    def create(self) -> LoopDisk:
        with open(self.image, "wb") as f:
            f.truncate(self.size_mb << 20)
        # no reserved blocks: root (the broker) sees ENOSPC exactly when the disk is full
        _run("mkfs.ext4", "-q", "-F", "-m", "0", "-E", "lazy_itable_init=0,lazy_journal_init=0",
             str(self.image))
        self.mount.mkdir(parents=True, exist_ok=True)
        self.mount_again()
        os.rmdir(self.mount / "lost+found")  # a log dir holds only partition dirs and checkpoints
        return self

    def mount_again(self) -> None:
        """Mount (again): after a shutdown the journal replays, as after a disk swap and fsck."""
        _run("mount", "-t", "ext4", "-o", "loop", str(self.image), str(self.mount))
        self.mounted = True

    def unmount(self) -> None:
        """Unmount even if the broker still holds files open (lazy: the mount goes at once,
        the file system when the last descriptor closes)."""
        if self.mounted:
            _run("umount", "-l", str(self.mount), check=False)
            self.mounted = False

    def shutdown(self) -> None:
        """Kill the file system like a dead disk: every later I/O on it fails with EIO.
        ``-f`` flushes the journal first, so what was fsynced before is on the image."""
        _run("xfs_io", "-x", "-c", "shutdown -f", str(self.mount))

    def fill(self, leave_bytes: int = 0) -> int:
        """Occupy the free space with a filler file, leaving about ``leave_bytes``; returns the
        bytes taken. ``free_filler`` gives them back."""
        st = os.statvfs(self.mount)
        n = max(0, st.f_bavail * st.f_frsize - leave_bytes)
        filler = self.mount / "filler.bin"
        # unbuffered: a write that meets ENOSPC (a broker writing beside us took the space
        # first) leaves nothing buffered for close() to fail on again outside the try below
        with open(filler, "ab", buffering=0) as f:
            chunk = b"\0" * (1 << 20)
            left = n
            try:
                while left > 0:
                    left -= f.write(chunk[:min(left, len(chunk))])
                os.fsync(f.fileno())
            except OSError:
                pass  # ENOSPC: as full as it gets
        return n

    def free_filler(self) -> None:
        (self.mount / "filler.bin").unlink(missing_ok=True)

    def free_bytes(self) -> int:
        st = os.statvfs(self.mount)
        return st.f_bavail * st.f_frsize


def cannot_mount_reason(workdir: Path) -> str | None:
    """None if this machine can loop-mount an ext4 image here, else why not."""
    if os.geteuid() != 0:
        return "loop-mounting ext4 images needs root"
    for tool in ("mkfs.ext4", "mount", "umount", "xfs_io"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (scripts/setup.sh installs it)"
    probe = LoopDisk(workdir / "probe.img", workdir / "probe", 8)
    try:
        probe.create()
    except (subprocess.CalledProcessError, OSError) as e:
        err = getattr(e, "stderr", "") or str(e)
        return f"cannot loop-mount an ext4 image: {err.strip()}"
    finally:
        probe.unmount()
        probe.image.unlink(missing_ok=True)
    return None


@contextmanager
def loop_disks(workdir: Path, count: int, size_mb: int | list[int] = 64) -> Iterator[list[LoopDisk]]:
    """``count`` fresh ext4 images (``size_mb`` each, or one size per disk) mounted on
    workdir/disk0.. (BrokerProcess's log dirs); always unmounted and deleted afterwards,
    whatever the test did to them."""
    sizes = size_mb if isinstance(size_mb, list) else [size_mb] * count
    disks = [LoopDisk(workdir / f"disk{i}.img", workdir / f"disk{i}", sizes[i]) for i in range(count)]
    try:
        for d in disks:
            d.create()
        yield disks
    finally:
        for d in disks:
            d.unmount()
            d.image.unlink(missing_ok=True)


@contextmanager
def one_loop_disk(workdir: Path, size_mb: int) -> Iterator[LoopDisk]:
    """One fresh ext4 image as :func:`loop_disks` makes them; the test is skipped, with the
    reason, on a machine that cannot mount one."""
    import pytest

    reason = cannot_mount_reason(workdir)
    if reason:
        pytest.skip(reason)
    with loop_disks(workdir, 1, size_mb) as (disk,):
        yield disk
