"""The broker's shared partition table: one POSIX shared-memory object per broker.

Holds, per partition, where it lives (disk index) and its offsets (log-end offset, high watermark,
log start offset), plus one slot per worker process (pid, heartbeat, state). Layouts are in
:mod:`appliance.shm.layout`.

Concurrency rules:

- A partition slot's offsets are written only by the disk worker that owns the partition, under a
  seqlock: readers (network workers, Spark, tools) never block the writer and retry on a torn read.
- Allocating or releasing slots (topic creation/deletion, a disk worker registering the partitions
  it found on disk) happens under an exclusive ``flock`` on the shared-memory object itself, which
  the kernel drops if the holder dies, so a crashed worker can never wedge the table.
- A worker slot is written by its worker (heartbeat, state) and by the supervisor (pid, incarnation).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import itertools
import mmap
import os
import struct
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import NamedTuple

import posix_ipc

from appliance.shm.layout import (
    LAYOUT_VERSION,
    MAX_WORKERS,
    PARTITION_SLOT,
    TABLE_HEADER,
    TABLE_MAGIC,
    TOPIC_NAME_MAX,
    WORKER_SLOT,
    SlotState,
    table_size,
)
from appliance.shm.mapping import release_mapped, unlink_mapped

__all__ = ["PartitionTable", "PartitionInfo", "TableVersionError", "ZERO_TOPIC_ID"]

ZERO_TOPIC_ID = bytes(16)  # no topic id yet (Kafka's Uuid.ZERO_UUID)

_SLOTS_BASE = TABLE_HEADER.size + MAX_WORKERS * WORKER_SLOT.size
_Q = struct.Struct("=Q")
# the broker's user writes it; its group (local producers, Spark tasks on the host) reads it
TABLE_MODE = 0o640
_q = struct.Struct("=q")
_d = struct.Struct("=d")
_i = struct.Struct("=i")
_OFFSETS = struct.Struct("=qqq")  # log_end_offset, high_watermark, log_start_offset: contiguous
_STABLE = struct.Struct("=qqqq")  # the same and last_stable_offset, right after them
_P = PARTITION_SLOT.offsets  # type: ignore[attr-defined]
_H = TABLE_HEADER.offsets  # type: ignore[attr-defined]
_W = WORKER_SLOT.offsets  # type: ignore[attr-defined]
assert _P["high_watermark"] == _P["log_end_offset"] + 8 == _P["log_start_offset"] - 8
assert _P["last_stable_offset"] == _P["log_start_offset"] + 8
# The worker area is also viewed as doubles and int32s, so that a heartbeat or a state is one
# aligned store: struct.pack_into zero-fills its target before writing (CPython's
# s_pack_internal memsets it), so a stamp written with it passes through 0.0 in shared memory,
# and the supervisor read a live worker's heartbeat as 0.0.
_WORKERS_BYTES = MAX_WORKERS * WORKER_SLOT.size
assert TABLE_HEADER.size % 8 == 0 and WORKER_SLOT.size % 8 == 0
assert _W["heartbeat"] % 8 == 0 and _W["state"] % 4 == 0
assert _SLOTS_BASE % 8 == 0 and PARTITION_SLOT.size % 8 == 0 and _P["state"] % 4 == 0
assert _P["state"] % 4 == 0 and _P["disk"] % 4 == 0


class TableVersionError(RuntimeError):
    """The object exists but was made by another layout version (or is not a table at all)."""


class PartitionInfo(NamedTuple):
    slot: int
    state: int
    disk: int
    topic: str
    partition: int
    num_partitions: int
    log_end_offset: int
    high_watermark: int
    log_start_offset: int
    topic_id: bytes = ZERO_TOPIC_ID
    last_stable_offset: int = 0


class PartitionTable:
    """A mapping of the table. Create with :meth:`create` (supervisor) or :meth:`attach`."""

    def __init__(self, shm: posix_ipc.SharedMemory, buf: mmap.mmap, owner: bool) -> None:
        self._shm = shm
        self._buf = buf
        self._owner = owner
        self.name = shm.name
        self.capacity = struct.unpack_from("=I", buf, _H["capacity"])[0]
        if table_size(self.capacity) > len(buf):  # a corrupt header must not aim writes past the end
            raise TableVersionError(f"{self.name}: {self.capacity} slots do not fit in {len(buf)} bytes")
        workers = memoryview(buf)[TABLE_HEADER.size:TABLE_HEADER.size + _WORKERS_BYTES]
        self._worker_doubles = workers.cast("d")  # see _WORKERS_BYTES
        self._worker_ints = workers.cast("i")
        workers.release()
        # partition slots' state and disk words, for the same reason: allocate() (under the
        # lock) takes a slot whose state reads FREE, and a disk worker's set_state (no lock)
        # passed through 0 = FREE
        slots = memoryview(buf)[_SLOTS_BASE:_SLOTS_BASE + self.capacity * PARTITION_SLOT.size]
        self._slot_ints = slots.cast("i")
        slots.release()
        self._slot_base = _SLOTS_BASE
        self._free_hint = 0  # where this process's next free-slot search starts

    # -- lifecycle ------------------------------------------------------------------------
    @classmethod
    def create(cls, name: str, capacity: int, broker_id: int, num_disks: int, port: int = 0) -> PartitionTable:
        """Create (exclusively) and initialise the table. Raises posix_ipc.ExistentialError if it exists."""
        size = table_size(capacity)
        shm = posix_ipc.SharedMemory(name, posix_ipc.O_CREX, mode=TABLE_MODE, size=size)
        os.fchmod(shm.fd, TABLE_MODE)  # shm_open applies the umask; the mode is the access policy
        buf = mmap.mmap(shm.fd, size)
        TABLE_HEADER.pack_into(
            buf, 0, magic=TABLE_MAGIC, version=LAYOUT_VERSION, capacity=capacity,
            broker_id=broker_id, supervisor_pid=os.getpid(), controller_id=broker_id,
            num_disks=num_disks, started_ms=int(time.time() * 1000), port=port,
            # no block yet: the first InitProducerId fetches one (a restart never reuses ids)
            producer_id_next=0, producer_id_last=-1)
        return cls(shm, buf, owner=True)

    @classmethod
    def attach(cls, name: str, read_only: bool = False) -> PartitionTable:
        """Map an existing table (``read_only``: for a process of the broker's group, a local
        producer or a Spark task, which may read the table but never write it). Raises
        posix_ipc.ExistentialError, posix_ipc.PermissionsError, TableVersionError."""
        shm = posix_ipc.SharedMemory(name, read_only=read_only)
        buf = None
        try:
            if shm.size < TABLE_HEADER.size:
                raise TableVersionError(f"{name} is too small to be a partition table")
            buf = mmap.mmap(shm.fd, shm.size, access=mmap.ACCESS_READ if read_only else mmap.ACCESS_WRITE)
            magic, version = struct.unpack_from("=II", buf, 0)
            if magic != TABLE_MAGIC or version != LAYOUT_VERSION:
                raise TableVersionError(
                    f"{name} has layout magic {magic:#x} version {version}; this build reads "
                    f"{TABLE_MAGIC:#x} version {LAYOUT_VERSION}")
            return cls(shm, buf, owner=False)
        except BaseException:
            # All or nothing: the descriptor stayed open on these paths, one per stale table
            # of another layout each time a client looked for its broker in /dev/shm
            # (find_broker_base; 225 such tables here): a process passed descriptor 1024,
            # which select() refuses, and its TCP connections broke.
            if buf is not None:
                with contextlib.suppress(BufferError):  # views of a half-made table hold it
                    buf.close()
            shm.close_fd()
            raise

    @staticmethod
    def creator_pid(name: str) -> int | None:
        """The supervisor pid recorded in an existing table, or None if there is none."""
        try:
            shm = posix_ipc.SharedMemory(name)
        except posix_ipc.ExistentialError:
            return None
        try:
            if shm.size < TABLE_HEADER.size:
                return 0
            with mmap.mmap(shm.fd, TABLE_HEADER.size) as buf:
                return _q.unpack_from(buf, _H["supervisor_pid"])[0]
        finally:
            shm.close_fd()

    def close(self) -> None:
        self._worker_doubles.release()  # the mapping cannot close while views export it
        self._worker_ints.release()
        self._slot_ints.release()
        release_mapped(self._shm, self._buf)

    def unlink(self) -> None:
        unlink_mapped(self._shm)

    # -- header ---------------------------------------------------------------------------
    @property
    def generation(self) -> int:
        return _q.unpack_from(self._buf, _H["generation"])[0]

    @property
    def port(self) -> int:
        return _i.unpack_from(self._buf, _H["port"])[0]

    @property
    def broker_id(self) -> int:
        return _i.unpack_from(self._buf, _H["broker_id"])[0]

    @property
    def num_disks(self) -> int:
        return _i.unpack_from(self._buf, _H["num_disks"])[0]

    def _bump_generation(self) -> None:
        _q.pack_into(self._buf, _H["generation"], self.generation + 1)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Exclusive table lock for slot allocation (dropped by the kernel if the holder dies)."""
        fcntl.flock(self._shm.fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._shm.fd, fcntl.LOCK_UN)

    @contextlib.asynccontextmanager
    async def locked_async(self, poll_s: float = 0.002) -> AsyncIterator[None]:
        """:meth:`locked` for an event loop: waits for the lock without blocking the loop (a
        disk worker registering thousands of partitions holds it for seconds, and a network
        worker blocked in flock stops heartbeating and answering everyone). The body must not
        await: within one process the lock does not exclude another coroutine."""
        import asyncio

        while True:
            try:
                fcntl.flock(self._shm.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                await asyncio.sleep(poll_s)
        try:
            yield
        finally:
            fcntl.flock(self._shm.fd, fcntl.LOCK_UN)

    # -- the producer id block (process/producer_ids.py): every method under the table lock --
    def take_producer_id(self) -> int | None:
        """The next id of the broker's current block, None when the block is used up (then
        refill it: :meth:`claim_producer_id_refill`). The caller holds the lock."""
        pid = _q.unpack_from(self._buf, _H["producer_id_next"])[0]
        if pid > _q.unpack_from(self._buf, _H["producer_id_last"])[0]:
            return None
        _q.pack_into(self._buf, _H["producer_id_next"], pid + 1)
        return pid

    def claim_producer_id_refill(self, until: float) -> bool:
        """Whether the caller is now the one worker fetching the next block, until
        ``until`` (``time.monotonic()``, one clock for the host); False while another's claim
        runs. A claim that lapses (its worker died mid-fetch) is taken over. The caller holds
        the lock."""
        if _d.unpack_from(self._buf, _H["producer_id_refill_until"])[0] > time.monotonic():
            return False
        _d.pack_into(self._buf, _H["producer_id_refill_until"], until)
        return True

    def end_producer_id_refill(self, block: tuple[int, int] | None) -> None:
        """Drop the refill claim, making ``block`` (first, last: inclusive; None: the fetch
        failed) the current block. Any freshly allocated block may replace the current one,
        even after a lapsed claim: its ids were never handed out, so at worst the rest of the
        replaced block is skipped. The caller holds the lock."""
        if block is not None:
            _q.pack_into(self._buf, _H["producer_id_next"], block[0])
            _q.pack_into(self._buf, _H["producer_id_last"], block[1])
        _d.pack_into(self._buf, _H["producer_id_refill_until"], 0.0)

    def producer_id_block(self) -> tuple[int, int]:
        """(next id, last id) of the current block, for tools and tests."""
        return (_q.unpack_from(self._buf, _H["producer_id_next"])[0],
                _q.unpack_from(self._buf, _H["producer_id_last"])[0])

    # -- worker slots ---------------------------------------------------------------------
    def _wpos(self, index: int) -> int:
        if not 0 <= index < MAX_WORKERS:
            raise IndexError(f"worker slot {index} outside 0..{MAX_WORKERS - 1}")
        return TABLE_HEADER.size + index * WORKER_SLOT.size

    def set_worker(self, index: int, *, pid: int, kind: int, state: int, incarnation: int) -> None:
        WORKER_SLOT.struct.pack_into(  # type: ignore[attr-defined]
            self._buf, self._wpos(index), pid, time.monotonic(), state, kind, incarnation)

    def set_worker_state(self, index: int, state: int) -> None:
        # one aligned 4-byte store (pack_into would pass through 0, EMPTY: see _WORKERS_BYTES)
        self._worker_ints[(self._wpos(index) - TABLE_HEADER.size + _W["state"]) // 4] = state

    def heartbeat(self, index: int) -> None:
        # one aligned 8-byte store (pack_into would pass through 0.0: see _WORKERS_BYTES)
        self._worker_doubles[(self._wpos(index) - TABLE_HEADER.size + _W["heartbeat"]) // 8] = \
            time.monotonic()

    def worker(self, index: int) -> tuple[int, float, int, int, int]:
        """(pid, heartbeat, state, kind, incarnation)."""
        return WORKER_SLOT.struct.unpack_from(self._buf, self._wpos(index))  # type: ignore[attr-defined]

    def worker_reader(self, index: int) -> Callable[[], tuple[int, float, int, int, int]]:
        """:meth:`worker` of one slot as a call that runs no Python code (the struct's unpack_from
        bound to the slot): a network worker reads its disk workers' slots on every doorbell
        (what that saves: perf/README.md, 29 Nov)."""
        return functools.partial(WORKER_SLOT.struct.unpack_from,  # type: ignore[attr-defined]
                                 self._buf, self._wpos(index))

    # -- partition slots ------------------------------------------------------------------
    def _spos(self, slot: int) -> int:
        if not 0 <= slot < self.capacity:
            raise IndexError(f"partition slot {slot} outside 0..{self.capacity - 1}")
        return self._slot_base + slot * PARTITION_SLOT.size

    def read(self, slot: int) -> PartitionInfo:
        """A consistent snapshot of one slot (seqlock read; retries while the writer is inside)."""
        pos = self._spos(slot)
        buf = self._buf
        unpack = PARTITION_SLOT.struct.unpack_from  # type: ignore[attr-defined]
        while True:
            s1 = _Q.unpack_from(buf, pos)[0]
            if s1 & 1:
                continue
            (_, state, disk, part, nparts, leo, hw, log_start, lso, tid, tlen,
             topic) = unpack(buf, pos)
            if _Q.unpack_from(buf, pos)[0] == s1:
                return PartitionInfo(slot, state, disk, topic[:tlen].decode(), part, nparts,
                                     leo, hw, log_start, tid, lso)

    def offsets(self, slot: int) -> tuple[int, int, int]:
        """(log_end_offset, high_watermark, log_start_offset), consistent, without the topic decode."""
        return self._consistent(slot, _OFFSETS)

    def stable_offsets(self, slot: int) -> tuple[int, int, int, int]:
        """(log_end_offset, high_watermark, log_start_offset, last_stable_offset), consistent:
        what a read_committed fetch reads up to (the LSO) beside the rest."""
        return self._consistent(slot, _STABLE)

    def _consistent(self, slot: int, fields: struct.Struct) -> tuple:
        """``fields`` from the slot's log end offset on, read under its seqlock (again while a
        writer is in, or wrote meanwhile)."""
        pos = self._spos(slot)
        buf = self._buf
        off = pos + _P["log_end_offset"]
        while True:
            s1 = _Q.unpack_from(buf, pos)[0]
            if s1 & 1:
                continue
            vals = fields.unpack_from(buf, off)
            if _Q.unpack_from(buf, pos)[0] == s1:
                return vals

    def state(self, slot: int) -> int:
        return _i.unpack_from(self._buf, self._spos(slot) + _P["state"])[0]

    def publish(self, slot: int, log_end_offset: int, high_watermark: int,
                log_start_offset: int, last_stable_offset: int | None = None) -> None:
        """Owner only: publish new offsets under the seqlock (the last stable offset is the
        high watermark when not given: no transaction open)."""
        pos = self._spos(slot)
        buf = self._buf
        seq = _Q.unpack_from(buf, pos)[0]
        _Q.pack_into(buf, pos, seq + 1)
        _STABLE.pack_into(buf, pos + _P["log_end_offset"], log_end_offset, high_watermark,
                          log_start_offset,
                          high_watermark if last_stable_offset is None else last_stable_offset)
        _Q.pack_into(buf, pos, seq + 2)

    def set_state(self, slot: int, state: int) -> None:
        pos = self._spos(slot)
        seq = _Q.unpack_from(self._buf, pos)[0]
        _Q.pack_into(self._buf, pos, seq + 1)
        self._slot_ints[(pos - _SLOTS_BASE + _P["state"]) // 4] = state  # one aligned store
        _Q.pack_into(self._buf, pos, seq + 2)
        self._bump_generation()

    def set_topic_id(self, slot: int, topic_id: bytes) -> None:
        """Give the slot its topic's id (a disk worker that loaded or made one for it)."""
        if len(topic_id) != 16:
            raise ValueError(f"a topic id is 16 bytes, not {len(topic_id)}")
        pos = self._spos(slot)
        seq = _Q.unpack_from(self._buf, pos)[0]
        _Q.pack_into(self._buf, pos, seq + 1)
        self._buf[pos + _P["topic_id"]:pos + _P["topic_id"] + 16] = topic_id
        _Q.pack_into(self._buf, pos, seq + 2)
        self._bump_generation()

    def set_disk(self, slot: int, disk: int) -> None:
        """Hand the slot to another disk worker (a replica moved between log dirs). Caller holds
        :meth:`locked`; only the slot's current owner calls it, while the slot is OFFLINE."""
        pos = self._spos(slot)
        seq = _Q.unpack_from(self._buf, pos)[0]
        _Q.pack_into(self._buf, pos, seq + 1)
        self._slot_ints[(pos - _SLOTS_BASE + _P["disk"]) // 4] = disk  # one aligned store
        _Q.pack_into(self._buf, pos, seq + 2)
        self._bump_generation()

    def slots(self) -> Iterator[PartitionInfo]:
        """Every used slot (state != FREE)."""
        # every slot's state in one strided copy: a state() call per slot made this 18 ms at
        # the default 32768 slots, paid by every worker on each topic creation or state change
        with self._slot_ints[_P["state"] // 4::PARTITION_SLOT.size // 4] as states:
            free = int(SlotState.FREE)  # a plain int: comparing with the IntEnum is 5x slower
            used = [slot for slot, st in enumerate(states.tolist()) if st != free]
        for slot in used:
            if self.state(slot) != SlotState.FREE:  # freed since the copy
                yield self.read(slot)

    def find(self, topic: str, partition: int) -> int:
        """Slot of (topic, partition), or -1. O(capacity): callers cache by generation."""
        for info in self.slots():
            if info.partition == partition and info.topic == topic:
                return info.slot
        return -1

    def allocate(self, topic: str, partition: int, num_partitions: int, disk: int,
                 state: int = SlotState.CREATING, topic_id: bytes = ZERO_TOPIC_ID) -> int:
        """Take a free slot for (topic, partition). Caller holds :meth:`locked`. ``topic_id``:
        the topic's id when the allocator knows it (zero: the disk worker gives it one).

        Raises ValueError for a bad topic name, MemoryError when the table is full.
        """
        raw = topic.encode()
        if not raw or len(raw) > TOPIC_NAME_MAX:
            raise ValueError(f"topic name length {len(raw)} outside 1..{TOPIC_NAME_MAX}")
        # start where the last allocation of this process ended: a 10,000-partition topic
        # would otherwise rescan the used slots once per partition (quadratic)
        start = self._free_hint if self._free_hint < self.capacity else 0
        for slot in itertools.chain(range(start, self.capacity), range(start)):
            if self.state(slot) == SlotState.FREE:
                self._free_hint = slot + 1
                pos = self._spos(slot)
                seq = _Q.unpack_from(self._buf, pos)[0]
                _Q.pack_into(self._buf, pos, seq + 1)
                PARTITION_SLOT.struct.pack_into(  # type: ignore[attr-defined]
                    self._buf, pos, seq + 1, state, disk, partition, num_partitions, 0, 0, 0, 0,
                    topic_id, len(raw), raw)
                _Q.pack_into(self._buf, pos, seq + 2)
                self._bump_generation()
                return slot
        raise MemoryError(f"partition table {self.name} is full ({self.capacity} slots)")

    def release(self, slot: int) -> None:
        """Free a slot. Caller holds :meth:`locked`."""
        self.set_state(slot, SlotState.FREE)

    def partitions_per_disk(self) -> list[int]:
        counts = [0] * max(self.num_disks, 1)
        for info in self.slots():
            if 0 <= info.disk < len(counts):
                counts[info.disk] += 1
        return counts
