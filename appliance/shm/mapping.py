"""One POSIX shared-memory object mapped into this process: the create / attach / release /
unlink steps every shared structure in this package shares (the partition table, the rings,
the counters, the connection counts, the leadership area)."""

from __future__ import annotations

import contextlib
import mmap

import posix_ipc

__all__ = ["create_mapped", "attach_mapped", "release_mapped", "unlink_mapped"]


def create_mapped(name: str, size: int, mode: int = 0o600) -> tuple[posix_ipc.SharedMemory, mmap.mmap]:
    """Create ``name`` exclusively at ``size`` bytes (zeroed) and map it.
    Raises posix_ipc.ExistentialError when it exists."""
    shm = posix_ipc.SharedMemory(name, posix_ipc.O_CREX, mode=mode, size=size)
    return shm, mmap.mmap(shm.fd, size)


def attach_mapped(name: str) -> tuple[posix_ipc.SharedMemory, mmap.mmap]:
    """Map an existing ``name`` whole. Raises posix_ipc.ExistentialError when it is missing."""
    shm = posix_ipc.SharedMemory(name)
    return shm, mmap.mmap(shm.fd, shm.size)


def release_mapped(shm: posix_ipc.SharedMemory, buf: mmap.mmap) -> None:
    """Unmap and close the descriptor; safe to call twice (callers release their memoryviews
    into ``buf`` first: a mapping cannot close while views export it)."""
    with contextlib.suppress(Exception):
        buf.close()
    with contextlib.suppress(Exception):
        shm.close_fd()


def unlink_mapped(shm: posix_ipc.SharedMemory) -> None:
    """Remove the name (mappings stay valid until released); gone already is fine."""
    with contextlib.suppress(posix_ipc.ExistentialError):
        shm.unlink()
