"""What the supervisor creates before forking and every worker inherits: names, doorbells, channels.

A :class:`Plumbing` is made once by the supervisor (``create``) and then forked into every worker;
each worker keeps its own view of it. Doorbells are eventfds (one per worker): writing to one wakes
that worker's loop; the data itself travels through the shared-memory rings.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass, field

import posix_ipc

from appliance.shm.connection_counts import ConnectionCounts
from appliance.shm.ipc_directory import IpcDirectory
from appliance.shm.layout import conns_name, leaders_name, metadata_name
from appliance.shm.leadership_area import LeadershipArea
from appliance.shm.metadata_cache import MetadataCache
from appliance.shm.partition_table import PartitionTable
from appliance.shm.ring import Channel

__all__ = ["Plumbing", "shm_base_name", "ring_doorbell", "drain_doorbell", "unlink_stale"]

PARTITION_TABLE_CAPACITY = 32768  # slots by default (appliance.max.partitions): 10 MiB of shm
REQUEST_RING_BYTES = 64 << 20  # per (network, disk) pair: holds a full produce request's batches
COMPLETION_RING_BYTES = 1 << 20  # completions are 40 bytes each
IPC_REQUEST_RING_BYTES = 32 << 20  # per local producer channel; tmpfs pages are used only when touched


def shm_base_name(configured: str, broker_id: int, port: int) -> str:
    """The prefix of every POSIX object of one broker: two brokers on a host never collide."""
    base = configured or f"appliance-b{broker_id}-p{port}"
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", base):
        raise ValueError(f"appliance.shm.name={configured!r}: use 1-64 of [A-Za-z0-9_.-]")
    return base


# try/except, not contextlib.suppress: these run two or three times per request, and suppress
# costs three Python calls each time
def ring_doorbell(fd: int) -> None:
    try:
        os.eventfd_write(fd, 1)
    except OSError:  # BlockingIOError included: a full counter has woken its reader already
        pass


def drain_doorbell(fd: int) -> None:
    try:
        os.eventfd_read(fd)
    except OSError:  # BlockingIOError: nothing rang
        pass


def unlink_stale(base: str) -> list[str]:
    """Remove every POSIX shm object of ``base`` (after checking its supervisor is gone)."""
    removed = []
    with contextlib.suppress(FileNotFoundError):
        for name in os.listdir("/dev/shm"):
            if name in (f"{base}-table", f"{base}-metrics", f"{base}-leaders",
                        f"{base}-metadata", f"{base}-conns") or name.startswith(
                    (f"{base}-ring-", f"{base}-ipc-")):
                with contextlib.suppress(posix_ipc.ExistentialError):
                    posix_ipc.unlink_shared_memory("/" + name)
                    removed.append(name)
    return removed


@dataclass
class Plumbing:
    base: str
    num_disks: int
    num_net: int
    table_name: str
    disk_bells: list[int] = field(default_factory=list)
    net_bells: list[int] = field(default_factory=list)
    channel_names: dict[tuple[int, int], str] = field(default_factory=dict)
    # cluster mode: the cluster worker is one more ring client of every disk worker (index
    # num_net: its own rings and doorbell), and the leadership area exists
    cluster: bool = False

    @property
    def num_ring_clients(self) -> int:
        """Network workers, plus the cluster worker in cluster mode: the disk workers' rings."""
        return self.num_net + (1 if self.cluster else 0)

    @property
    def cluster_index(self) -> int:
        return self.num_net

    @classmethod
    def create(cls, base: str, num_disks: int, num_net: int, broker_id: int,
               port: int = 0, request_ring_bytes: int = REQUEST_RING_BYTES,
               cluster: bool = False,
               max_partitions: int = PARTITION_TABLE_CAPACITY) -> tuple[Plumbing, PartitionTable]:
        table = PartitionTable.create(f"/{base}-table", max_partitions, broker_id, num_disks, port)
        p = cls(base, num_disks, num_net, table.name, cluster=cluster)
        if cluster:
            LeadershipArea.create(leaders_name(base), max_partitions).close()
            MetadataCache.create(metadata_name(base)).close()
        p.disk_bells = [os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC) for _ in range(num_disks)]
        p.net_bells = [os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC) for _ in range(p.num_ring_clients)]
        for n in range(p.num_ring_clients):
            for d in range(num_disks):
                name = f"/{base}-ring-n{n}-d{d}"
                Channel.create(name, request_ring_bytes // 8 * 8, COMPLETION_RING_BYTES).close()
                p.channel_names[(n, d)] = name
        for d in range(num_disks):
            IpcDirectory.create(base, d, IPC_REQUEST_RING_BYTES, COMPLETION_RING_BYTES).close()
        ConnectionCounts.create(conns_name(base)).close()
        return p, table

    def disk_slot(self, disk: int) -> int:
        return disk

    def net_slot(self, net: int) -> int:
        return self.num_disks + net

    def cluster_slot(self) -> int:
        return self.num_disks + self.num_net

    def unlink(self) -> None:
        unlink_stale(self.base)
