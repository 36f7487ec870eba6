"""The partitions one disk worker owns: which table slot holds which log, their offsets in the
shared table, and the requests that change them (produce, create, delete, alter config).

One writer per partition, one thread: no locks on the data path.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from appliance.broker.disk.dir_health import FULL_DISK_ERRNOS, ThrottledLog, io_errno, is_dead_disk
from appliance.broker.disk.partition import Partition
from appliance.broker.disk.requests import NOTHING, NotHere
from appliance.config import BrokerConfig, ConfigError, TopicConfig
from appliance.coordinator.routing import (
    OFFSETS_TOPIC,
    TXN_TOPIC,
    offsets_topic_config,
    txn_topic_config,
)
from appliance.errors import ErrorCode, InvalidRequestError, KafkaStorageError
from appliance.shm.layout import (
    COUNTER_PARTITIONS,
    TXN_MARKER_BODY,
    DataWanted,
    SlotState,
    WorkerState,
)
from appliance.shm.partition_table import ZERO_TOPIC_ID, PartitionTable
from appliance.storage.checkpoint import fsync_dir
from appliance.storage.log_dir import LogDir
from appliance.storage.partition_metadata import (
    PARTITION_METADATA_FILE,
    new_topic_id,
    read_topic_id,
    topic_id_text,
    write_topic_id,
)

if TYPE_CHECKING:
    from appliance.storage.log import PartitionLog

__all__ = ["Partitions", "WAKE_ALL", "unpack_marker"]

log = logging.getLogger("appliance.disk")

WAKE_ALL = DataWanted.LOG_END | DataWanted.ANY  # a log end offset grew: every kind of long poll
_TXN_MARKER = TXN_MARKER_BODY.struct  # type: ignore[attr-defined]


def unpack_marker(body: memoryview) -> tuple[int, int, int, bool]:
    """(producer id, coordinator epoch, producer epoch, commit) of a WRITE_TXN_MARKER body."""
    pid, coordinator_epoch, epoch, commit = _TXN_MARKER.unpack_from(body, 0)
    return pid, coordinator_epoch, epoch, bool(commit)


class Partitions:
    def __init__(self, index: int, path: str, config: BrokerConfig, table: PartitionTable,
                 worker_slot: int) -> None:
        self.index = index  # of this disk (log dir)
        self.path = path
        self.config = config
        self.table = table
        self.worker_slot = worker_slot  # our heartbeat slot: long rounds stamp it
        self.partitions: dict[int, Partition] = {}  # table slot -> its Partition (and log)
        self.broker_id = int(config["broker.id"])
        self.slot_of: dict[tuple[str, int], int] = {}
        self.log_dir: LogDir | None = None
        self.created_hooks: list[Callable[[str, int], None]] = []  # (topic, partition) once created
        # (partition number, producer id, commit) after a marker on a __consumer_offsets partition
        self.on_txn_marker: Callable[[int, int, bool], None] | None = None
        self.metrics = None  # a metrics Recorder when metrics are on (see set_metrics)
        # metrics: bytes appended per partition slot not yet added to the shared counters, and
        # the slots that have some (publish_bytes, 4 times a second from the loop). A list item
        # add costs about a fifth of a shared-memory word's read-modify-write from Python
        # (callgrind: ~200 against ~1,150 instructions), and it runs on every append.
        self.bytes_pending: list[int] = []
        self.bytes_dirty: list[int] = []
        self.failed: str | None = None  # why the log dir is offline (KIP-112), or None
        self._topic_counts: dict[str, int] | None = None  # _num_partitions' listing, at start
        self._unsynced_ids: list[str] = []  # partition dirs whose new topic id awaits an fsync
        self._throttled = ThrottledLog()
        # the DataWanted bits of the offsets a long-poll fetch may wait on that moved since the
        # worker last rang the network workers (requests that move none wake no one; a high
        # watermark move alone wakes no follower's fetch)
        self.grew = 0

    # -- start ----------------------------------------------------------------------------
    def open(self) -> None:
        """Recover the log dir and register every partition in the shared table; a dir that
        cannot be opened (a dead disk) starts offline instead, so the other dirs serve."""
        started = time.monotonic()
        try:
            self.log_dir = LogDir.open(self.path, self.config, self._topic_config_for,
                                       progress=self._opening)
        except (OSError, KafkaStorageError) as e:
            self.log_dir = None
            self._open_offline(e)
            return
        # read before taking the table lock (measured 26-77 us a partition at load 9): the
        # other dirs' workers wait on that lock to register theirs
        file_ids = {key: read_topic_id(plog.path) for key, plog in self.log_dir.partitions.items()}
        with self.table.locked():
            # one pass over the table, not a find() per partition: find is O(table slots), and
            # 3,333 partitions against a 32,768-slot table took minutes under the lock
            ids: dict[str, bytes] = {}
            existing = _slots_by_partition(self.table, ids)
            for n, ((topic, partition), plog) in enumerate(self.log_dir.partitions.items()):
                if not n % 256:
                    self.table.heartbeat(self.worker_slot)
                slot = existing.get((topic, partition), -1)
                if slot < 0:
                    slot = self.table.allocate(topic, partition, self._num_partitions(topic),
                                               self.index, SlotState.OFFLINE)
                self._adopt_topic_id(slot, topic, plog.path, file_ids[(topic, partition)], ids)
                self._register(slot, topic, partition, plog)
            # slots assigned to this disk whose create request died with the previous worker
            for info in list(self.table.slots()):
                if info.disk == self.index and info.slot not in self.partitions:
                    if info.state in (SlotState.CREATING, SlotState.OFFLINE):
                        plog = self.log_dir.create_partition(
                            info.topic, info.partition, self._creation_config(info.topic),
                            topic_id=info.topic_id if info.topic_id != ZERO_TOPIC_ID else None)
                        self._register(info.slot, info.topic, info.partition, plog)
                    elif info.state == SlotState.DELETING:
                        self.table.release(info.slot)
        self._sync_topic_ids()
        self._topic_counts = None  # topics created from now on count their own partitions
        log.info("log dir %s open: %d partitions in %.2f s", self.path, len(self.partitions),
                 time.monotonic() - started)

    def _adopt_topic_id(self, slot: int, topic: str, part_dir: str, file_id: bytes | None,
                        ids: dict[str, bytes]) -> None:
        """Give a loaded partition's slot its topic id (KIP-516) and keep ``partition.metadata``
        in step. The slot's id wins (a restarted worker's table, or the allocator's), then the
        file's, then one another partition of the topic already has (``ids``, filled as we go:
        the dirs register under the table lock, one after the other; ``file_id``: the file's,
        read before the lock). A topic from before topic ids gets a new one, written back
        (made durable after the lock: see :meth:`_sync_topic_ids`) so it is stable across
        restarts; in cluster mode it is left to the cluster worker, which takes ZooKeeper's
        (every broker must agree)."""
        slot_id = self.table.read(slot).topic_id
        tid = slot_id if slot_id != ZERO_TOPIC_ID else (file_id or ids.get(topic))
        if tid is None:
            if self.config["zookeeper.connect"]:
                return
            tid = new_topic_id()
        if file_id is not None and file_id != tid:
            log.warning("%s: partition.metadata names topic id %s, the topic's is %s; "
                        "rewriting it", part_dir, topic_id_text(file_id), topic_id_text(tid))
        ids.setdefault(topic, tid)
        if slot_id != tid:
            self.table.set_topic_id(slot, tid)
        if file_id != tid:
            write_topic_id(part_dir, tid, sync=False)
            self._unsynced_ids.append(part_dir)

    def _sync_topic_ids(self) -> None:
        """fsync the ``partition.metadata`` files :meth:`open` wrote, outside the table lock
        (a crash before this only means those topics get new ids at the next start)."""
        pending, self._unsynced_ids = self._unsynced_ids, []
        try:
            for n, part_dir in enumerate(pending):
                if not n % 256:
                    self.table.heartbeat(self.worker_slot)
                fd = os.open(os.path.join(part_dir, PARTITION_METADATA_FILE), os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
                fsync_dir(part_dir)
        except OSError as e:  # the dir's health is judged by its data, not by this file
            log.warning("%s: new topic ids not made durable (%s); they are made again at the "
                        "next start if lost", self.path, e)

    def _opening(self, loaded: int, total: int) -> None:
        """LogDir.open's progress: stamp the heartbeat (a start-up that keeps loading is alive;
        the supervisor's start-up deadline counts from the last stamp)."""
        if not loaded % 64 or loaded == total:
            self.table.heartbeat(self.worker_slot)

    def _open_offline(self, cause: BaseException) -> None:
        """Register the partitions the dead dir still lists (the kernel keeps a dead file
        system's directory entries cached) as STORAGE_ERROR slots: clients get
        KAFKA_STORAGE_ERROR for them rather than UNKNOWN_TOPIC_OR_PARTITION."""
        self.failed = f"{type(cause).__name__}: {cause}"
        log.error("log dir %s is offline: it could not be opened (%s); its partitions answer "
                  "KAFKA_STORAGE_ERROR until the disk is replaced and the broker restarted",
                  self.path, self.failed)
        try:
            names = os.listdir(self.path)
        except OSError:
            names = []
        with self.table.locked():
            existing = _slots_by_partition(self.table)
            for name in names:
                topic, _, part = name.rpartition("-")
                if not topic or not part.isdigit() or "." in part:
                    continue
                slot = existing.get((topic, int(part)), -1)
                with contextlib.suppress(ValueError, MemoryError):
                    if slot < 0:
                        slot = self.table.allocate(topic, int(part), self._num_partitions(topic),
                                                   self.index, SlotState.STORAGE_ERROR)
                    self.table.set_state(slot, SlotState.STORAGE_ERROR)
            # creates the previous worker left unanswered cannot happen here now
            for info in list(self.table.slots()):
                if info.disk == self.index and info.state in (SlotState.CREATING, SlotState.OFFLINE):
                    self.table.set_state(info.slot, SlotState.STORAGE_ERROR)

    def io_error(self, exc: BaseException) -> None:
        """An I/O error from a request or the maintenance: a dead disk takes the dir offline;
        a full one is logged (rate-limited) and the next write tries again."""
        if self.failed:
            return
        if is_dead_disk(exc):
            self.fail(exc)
        elif io_errno(exc) in FULL_DISK_ERRNOS:
            self._throttled(logging.WARNING, "full", "log dir %s is full: %s; produce to its "
                            "partitions answers KAFKA_STORAGE_ERROR until space is freed",
                            self.path, exc)
        else:
            self._throttled(logging.ERROR, f"io:{type(exc).__name__}", "I/O error on log dir %s: %s",
                            self.path, exc)

    def fail(self, cause: BaseException) -> None:
        """Take the whole log dir offline (KIP-112): every partition answers
        KAFKA_STORAGE_ERROR; nothing touches the dir again until a restart."""
        self.failed = f"{type(cause).__name__}: {cause}"
        log.error("log dir %s is offline: %s; its %d partitions answer KAFKA_STORAGE_ERROR until "
                  "the disk is replaced and the broker restarted", self.path, self.failed,
                  len(self.partitions))
        for slot in self.partitions:
            self.table.set_state(slot, SlotState.STORAGE_ERROR)
        for info in list(self.table.slots()):  # creates in flight
            if info.disk == self.index and info.state == SlotState.CREATING:
                self.table.set_state(info.slot, SlotState.STORAGE_ERROR)
        # close the files without writing (so the dead file system can be unmounted)
        for p in self.partitions.values():
            p.log.abandon()
        if self.log_dir is not None:
            self.log_dir.remover.shutdown(0)  # what it had queued errs on the dead disk; let it go
        self.partitions.clear()
        self.slot_of.clear()

    def _creation_config(self, topic: str) -> TopicConfig:
        if topic == OFFSETS_TOPIC:
            return TopicConfig.from_overrides(self.config, offsets_topic_config(self.config))
        if topic == TXN_TOPIC:
            return TopicConfig.from_overrides(self.config, txn_topic_config(self.config))
        return self.config.topic_defaults()

    def _num_partitions(self, topic: str) -> int:
        """Partitions of a topic, counted over every log dir (a topic may span disks). The
        dirs are listed once per start-up (or per offline open), not once per partition: the
        registration runs under the table lock, and 2,700 partitions per dir listed 8,100
        entries 2,700 times."""
        counts = self._topic_counts
        if counts is None:
            counts = {}
            for d in self.config.log_dirs:
                with contextlib.suppress(OSError):
                    for name in os.listdir(d):
                        t, _, p = name.rpartition("-")
                        if t and p.isdigit():
                            counts[t] = max(counts.get(t, 0), int(p) + 1)
            self._topic_counts = counts
        return max(counts.get(topic, 0), 1)

    def _topic_config_for(self, topic: str) -> TopicConfig:
        return self.config.topic_defaults()

    def _register(self, slot: int, topic: str, partition: int, plog: PartitionLog) -> None:
        p = Partition(slot, plog, self.broker_id)
        if self.config["zookeeper.connect"]:
            p.restore_high_watermark(self.log_dir.checkpointed_high_watermarks.get((topic, partition), 0))
        else:
            # one broker: the leader is the whole ISR, so everything in its log is committed
            # the moment it leads (Kafka: the new leader's HW moves to min LEO of the ISR)
            p.advance_alone()
        self.partitions[slot] = p
        self.slot_of[(topic, partition)] = slot
        if self.metrics is not None:
            self.metrics.opened(slot, plog.log_end_offset)
        self.publish(slot, plog)
        self.table.set_state(slot, SlotState.ONLINE)

    def set_metrics(self, recorder: Any) -> None:
        self.metrics = recorder
        self.bytes_pending = [0] * COUNTER_PARTITIONS if recorder is not None else []

    def publish_bytes(self) -> None:
        """Add the bytes appended since the last call to the shared counters (bytes in)."""
        if not self.bytes_dirty:
            return
        words, pending = self.metrics.bytes_in_words, self.bytes_pending
        for slot in self.bytes_dirty:
            words[slot] += pending[slot]
            pending[slot] = 0
        self.bytes_dirty.clear()

    def publish(self, slot: int, plog: PartitionLog, wake: int = WAKE_ALL) -> None:
        """Publish the slot's offsets; ``wake``: the DataWanted bits of the long-poll fetches
        that may be waiting on what moved (every kind by default; DataWanted.ANY when only the
        high watermark moved, which answers no follower's fetch, and a follower's replica,
        whose high watermark answers consumers fetching from it: KIP-392)."""
        p = self.partitions.get(slot)
        lso = p.last_stable_offset if p is not None and p.log is plog else plog.high_watermark
        self.table.publish(slot, plog.log_end_offset, plog.high_watermark, plog.log_start_offset,
                           lso)
        if wake:
            self.grew |= wake

    def publish_start_offsets(self) -> None:
        """Publish the log start offsets retention moved."""
        if self.failed:
            return
        for slot, p in self.partitions.items():
            if self.table.offsets(slot)[2] != p.log.log_start_offset:
                self.publish(slot, p.log)

    def advance_log_start(self, p: Partition, offset: int, cause: str) -> None:
        """Raise a partition's log start offset (DeleteRecords on the leader, a follower taking
        its leader's); the segments wholly below go at once, and the checkpoint is written
        before the answer, so a restart never brings the records back."""
        before = p.log.log_start_offset
        deleted = p.advance_log_start(offset)
        if deleted is None:
            return
        self.log_dir.write_checkpoints()
        self.publish(p.slot, p.log)
        log.info("%s-%d: log start offset %d -> %d (%s), %d segments deleted",
                 p.log.topic, p.log.partition, before, p.log.log_start_offset, cause, deleted)

    # -- requests (the handlers of the disk worker's table) -------------------------------
    def _check_online(self) -> None:
        if self.failed:
            raise KafkaStorageError(f"log dir {self.path} is offline")

    def produce(self, n: int | None, request_id: int, slot: int, body: memoryview,
            acks: int, timeout_ms: int) -> tuple:
        # _check_online and publish inline: this runs once per produce request
        if self.failed:
            raise KafkaStorageError(f"log dir {self.path} is offline")
        p = self.partitions.get(slot)
        if p is None:
            raise NotHere()
        if p.internal:
            p.check_client_produce()
        plog = p.log
        m = self.metrics
        if m is None:
            info = plog.append(body)
        else:  # one add per partition of a request (messages in come from the log-end offset;
            # the timing of one request in SAMPLE is Requests._timed's)
            info = plog.append(body)
            if slot < COUNTER_PARTITIONS:
                pending = self.bytes_pending
                if not pending[slot]:
                    self.bytes_dirty.append(slot)
                pending[slot] += len(body)
        if info.duplicate:
            # a retry of a batch already in the log: acknowledge its original offsets
            log.debug("duplicate batch for slot %d at offset %d", slot, info.first_offset)
        leo = p.advance_alone()
        log_start = plog.log_start_offset
        self.table.publish(slot, leo, leo, log_start, p.last_stable_offset)
        self.grew |= WAKE_ALL
        return info.first_offset, info.log_append_time, log_start, b""

    def write_txn_marker(self, n: int | None, request_id: int, slot: int, body: memoryview,
                         acks: int, timeout_ms: int) -> tuple:
        """WriteTxnMarkers on a standalone broker (the leader is the whole ISR): the marker
        appended, the LSO published, the coordinator told when it is an offsets partition."""
        if self.failed:
            raise KafkaStorageError(f"log dir {self.path} is offline")
        p = self.partitions.get(slot)
        if p is None:
            raise NotHere()
        pid, coordinator_epoch, epoch, commit = unpack_marker(body)
        info = p.write_marker(pid, epoch, commit, coordinator_epoch, -1)
        p.advance_alone()
        self.publish(slot, p.log)
        self.marker_written(p, pid, commit)
        return info.first_offset, -1, p.log.log_start_offset, b""

    def marker_written(self, p: Partition, producer_id: int, commit: bool) -> None:
        """After a marker on ``p``: a partition of __consumer_offsets tells its coordinator,
        which materialises or drops the producer's pending transactional offsets."""
        if p.internal and self.on_txn_marker is not None:
            self.on_txn_marker(p.log.partition, producer_id, commit)

    def create(self, n: int | None, request_id: int, slot: int, body: memoryview,
            acks: int, timeout_ms: int) -> tuple:
        self._check_online()
        spec = json.loads(bytes(body))
        info = self.table.read(slot)
        if info.disk != self.index or info.state not in (SlotState.CREATING, SlotState.ONLINE):
            raise NotHere()
        if slot in self.partitions:
            return NOTHING
        try:
            cfg = TopicConfig.from_overrides(self.config, spec.get("configs", {}))
        except ConfigError:
            cfg = self.config.topic_defaults()  # validated by the network worker already
        if self.metrics is not None:  # a reused slot: the new partition counts from 0
            self.metrics.reset_partition(slot)
            self.bytes_pending[slot] = 0
        # made durable with the rest of the round's creates, before any of them is answered
        tid = info.topic_id if info.topic_id != ZERO_TOPIC_ID else None
        plog = self.log_dir.create_partition(info.topic, info.partition, cfg, durable=False,
                                             topic_id=tid)
        self._register(slot, info.topic, info.partition, plog)
        self.table.heartbeat(self.worker_slot)
        for hook in self.created_hooks:
            hook(info.topic, info.partition)
        return NOTHING

    def set_topic_id(self, n: int | None, request_id: int, slot: int, body: memoryview,
            acks: int, timeout_ms: int) -> tuple:
        """Cluster mode: ZooKeeper's id for the partition's topic (KIP-516), into the slot and
        ``partition.metadata``; this worker is the single writer of both."""
        self._check_online()
        p = self.partitions.get(slot)
        if p is None:
            raise NotHere()
        plog = p.log
        if len(body) != 16:
            raise InvalidRequestError(f"a topic id is 16 bytes, not {len(body)}")
        tid = bytes(body)
        if self.table.read(slot).topic_id != tid:
            self.table.set_topic_id(slot, tid)
        if read_topic_id(plog.path) != tid:
            write_topic_id(plog.path, tid)
        return NOTHING

    def sync_created(self) -> int:
        """Make this round's new partitions durable; the Kafka error code if that failed."""
        self.table.heartbeat(self.worker_slot)  # a round of creates can take seconds on a slow disk
        if self.failed:
            return ErrorCode.KAFKA_STORAGE_ERROR
        try:
            self.log_dir.sync_created()
        except KafkaStorageError as e:
            self.io_error(e)
            return ErrorCode.KAFKA_STORAGE_ERROR
        return 0

    def delete(self, n: int | None, request_id: int, slot: int, body: memoryview,
            acks: int, timeout_ms: int) -> tuple:
        self.table.heartbeat(self.worker_slot)  # a round of deletes can take seconds on a slow disk
        info = self.table.read(slot)
        p = self.partitions.pop(slot, None)
        if self.failed:
            p = None  # the dead dir keeps the files; the slot goes
        if p is not None:
            self.slot_of.pop((info.topic, info.partition), None)
            self.log_dir.delete_partition(info.topic, info.partition)
        with self.table.locked():
            self.table.release(slot)
        return NOTHING

    def alter(self, n: int | None, request_id: int, slot: int, body: memoryview,
            acks: int, timeout_ms: int) -> tuple:
        self._check_online()
        p = self.partitions.get(slot)
        if p is None:
            raise NotHere()
        plog = p.log
        cfg = TopicConfig.from_overrides(self.config, json.loads(bytes(body)).get("configs", {}))
        self.log_dir.update_topic_config(plog.topic, cfg)
        return NOTHING

    # -- stop -----------------------------------------------------------------------------
    def close(self) -> None:
        """Take every partition offline and close the log dir cleanly (flush, checkpoints,
        clean-shutdown marker); a failure leaves recovery to the next start."""
        if self.metrics is not None:
            self.publish_bytes()
        self.table.set_worker_state(self.worker_slot, WorkerState.STOPPING)
        for slot in self.partitions:
            self.table.set_state(slot, SlotState.OFFLINE)
        if self.failed or self.log_dir is None:
            log.info("log dir %s is offline (%s): left as it is", self.path, self.failed)
            return
        try:
            self.log_dir.close(clean=True)
            log.info("log dir %s closed cleanly", self.path)
        except Exception:
            log.exception("clean close of %s failed; the next start will recover it", self.path)


def _slots_by_partition(table: PartitionTable,
                        ids: dict[str, bytes] | None = None) -> dict[tuple[str, int], int]:
    """(topic, partition) -> slot for every used slot, in one pass (the lowest slot wins, as
    with PartitionTable.find); ``ids`` (when given) gets each topic's id found on the way.
    Call under the table lock."""
    out: dict[tuple[str, int], int] = {}
    for info in table.slots():
        out.setdefault((info.topic, info.partition), info.slot)
        if ids is not None and info.topic_id != ZERO_TOPIC_ID:
            ids.setdefault(info.topic, info.topic_id)
    return out
