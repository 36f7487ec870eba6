"""Moving a partition online from one log dir (disk worker) to another: the disk workers' side
of AlterReplicaLogDirs. A network worker drives the steps (:mod:`appliance.broker.handlers.
alter_replica_log_dirs`), each a ``MsgType.REPLICA_MOVE`` ring message with a JSON body naming
the step; each step runs in the one disk worker that owns the files it touches.

1. ``copy`` (destination): copy the partition's files into ``<topic>-<p>.<uuid>-future`` (Kafka's
   future replica) while the source keeps appending; refused before anything is written when
   the destination has too little free space.
2. ``handoff`` (source): stop accepting appends for the slot (later requests get
   NOT_LEADER_OR_FOLLOWER, which clients retry), flush, close the log; the slot goes OFFLINE.
3. ``finish`` (destination): copy what was appended since step 1 (each segment's new tail; a
   segment the cleaner replaced is copied whole), fsync every file and the directory.
4. ``retire`` (source): rename its directory to ``<topic>-<p>.<uuid>-delete`` and hand the slot
   to the destination disk in the shared table.
5. ``switch`` (destination): rename the future directory to ``<topic>-<p>``, open the log,
   register it: the slot is ONLINE on the new disk.
6. ``delete`` (source): remove the retired directory.

If the network worker driving a move dies between steps 2 and 4, the source takes the partition
back on its own after :data:`HANDOFF_TIMEOUT_S` (:meth:`ReplicaMover.expire`, from the disk
worker's loop), and a destination drops a future replica left idle for
:data:`FUTURE_IDLE_TIMEOUT_S`; a step that comes later finds nothing and the move fails cleanly.
A failure before step 5 undoes what was done (``abort`` on the destination removes the future
directory; ``resume`` on the source renames a retired directory back and reopens the log): the
partition stays where it was, intact. After a crash, :func:`sweep_moves` at start settles a
move in flight: a future directory whose partition still exists in another log dir is removed
(the move had not switched), otherwise it becomes the partition (the source had retired it);
retired directories are removed by the log dir's own start (as deleted partitions are).

Thread-safety: none; the disk worker's one thread calls every handler.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from appliance.broker.disk.partitions import Partitions
from appliance.broker.disk.requests import NOTHING, NotHere
from appliance.config import TopicConfig
from appliance.errors import InvalidRequestError, KafkaStorageError
from appliance.shm.layout import SlotState
from appliance.storage.checkpoint import fsync_dir
from appliance.storage.log import PartitionLog, partition_dir_name
from appliance.storage.log_dir import DELETE_DIR_SUFFIX, read_topic_properties

__all__ = ["ReplicaMover", "sweep_moves", "FUTURE_DIR_SUFFIX", "HANDOFF_TIMEOUT_S", "FUTURE_IDLE_TIMEOUT_S"]

log = logging.getLogger("appliance.disk")

FUTURE_DIR_SUFFIX = "-future"
# the partition is unavailable between handoff and switch: a few ms normally; past this the
# driver is taken for dead (generous: its steps queue behind produce traffic on a loaded box)
HANDOFF_TIMEOUT_S = 60.0
FUTURE_IDLE_TIMEOUT_S = 600.0  # a copied future replica whose handoff never came
_COPY_CHUNK = 1 << 20
_SKIP_SUFFIXES = (".deleted", ".cleaned", ".swap", ".tmp")  # mid-operation files: not part of the log


@dataclass
class _Incoming:
    """A move into this log dir: the future directory and what has been copied into it."""

    topic: str
    partition: int
    src: str
    future: str
    copied: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (inode, bytes)
    touched: float = field(default_factory=time.monotonic)


@dataclass
class _Outgoing:
    """A move out of this log dir, after its handoff."""

    topic: str
    partition: int
    path: str
    config: TopicConfig
    log_start_offset: int
    log_end_offset: int
    retired: str | None = None
    since: float = field(default_factory=time.monotonic)


def _copy_from(src: str, dst: str, start: int, beat: Callable[[], None]) -> int:
    """Copy ``src`` from byte ``start`` to its end onto ``dst`` (created or extended);
    the new size. ``beat`` stamps the worker's heartbeat every chunk: a large copy must not
    look like a hung worker to the supervisor."""
    with open(src, "rb") as fi, open(dst, "r+b" if start else "wb") as fo:
        fi.seek(start)
        fo.seek(start)
        fo.truncate(start)
        while True:
            chunk = fi.read(_COPY_CHUNK)
            if not chunk:
                break
            fo.write(chunk)
            beat()
        fo.flush()
        os.fsync(fo.fileno())
        return fo.tell()


def _dir_bytes(path: str) -> int:
    total = 0
    for name in os.listdir(path):
        try:
            total += os.stat(os.path.join(path, name)).st_size
        except FileNotFoundError:
            pass
    return total


class ReplicaMover:
    def __init__(self, index: int, parts: Partitions) -> None:
        self.index = index
        self.parts = parts
        self.incoming: dict[int, _Incoming] = {}
        self.outgoing: dict[int, _Outgoing] = {}

    def _beat(self) -> None:
        self.parts.table.heartbeat(self.parts.worker_slot)

    def handle(self, n: int | None, request_id: int, slot: int, body: memoryview) -> tuple:
        req = json.loads(bytes(body))
        step = getattr(self, "_" + str(req.get("op")), None)
        if step is None:
            raise InvalidRequestError(f"unknown move step {req.get('op')!r}")
        self.parts.table.heartbeat(self.parts.worker_slot)  # a copy can take a while
        try:
            return step(slot, req)
        finally:
            self.parts.table.heartbeat(self.parts.worker_slot)

    def expire(self, now: float) -> None:
        """Undo the moves whose driver went silent (see the module docstring)."""
        for slot, out in list(self.outgoing.items()):
            if out.retired is None and now - out.since > HANDOFF_TIMEOUT_S:
                log.warning("%s: move of %s-%d stalled after its handoff; taking it back",
                            self.parts.path, out.topic, out.partition)
                try:
                    self._resume(slot, {})
                except Exception:
                    log.exception("taking %s-%d back failed", out.topic, out.partition)
        for slot, move in list(self.incoming.items()):
            if now - move.touched > FUTURE_IDLE_TIMEOUT_S:
                self._abort(slot, {})

    # -- destination ------------------------------------------------------------------------
    def _copy(self, slot: int, req: dict) -> tuple:
        topic, partition, src = req["topic"], int(req["partition"]), req["src"]
        if (topic, partition) in self.parts.log_dir.partitions:
            raise InvalidRequestError(f"{topic}-{partition} is already in {self.parts.path}")
        self._abort(slot, req)
        need = _dir_bytes(src)
        st = os.statvfs(self.parts.path)
        if st.f_bavail * st.f_frsize < need + (need >> 3) + (1 << 20):
            raise KafkaStorageError(f"{self.parts.path} has too little free space for {topic}-{partition} "
                                    f"({need} bytes)")
        future = os.path.join(self.parts.path,
                              f"{partition_dir_name(topic, partition)}.{uuid.uuid4().hex}{FUTURE_DIR_SUFFIX}")
        move = _Incoming(topic, partition, src, future)
        self.incoming[slot] = move
        try:
            os.mkdir(future)
            self._sync_files(move)
        except OSError:
            self._abort(slot, req)
            raise
        log.info("%s: copied %s-%d from %s into %s", self.parts.path, topic, partition, src, future)
        return NOTHING

    def _sync_files(self, move: _Incoming) -> None:
        """Bring the future directory up to the source's files: new tails, replaced or new files
        whole, files gone from the source removed."""
        names = {n for n in os.listdir(move.src) if not n.endswith(_SKIP_SUFFIXES)}
        for name in sorted(names):
            src = os.path.join(move.src, name)
            try:
                st = os.stat(src)
            except FileNotFoundError:
                continue
            ino, done = move.copied.get(name, (st.st_ino, 0))
            # log files only grow at the end; anything else (indexes, snapshots, replaced
            # segments) is copied whole
            start = done if ino == st.st_ino and name.endswith(".log") and done <= st.st_size else 0
            move.copied[name] = (st.st_ino, _copy_from(src, os.path.join(move.future, name), start, self._beat))
        for name in set(move.copied) - names:
            os.unlink(os.path.join(move.future, name))
            del move.copied[name]
        fsync_dir(move.future)

    def _finish(self, slot: int, req: dict) -> tuple:
        move = self.incoming.get(slot)
        if move is None:
            raise NotHere()
        move.touched = time.monotonic()
        try:
            self._sync_files(move)
        except OSError:
            self._abort(slot, req)
            raise
        return NOTHING

    def _switch(self, slot: int, req: dict) -> tuple:
        move = self.incoming.pop(slot, None)
        if move is None:
            raise NotHere()
        parts = self.parts
        final = os.path.join(parts.path, partition_dir_name(move.topic, move.partition))
        lso, leo = int(req["log_start_offset"]), int(req["log_end_offset"])
        os.rename(move.future, final)
        try:
            fsync_dir(parts.path)
            overrides = read_topic_properties(final)
            cfg = TopicConfig.from_overrides(parts.config, overrides) if overrides else parts.config.topic_defaults()
            plog = PartitionLog.open(final, cfg, recovery_point=leo, log_start_offset=lso, clean_shutdown=True,
                                     writeback_chunk_bytes=parts.log_dir._chunk,
                                     writeback_window_bytes=parts.log_dir._window)
        except Exception:
            # back to a future replica, so the abort that follows removes it: never two copies
            os.rename(final, move.future)
            self.incoming[slot] = move
            raise
        parts.log_dir.partitions[(move.topic, move.partition)] = plog
        parts._register(slot, move.topic, move.partition, plog)
        parts.log_dir.write_checkpoints()
        log.info("%s: %s-%d moved here (offsets %d..%d)", parts.path, move.topic, move.partition, lso, leo)
        return NOTHING

    def _abort(self, slot: int, req: dict) -> tuple:
        move = self.incoming.pop(slot, None)
        if move is not None:
            shutil.rmtree(move.future, ignore_errors=True)
        return NOTHING

    # -- source -----------------------------------------------------------------------------
    def _handoff(self, slot: int, req: dict) -> tuple:
        parts = self.parts
        plog = parts.logs.get(slot)
        if plog is None:
            raise NotHere()
        parts.table.set_state(slot, SlotState.OFFLINE)  # requests now fail fast and are retried
        del parts.logs[slot]
        parts.slot_of.pop((plog.topic, plog.partition), None)
        parts.log_dir.partitions.pop((plog.topic, plog.partition), None)
        if parts.log_dir.cleaner is not None:
            parts.log_dir.cleaner.forget((plog.topic, plog.partition))
        plog.flush()
        plog.close()
        self.outgoing[slot] = _Outgoing(plog.topic, plog.partition, plog.path, plog.config,
                                        plog.log_start_offset, plog.log_end_offset)
        return plog.log_end_offset, -1, plog.log_start_offset, b""

    def _retire(self, slot: int, req: dict) -> tuple:
        out = self.outgoing.get(slot)
        if out is None:
            raise NotHere()
        target = f"{out.path}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
        os.rename(out.path, target)
        fsync_dir(self.parts.path)
        out.retired = target
        with self.parts.table.locked():
            self.parts.table.set_disk(slot, int(req["dest"]))
        return NOTHING

    def _resume(self, slot: int, req: dict) -> tuple:
        out = self.outgoing.pop(slot, None)
        if out is None:
            return NOTHING
        parts = self.parts
        if out.retired is not None:
            os.rename(out.retired, out.path)
            fsync_dir(parts.path)
            with parts.table.locked():
                parts.table.set_disk(slot, self.index)
        plog = PartitionLog.open(out.path, out.config, recovery_point=out.log_end_offset,
                                 log_start_offset=out.log_start_offset, clean_shutdown=True,
                                 writeback_chunk_bytes=parts.log_dir._chunk,
                                 writeback_window_bytes=parts.log_dir._window)
        parts.log_dir.partitions[(out.topic, out.partition)] = plog
        parts._register(slot, out.topic, out.partition, plog)
        log.warning("%s: move of %s-%d abandoned; it stays here", parts.path, out.topic, out.partition)
        return NOTHING

    def _delete(self, slot: int, req: dict) -> tuple:
        out = self.outgoing.pop(slot, None)
        if out is not None and out.retired is not None:
            shutil.rmtree(out.retired, ignore_errors=True)
            self.parts.log_dir.write_checkpoints()  # without the partition that left
        return NOTHING


def sweep_moves(path: str, log_dirs: list[str]) -> None:
    """Settle the moves a crash interrupted in log dir ``path`` (see the module docstring).
    Run before the log dir opens."""
    try:
        names = os.listdir(path)
    except FileNotFoundError:
        return
    for name in names:
        if not name.endswith(FUTURE_DIR_SUFFIX):
            continue
        base = name[: -len(FUTURE_DIR_SUFFIX)].rpartition(".")[0]
        future = os.path.join(path, name)
        if not base:
            continue
        elsewhere = [d for d in log_dirs if os.path.isdir(os.path.join(d, base))]
        if elsewhere or os.path.isdir(os.path.join(path, base)):
            log.info("%s: removing unfinished future replica %s", path, name)
            shutil.rmtree(future, ignore_errors=True)
        else:
            log.warning("%s: completing the move of %s interrupted by a crash", path, base)
            os.rename(future, os.path.join(path, base))
            fsync_dir(path)
