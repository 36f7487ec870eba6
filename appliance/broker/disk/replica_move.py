"""Moving a partition online from one log dir (disk worker) to another: the disk workers' side
of AlterReplicaLogDirs. A network worker drives the steps (:mod:`appliance.broker.handlers.
alter_replica_log_dirs`), each a ``MsgType.REPLICA_MOVE`` ring message with a JSON body naming
the step; each step runs in the one disk worker that owns the files it touches.

1. ``copy`` (destination): copy the partition's files into ``<topic>-<p>.<uuid>-future`` (Kafka's
   future replica) while the source keeps appending; refused before anything is written when
   the destination has too little free space or is offline.
2. ``handoff`` (source): stop accepting appends for the slot (later requests get
   NOT_LEADER_OR_FOLLOWER, which clients retry), flush, close the log; the slot goes OFFLINE.
3. ``finish`` (destination): copy what was appended since step 1 (each segment's new tail; a
   segment the cleaner replaced is copied whole), fsync every file and the directory.
4. ``retire`` (source): rename its directory to ``<topic>-<p>.<uuid>-delete`` and hand the slot
   to the destination disk in the shared table.
5. ``switch`` (destination): rename the future directory to ``<topic>-<p>``, open the log,
   register it: the slot is ONLINE on the new disk.
6. ``delete`` (source): remove the retired directory (on the log dir's remover thread).

The copies of steps 1 and 3 run on a helper thread (:class:`_CopyJob`): ``copy`` and ``finish``
start it and answer at once with :data:`COPYING`, and the driver asks ``progress`` until it
answers done or an error. The bytes move with ``copy_file_range`` (``sendfile`` across file
systems), which release the GIL: the worker's loop keeps serving its other partitions while
hundreds of MB are copied and fsynced (before, a produce to them waited for the whole copy).
The thread writes only inside the future directory, which no log or shared table refers to
until ``switch``, run by the worker's thread: the disk worker stays the sole writer of its
partitions and tables. ``replica.alter.log.dirs.io.max.bytes.per.second`` (Kafka's throttle)
paces the thread. A copy that fails (ENOSPC: the destination filled up) removes the future
directory; the source never stopped serving.

If the network worker driving a move dies between steps 2 and 4, the source takes the partition
back on its own after :data:`HANDOFF_TIMEOUT_S` (:meth:`ReplicaMover.expire`, from the disk
worker's loop), and a destination drops a future replica left idle for
:data:`FUTURE_IDLE_TIMEOUT_S`; a step that comes later finds nothing and the move fails cleanly.
A failure before step 5 undoes what was done, in this order: ``resume`` on the source renames a
retired directory back and reopens the log, then ``abort`` on the destination removes the future
directory (on the log dir's remover thread); the partition stays where it was, intact. Source
first, so that no crash between the two leaves the partition with neither copy. After a crash,
:func:`sweep_moves` at start settles a move in flight: a future directory whose partition still
exists in another log dir is removed (the move had not switched), otherwise it becomes the
partition (the source had retired it); retired directories are removed by the log dir's own
start (as deleted partitions are).

Thread-safety: the disk worker's one thread calls every handler; a copy job's thread touches
only its future directory and its job's fields (read by the worker once the thread has ended).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from appliance.broker.disk.partitions import Partitions
from appliance.broker.disk.requests import NOTHING, NotHere
from appliance.config import TopicConfig
from appliance.errors import InvalidRequestError, KafkaStorageError
from appliance.shm.layout import HANDOFF_RESULT, SlotState
from appliance.storage.checkpoint import fsync_dir
from appliance.storage.flush import ChunkedWriteback, have_sync_file_range
from appliance.storage.log import partition_dir_name
from appliance.storage.log_dir import DELETE_DIR_SUFFIX, read_topic_properties

__all__ = ["ReplicaMover", "sweep_moves", "FUTURE_DIR_SUFFIX", "HANDOFF_TIMEOUT_S", "FUTURE_IDLE_TIMEOUT_S",
           "COPYING"]

log = logging.getLogger("appliance.disk")

_HANDOFF = HANDOFF_RESULT.struct  # type: ignore[attr-defined]

FUTURE_DIR_SUFFIX = "-future"
# the partition is unavailable between handoff and switch: a few ms normally; past this the
# driver is taken for dead (generous: its steps queue behind produce traffic on a loaded box)
HANDOFF_TIMEOUT_S = 60.0
FUTURE_IDLE_TIMEOUT_S = 600.0  # a copied future replica whose handoff never came
_COPY_CHUNK = 4 << 20  # bytes per copy call: how soon a cancel or the throttle takes effect
# dirty bytes a copy may leave behind it: without a bound, the kernel's dirty-page throttle
# stalls every writer of the disk (the destination's other partitions) once it flushes them
_WRITEBACK_WINDOW = 16 << 20
_THROTTLE_KEY = "replica.alter.log.dirs.io.max.bytes.per.second"
# the answer of ``copy``/``finish``/``progress`` while the copy job runs (base_offset 1; done: -1)
COPYING = (1, -1, -1, b"")
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
    job: _CopyJob | None = None  # the copy under way


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


class _Cancelled(Exception):
    """The move was aborted while its copy job ran."""


class _Pace:
    """At most ``rate`` bytes per second over the whole job (sleeps on the job's thread)."""

    def __init__(self, rate: int, cancel: threading.Event) -> None:
        self.rate, self.cancel = rate, cancel
        self.start, self.done = time.monotonic(), 0

    def __call__(self, n: int) -> None:
        self.done += n
        ahead = self.done / self.rate - (time.monotonic() - self.start)
        if ahead > 0 and self.cancel.wait(ahead):
            raise _Cancelled()
        if self.cancel.is_set():
            raise _Cancelled()


def _copy_range(fi: int, fo: int, start: int, end: int, pace: _Pace) -> int:
    """Copy bytes ``start``..``end`` of ``fi`` to the same offsets of ``fo`` in the kernel,
    with write-back started chunk by chunk (see flush.py); the offset reached (short when the
    source shrank)."""
    wb = ChunkedWriteback(_COPY_CHUNK, _WRITEBACK_WINDOW) if have_sync_file_range() else None
    if wb is not None:
        wb.reset(start)
    off, in_kernel = start, True
    while off < end:
        n = min(_COPY_CHUNK, end - off, max(pace.rate // 10, 4096))
        if in_kernel:
            try:
                done = os.copy_file_range(fi, fo, n, off, off)
            except OSError as e:
                # EXDEV: another file system (Linux >= 5.19 refuses most of those)
                if e.errno not in (errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                    raise
                in_kernel = False
                continue
        else:
            os.lseek(fo, off, os.SEEK_SET)
            done = os.sendfile(fo, fi, off, n)
        if done == 0:
            break
        off += done
        if wb is not None:
            wb.after_append(fo, off)
        pace(done)
    return off


def _copy_from(src: str, dst: str, start: int, pace: _Pace) -> int:
    """Copy ``src`` from byte ``start`` to its current end onto ``dst`` (created or cut to
    ``start``), fsynced; the new size."""
    fi = os.open(src, os.O_RDONLY)
    try:
        fo = os.open(dst, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fo, start)
            size = _copy_range(fi, fo, start, os.fstat(fi).st_size, pace)
            os.fsync(fo)
            return size
        finally:
            os.close(fo)
    finally:
        os.close(fi)


class _CopyJob:
    """One pass of :meth:`ReplicaMover._sync_files` on a helper thread."""

    def __init__(self, work: Callable[[_Pace], None], rate: int, name: str) -> None:
        self.cancel = threading.Event()
        self.error: BaseException | None = None
        self._work, self._pace = work, _Pace(rate, self.cancel)
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self._work(self._pace)
        except BaseException as e:  # handed to the worker's thread by ``progress``
            self.error = e

    @property
    def running(self) -> bool:
        return self.thread.is_alive()

    def stop(self) -> None:
        """Cancel and wait (at most one copy call)."""
        self.cancel.set()
        self.thread.join()


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

    def handle(self, n: int | None, request_id: int, slot: int, body: memoryview,
            acks: int, timeout_ms: int) -> tuple:
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
            if (move.job is None or not move.job.running) and now - move.touched > FUTURE_IDLE_TIMEOUT_S:
                self._abort(slot, {})

    # -- destination ------------------------------------------------------------------------
    def _copy(self, slot: int, req: dict) -> tuple:
        topic, partition, src = req["topic"], int(req["partition"]), req["src"]
        if (topic, partition) in self.parts.log_dir.partitions:
            raise InvalidRequestError(f"{topic}-{partition} is already in {self.parts.path}")
        self._abort(slot, req)
        if self.parts.failed:
            raise KafkaStorageError(f"log dir {self.parts.path} is offline: {self.parts.failed}")
        future = os.path.join(self.parts.path,
                              f"{partition_dir_name(topic, partition)}.{uuid.uuid4().hex}{FUTURE_DIR_SUFFIX}")
        move = _Incoming(topic, partition, src, future)
        self.incoming[slot] = move
        try:
            # written first: a dead disk fails here (EIO) and the dir is taken offline, where
            # statvfs alone would still answer from memory
            os.mkdir(future)
            fsync_dir(self.parts.path)
            need = _dir_bytes(src)
            st = os.statvfs(self.parts.path)
            if st.f_bavail * st.f_frsize < need + (need >> 3) + (1 << 20):
                raise KafkaStorageError(f"{self.parts.path} has too little free space for {topic}-{partition} "
                                        f"({need} bytes)")
        except (OSError, KafkaStorageError):
            self._abort(slot, req)
            raise
        log.info("%s: copying %s-%d from %s into %s", self.parts.path, topic, partition, src, future)
        return self._start(move)

    def _start(self, move: _Incoming) -> tuple:
        rate = int(self.parts.config[_THROTTLE_KEY])  # read per pass: it is a dynamic config

        def work(pace: _Pace) -> None:
            try:
                self._sync_files(move, pace)
            finally:
                move.touched = time.monotonic()  # idle from here if its driver never asks again

        move.job = _CopyJob(work, rate, f"copy {move.topic}-{move.partition}")
        return COPYING

    def _progress(self, slot: int, req: dict) -> tuple:
        """COPYING while the copy job runs; done (NOTHING), or its error with the future
        directory removed."""
        move = self.incoming.get(slot)
        if move is None:
            raise NotHere()
        job = move.job
        if job is not None and job.running:
            return COPYING
        move.job = None
        move.touched = time.monotonic()
        if job is not None and job.error is not None:
            log.warning("%s: copying %s-%d failed: %s; the move is abandoned", self.parts.path,
                        move.topic, move.partition, job.error)
            self._abort(slot, req)
            raise job.error
        return NOTHING

    def _sync_files(self, move: _Incoming, pace: _Pace) -> None:
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
            move.copied[name] = (st.st_ino, _copy_from(src, os.path.join(move.future, name), start, pace))
        for name in set(move.copied) - names:
            os.unlink(os.path.join(move.future, name))
            del move.copied[name]
        fsync_dir(move.future)

    def _finish(self, slot: int, req: dict) -> tuple:
        move = self.incoming.get(slot)
        if move is None:
            raise NotHere()
        if move.job is not None:  # a driver that asks ``finish`` waited for the copy
            raise InvalidRequestError(f"{move.topic}-{move.partition} is still being copied")
        move.touched = time.monotonic()
        return self._start(move)

    def _switch(self, slot: int, req: dict) -> tuple:
        move = self.incoming.get(slot)
        if move is None:
            raise NotHere()
        if move.job is not None:
            raise InvalidRequestError(f"{move.topic}-{move.partition} is still being copied")
        del self.incoming[slot]
        parts = self.parts
        final = os.path.join(parts.path, partition_dir_name(move.topic, move.partition))
        log_start, leo = int(req["log_start_offset"]), int(req["log_end_offset"])
        os.rename(move.future, final)
        try:
            fsync_dir(parts.path)
            overrides = read_topic_properties(final)
            cfg = TopicConfig.from_overrides(parts.config, overrides) if overrides else parts.config.topic_defaults()
            plog = parts.log_dir.open_log(final, cfg, recovery_point=leo, log_start_offset=log_start,
                                          clean_shutdown=True)
        except Exception:
            # back to a future replica, so the abort that follows removes it: never two copies
            os.rename(final, move.future)
            self.incoming[slot] = move
            raise
        parts.log_dir.partitions[(move.topic, move.partition)] = plog
        parts._register(slot, move.topic, move.partition, plog)
        parts.log_dir.write_checkpoints()
        log.info("%s: %s-%d moved here (offsets %d..%d)", parts.path, move.topic, move.partition, log_start, leo)
        return NOTHING

    def _abort(self, slot: int, req: dict) -> tuple:
        move = self.incoming.pop(slot, None)
        if move is not None:
            if move.job is not None:
                move.job.stop()  # joins: nothing writes into the directory after this
            # off the loop, as a retired directory is: a big partial copy takes long to unlink
            self.parts.log_dir.remover.remove([move.future])
        return NOTHING

    # -- source -----------------------------------------------------------------------------
    def _handoff(self, slot: int, req: dict) -> tuple:
        parts = self.parts
        p = parts.partitions.pop(slot, None)
        if p is None:
            raise NotHere()
        plog = p.log
        parts.table.set_state(slot, SlotState.OFFLINE)  # requests now fail fast and are retried
        parts.slot_of.pop((plog.topic, plog.partition), None)
        parts.log_dir.partitions.pop((plog.topic, plog.partition), None)
        if parts.log_dir.cleaner is not None:
            parts.log_dir.cleaner.forget((plog.topic, plog.partition))
        plog.flush()
        plog.close()
        self.outgoing[slot] = _Outgoing(plog.topic, plog.partition, plog.path, plog.config,
                                        plog.log_start_offset, plog.log_end_offset)
        return -1, -1, plog.log_start_offset, _HANDOFF.pack(plog.log_end_offset, plog.log_start_offset)

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
        plog = parts.log_dir.open_log(out.path, out.config, recovery_point=out.log_end_offset,
                                      log_start_offset=out.log_start_offset, clean_shutdown=True)
        parts.log_dir.partitions[(out.topic, out.partition)] = plog
        parts._register(slot, out.topic, out.partition, plog)
        log.warning("%s: move of %s-%d abandoned; it stays here", parts.path, out.topic, out.partition)
        return NOTHING

    def _delete(self, slot: int, req: dict) -> tuple:
        out = self.outgoing.pop(slot, None)
        if out is not None and out.retired is not None:
            self.parts.log_dir.remover.remove([out.retired])  # off the loop: big ones take long
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
