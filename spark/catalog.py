"""What is on disk and how far it may be read: partition directories, high watermarks, log starts.

The mmap readers never talk to the broker. They find ``<topic>-<partition>`` directories in the
configured ``log.dirs`` and bound every read by the high watermark, taken from the running
broker's shared partition table (``/<shm.name>-table``) or, when no broker runs, from the
``replication-offset-checkpoint`` files the broker wrote at its last checkpoint or shutdown.

Thread-safety: functions are stateless; a :class:`Catalog` is a snapshot, safe to share read-only.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from appliance.client.ipc import SHM_NAME_FILE
from appliance.errors import KafkaStorageError, UnknownTopicOrPartitionError
from appliance.records.stored import decode_stored
from appliance.storage.checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    read_checkpoint,
)
from appliance.storage.log import parse_partition_dir_name
from appliance.storage.segment import LOG_SUFFIX, LogSegment, parse_segment_file_name

__all__ = ["PartitionState", "Catalog", "load_catalog", "segment_bases", "offset_for_timestamp"]

log = logging.getLogger(__name__)

_LOG_DIR_MARKERS = (REPLICATION_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT,
                    LOG_START_OFFSET_CHECKPOINT, SHM_NAME_FILE, "meta.properties",
                    ".kafka_cleanShutdown")


@dataclass(frozen=True)
class PartitionState:
    """One partition as seen now: its directory and its readable offset range [earliest, end)."""

    topic: str
    partition: int
    path: str
    earliest: int  # max(log start offset, base of the oldest segment on disk)
    high_watermark: int
    # From the cluster's Metadata (planning through kafka.bootstrap.servers), else unknown.
    leader: int = -1
    isr: tuple[int, ...] = ()
    replicas: tuple[int, ...] = ()
    # Set for a read_committed read: the partition's last stable offset (<= high_watermark)
    last_stable_offset: int | None = None

    @property
    def end(self) -> int:
        """Where a read stops: the last stable offset under read_committed (an open
        transaction's records are not read yet), else the high watermark."""
        return self.high_watermark if self.last_stable_offset is None else self.last_stable_offset


@dataclass(frozen=True)
class Catalog:
    partitions: dict[tuple[str, int], PartitionState]
    source: str  # 'shared memory <name>' or 'checkpoints': where the high watermarks came from

    def topics(self) -> set[str]:
        return {t for t, _ in self.partitions}


def segment_bases(path: str) -> list[int]:
    """Base offsets of the ``.log`` segments in a partition directory, oldest first."""
    try:
        names = os.listdir(path)
    except FileNotFoundError:
        return []
    return sorted(p[0] for p in map(parse_segment_file_name, names)
                  if p is not None and p[1] == LOG_SUFFIX)


def _scan_log_dir(log_dir: str) -> dict[tuple[str, int], str]:
    if not os.path.isdir(log_dir):
        raise KafkaStorageError(f"log dir {log_dir!r} does not exist or is not a directory")
    try:
        names = os.listdir(log_dir)
    except OSError as e:
        raise KafkaStorageError(f"cannot list log dir {log_dir!r}: {e.strerror or e}") from e
    found: dict[tuple[str, int], str] = {}
    for name in names:
        tp = parse_partition_dir_name(name)
        full = os.path.join(log_dir, name)
        if tp is not None and os.path.isdir(full):
            found[tp] = full
    # An empty directory is a log dir the broker has not written to yet; anything else must
    # show a partition directory or a checkpoint file.
    if names and not found and not any(m in names for m in _LOG_DIR_MARKERS):
        raise KafkaStorageError(
            f"{log_dir!r} is not a log dir: it holds no <topic>-<partition> directories and no "
            f"checkpoint files ({', '.join(_LOG_DIR_MARKERS[:3])})")
    return found


def _table_offsets(shm_name: str) -> dict[tuple[str, int], tuple[int, int, int]] | None:
    """(high watermark, log start offset, last stable offset) per partition from a live
    broker's table, or None."""
    try:
        import posix_ipc

        from appliance.shm.partition_table import PartitionTable, TableVersionError
    except ImportError:  # pragma: no cover - posix_ipc is a runtime dependency
        return None
    try:
        table = PartitionTable.attach(f"/{shm_name}-table", read_only=True)
    except (posix_ipc.ExistentialError, TableVersionError, OSError) as e:
        log.info("no partition table %s (%s): using the checkpoint files", shm_name, e)
        return None
    try:
        return {(i.topic, i.partition): (i.high_watermark, i.log_start_offset,
                                         i.last_stable_offset)
                for i in table.slots()}
    finally:
        table.close()


def _shm_name_from(log_dirs) -> str | None:
    """The name a broker wrote into its log dirs at start (it may have stopped since)."""
    for d in log_dirs:
        try:
            with open(os.path.join(d, SHM_NAME_FILE), encoding="utf-8") as f:
                name = f.read().strip()
        except OSError:
            continue
        if name:
            return name
    return None


def load_catalog(log_dirs: tuple[str, ...] | list[str], shm_name: str | None,
                 read_committed: bool = False) -> Catalog:
    """Every partition in ``log_dirs`` with its readable range.

    High watermarks come from the shared partition table named ``shm_name`` (default: the name
    the broker wrote into the log dirs) when it can be attached, else from the checkpoints.
    ``read_committed``: the range ends at the last stable offset, which the table publishes
    beside the high watermark; with no broker running, rebuilt from the producer snapshot and
    the batch headers after it (:mod:`spark.stable_offset`).

    Raises KafkaStorageError when a log dir is missing, unreadable or not a log dir, or when a
    checkpoint file is malformed.
    """
    dirs: dict[tuple[str, int], str] = {}
    for d in log_dirs:
        for tp, path in _scan_log_dir(d).items():
            if tp in dirs:
                raise KafkaStorageError(f"partition {tp[0]}-{tp[1]} is in two log dirs: "
                                        f"{dirs[tp]} and {path} (replicas of several brokers? "
                                        "set kafka.bootstrap.servers: the cluster's ISR then "
                                        "decides which one is read)")
            dirs[tp] = path
    shm_name = shm_name or _shm_name_from(log_dirs)
    table = _table_offsets(shm_name) if shm_name else None
    hws: dict[tuple[str, int], int] = {}
    starts: dict[tuple[str, int], int] = {}
    lsos: dict[tuple[str, int], int] = {}
    if table is None:
        for d in log_dirs:
            hws.update(read_checkpoint(os.path.join(d, REPLICATION_OFFSET_CHECKPOINT)))
            starts.update(read_checkpoint(os.path.join(d, LOG_START_OFFSET_CHECKPOINT)))
        source = "checkpoints"
    else:
        for tp, (hw, log_start, lso) in table.items():
            hws[tp], starts[tp], lsos[tp] = hw, log_start, lso
        source = f"shared memory {shm_name}"
    out = {}
    for tp, path in dirs.items():
        bases = segment_bases(path)
        # Unknown to both the table and the checkpoints: nothing is known to be committed.
        hw = hws.get(tp, 0)
        earliest = max(starts.get(tp, 0), bases[0] if bases else 0)
        hw = max(hw, earliest)
        lso = None
        if read_committed and table is not None:
            lso = min(hw, max(lsos.get(tp, hw), earliest))
        elif read_committed:
            from spark.stable_offset import offline_stable_offset

            lso = offline_stable_offset(path, earliest, hw)
        out[tp] = PartitionState(tp[0], tp[1], path, earliest, hw, last_stable_offset=lso)
    return Catalog(out, source)


def require_topics(catalog: Catalog, topics: set[str], log_dirs: tuple[str, ...]) -> None:
    """Raise UnknownTopicOrPartitionError naming the topics not found in ``log_dirs``."""
    missing = sorted(topics - catalog.topics())
    if missing:
        raise UnknownTopicOrPartitionError(
            f"topic(s) {', '.join(missing)} not found in log.dirs {','.join(log_dirs)}")


def offset_for_timestamp(path: str, ts: int, earliest: int, high_watermark: int) -> int | None:
    """Offset of the first record at or after ``earliest`` with timestamp >= ``ts`` and below
    the high watermark (Kafka's ListOffsets by time), None when no record is that recent.

    Uses each segment's time index; raises CorruptRecordError for an undecodable batch.
    """
    for base in segment_bases(path):
        if base >= high_watermark:
            return None
        try:
            seg = LogSegment.open(path, base, None, writable=False)
        except KafkaStorageError:
            continue  # deleted by retention meanwhile
        try:
            if seg.size == 0 or seg.next_offset <= earliest or seg.max_timestamp < ts:
                continue
            loc = seg.find_offset_by_timestamp(ts, earliest)
            if loc is None or loc.base_offset >= high_watermark:
                continue
            for rec in decode_stored(seg.batch_bytes(loc)):
                if rec.offset >= high_watermark:
                    return None
                if rec.timestamp >= ts and rec.offset >= earliest:
                    return rec.offset
        finally:
            seg.close(trim=False)
    return None


__all__ += ["require_topics"]
