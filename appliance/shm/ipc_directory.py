"""The per-disk directory of IPC channels that local producers attach to.

Created by the supervisor with mode 0660, so only processes of the broker's user or group can
open it (or the channels). A producer claims a channel by taking an exclusive, non-blocking flock
on that channel's shared-memory object: the kernel releases it when the producer exits or is
killed, so a dead producer's channel is free for the next one without any clean-up protocol.
The claim number in the slot goes up on every claim; request ids carry it in their top 16 bits so
completions meant for a previous owner are recognised and dropped.
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
import struct

import posix_ipc

from appliance.shm.layout import (
    IPC_CHANNELS,
    IPC_DIR_HEADER,
    IPC_MAGIC,
    IPC_SLOT,
    LAYOUT_VERSION,
    ipc_channel_name,
    ipc_dir_name,
)
from appliance.shm.ring import Channel

__all__ = ["IpcDirectory", "ClaimedChannel", "IPC_MODE"]

IPC_MODE = 0o660  # the broker's user and group
_SLOT = IPC_SLOT.struct  # type: ignore[attr-defined]
_q = struct.Struct("=q")


class IpcDirectory:
    def __init__(self, shm: posix_ipc.SharedMemory, buf: mmap.mmap, base: str, disk: int) -> None:
        self._shm, self._buf, self.base, self.disk = shm, buf, base, disk

    @classmethod
    def create(cls, base: str, disk: int, request_capacity: int, completion_capacity: int) -> IpcDirectory:
        size = IPC_DIR_HEADER.size + IPC_CHANNELS * IPC_SLOT.size
        shm = posix_ipc.SharedMemory(ipc_dir_name(base, disk), posix_ipc.O_CREX, mode=IPC_MODE, size=size)
        os.fchmod(shm.fd, IPC_MODE)  # shm_open applies the umask
        buf = mmap.mmap(shm.fd, size)
        IPC_DIR_HEADER.struct.pack_into(buf, 0, IPC_MAGIC, LAYOUT_VERSION, IPC_CHANNELS, disk, 0)  # type: ignore[attr-defined]
        for k in range(IPC_CHANNELS):
            Channel.create(ipc_channel_name(base, disk, k), request_capacity, completion_capacity,
                           mode=IPC_MODE).close()
        return cls(shm, buf, base, disk)

    @classmethod
    def attach(cls, base: str, disk: int) -> IpcDirectory:
        """Raises posix_ipc.ExistentialError (no broker) or PermissionError (not its user/group)."""
        shm = posix_ipc.SharedMemory(ipc_dir_name(base, disk))
        buf = mmap.mmap(shm.fd, shm.size)
        magic, version = struct.unpack_from("=II", buf, 0)
        if magic != IPC_MAGIC or version != LAYOUT_VERSION:
            raise RuntimeError(f"{ipc_dir_name(base, disk)}: layout version {version}, expected {LAYOUT_VERSION}")
        return cls(shm, buf, base, disk)

    def _slot_pos(self, k: int) -> int:
        return IPC_DIR_HEADER.size + k * IPC_SLOT.size

    def slot(self, k: int) -> tuple[int, int, bytes]:
        """(owner pid, claim number, wake address) of channel k."""
        pid, claim, wlen, name = _SLOT.unpack_from(self._buf, self._slot_pos(k))
        return pid, claim, name[:wlen]

    def set_worker_incarnation(self, incarnation: int) -> None:
        _q.pack_into(self._buf, IPC_DIR_HEADER.offset("worker_incarnation"), incarnation)

    @property
    def worker_incarnation(self) -> int:
        return _q.unpack_from(self._buf, IPC_DIR_HEADER.offset("worker_incarnation"))[0]

    def claim(self, wake_name_for: callable) -> ClaimedChannel | None:
        """Producer side: take a free channel, or None if all are in use."""
        for k in range(IPC_CHANNELS):
            name = ipc_channel_name(self.base, self.disk, k)
            shm = posix_ipc.SharedMemory(name)
            try:
                fcntl.flock(shm.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                shm.close_fd()
                continue
            _, claim, _ = self.slot(k)
            claim += 1
            wake = wake_name_for(k, claim)
            _SLOT.pack_into(self._buf, self._slot_pos(k), os.getpid(), claim, len(wake), wake)
            channel = Channel(shm, mmap.mmap(shm.fd, shm.size), None)
            return ClaimedChannel(self, k, claim, channel)
        return None

    def release(self, k: int) -> None:
        _SLOT.pack_into(self._buf, self._slot_pos(k), 0, self.slot(k)[1], 0, b"")

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._buf.close()
        with contextlib.suppress(Exception):
            self._shm.close_fd()


class ClaimedChannel:
    """A producer's claimed channel: the flock lives as long as its shm fd stays open."""

    def __init__(self, directory: IpcDirectory, k: int, claim: int, channel: Channel) -> None:
        self.directory, self.k, self.claim, self.channel = directory, k, claim, channel

    def close(self) -> None:
        self.directory.release(self.k)
        self.channel.close()  # closes the fd: the flock goes with it
