"""Process limits the broker raises for itself at start."""

from __future__ import annotations

import contextlib
import resource

__all__ = ["raise_open_files_limit"]


def raise_open_files_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit (every segment, index and socket is a
    descriptor; the default soft 1024 runs out near a few hundred partitions). (soft, hard) after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:  # the kernel refuses more than fs.nr_open
        target = soft
        with contextlib.suppress(OSError, ValueError), open("/proc/sys/fs/nr_open") as f:
            target = int(f.read())
    if target > soft:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)
