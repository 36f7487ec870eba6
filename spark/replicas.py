"""Which broker owns a log dir on this host, and which local replica a task may read in place.

In cluster mode ``log.dirs`` may list the log dirs of several brokers that share this host. A
task reads a partition in place only from a replica that was in the ISR when the driver
planned (an in-sync replica holds every record below the high watermark, and nothing it holds
below it differs from the leader's log); a replica outside the ISR (lagging, or a deposed
leader not yet truncated) is never read in place. The owner of a log dir comes from the dir
itself, on the task's host: Kafka's ``meta.properties`` (``broker.id``) when present, else the
shared partition table of the broker whose name the broker wrote into the dir at start
(``.appliance-shm-name``; the table outlives a SIGKILLed broker, so a dead broker's dir is
still recognised, and then skipped because the controller took it out of the ISR).

Thread-safety: the owner cache is a dict filled idempotently; safe under the GIL.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from spark.catalog import _shm_name_from

__all__ = ["dir_owner", "LocalReplica", "local_replicas", "choose_replica", "table_broker_id", "META_PROPERTIES"]

META_PROPERTIES = "meta.properties"

# (dir, shm-name file mtime) -> owner: one table attach per dir per worker process.
_owners: dict[tuple[str, float], int | None] = {}


def _meta_properties_id(log_dir: str) -> int | None:
    try:
        with open(os.path.join(log_dir, META_PROPERTIES), encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        key, sep, value = line.partition("=")
        if sep and key.strip() == "broker.id":
            try:
                return int(value.strip())
            except ValueError:
                return None
    return None


def table_broker_id(shm_name: str) -> int | None:
    """The broker id in the shared partition table named by ``shm_name``; None when it cannot
    be attached here (broker gone, another host, another layout)."""
    try:
        import posix_ipc

        from appliance.shm.partition_table import PartitionTable, TableVersionError
    except ImportError:  # pragma: no cover - posix_ipc is a runtime dependency
        return None
    try:
        table = PartitionTable.attach(f"/{shm_name}-table", read_only=True)
    except (posix_ipc.ExistentialError, TableVersionError, OSError):
        return None
    try:
        return table.broker_id
    finally:
        table.close()


def dir_owner(log_dir: str) -> int | None:
    """The broker id owning ``log_dir`` on this host, or None when the dir does not say."""
    mid = _meta_properties_id(log_dir)
    if mid is not None:
        return mid
    from appliance.client.ipc import SHM_NAME_FILE

    try:
        stamp = os.stat(os.path.join(log_dir, SHM_NAME_FILE)).st_mtime
    except OSError:
        return None
    key = (os.path.abspath(log_dir), stamp)
    if key not in _owners:
        name = _shm_name_from([log_dir])
        _owners[key] = table_broker_id(name) if name else None
    return _owners[key]


@dataclass(frozen=True)
class LocalReplica:
    """A partition directory on this host and the broker it belongs to (None: unknown)."""

    broker_id: int | None
    path: str


def local_replicas(log_dirs: tuple[str, ...] | list[str], topic: str, partition: int
                   ) -> list[LocalReplica]:
    """Every ``<topic>-<partition>`` directory under ``log_dirs`` on this host, with its owner."""
    out = []
    for d in log_dirs:
        path = os.path.join(d, f"{topic}-{partition}")
        if os.path.isdir(path):
            out.append(LocalReplica(dir_owner(d), path))
    return out


def choose_replica(replicas: list[LocalReplica], isr: tuple[int, ...], leader: int,
                   replication_factor: int) -> LocalReplica | None:
    """The local replica to read in place: one in ``isr`` (the leader's first), else None.

    A dir whose owner is unknown is read only for an unreplicated partition (it can hold no
    other broker's log, as before cluster mode); with replicas, an unknown owner could be a
    lagging one, so it is never read.
    """
    in_sync = [r for r in replicas if r.broker_id is not None and r.broker_id in isr]
    if in_sync:
        return min(in_sync, key=lambda r: (r.broker_id != leader, r.path))
    if replication_factor <= 1:
        unknown = [r for r in replicas if r.broker_id is None]
        if unknown:
            return unknown[0]
    return None
