"""A network worker's side of the rings: send requests to disk workers, await their completions.

Each request gets an id and a callback or a future (one :meth:`DiskClient.submit`). Completions
come back on the completion ring and call the callbacks or resolve the futures. When a disk worker dies (its incarnation in the shared table changes), every request
still pending on it fails with NOT_LEADER_OR_FOLLOWER, a retriable error: the client refreshes its
metadata and sends again, so nothing acknowledged is lost and nothing hangs.

Its successor empties its request rings when it starts (what was queued there was failed so) and
is READY only after that: a request queued while it starts would be dropped unanswered, so
:meth:`submit` refuses it at once with the same retriable error, as the IPC producer does
(client/ipc.py).

When this process dies instead, a disk worker may still answer what it sent: an acks=all produce
is answered when the high watermark passes it. The answer lands on the completion ring this
process's successor reads, so request ids never repeat across the processes that hold a ring
client's slot (they count up from CLOCK_MONOTONIC's nanoseconds at start): a late answer finds
no pending request and is dropped, instead of completing one of the successor's requests.

Runs inside the network worker's asyncio loop; not thread-safe.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any, NamedTuple

from appliance.errors import ErrorCode
from appliance.process.plumbing import Plumbing, drain_doorbell, ring_doorbell
from appliance.shm.layout import (
    COMPLETION,
    EPOCH_RESULT,
    NO_COMPLETION_AT_ACKS_0,
    REQUEST,
    MsgType,
    WorkerState,
)
from appliance.shm.partition_table import PartitionTable
from appliance.shm.ring import Channel, RingFormatError

log = logging.getLogger(__name__)

__all__ = ["DiskClient", "Completion", "EpochResult", "epoch_result"]

_REQ = REQUEST.struct  # type: ignore[attr-defined]
# acks=0 produces remembered for a failure answer (the disk worker answers only those): enough for
# every acks=0 request a disk takes in far longer than it takes to fail one; an older one that
# fails goes unheard (its connection stays open), as it always did
ACKS0_REMEMBERED = 65536
_COMP = COMPLETION.struct  # type: ignore[attr-defined]


class Completion(NamedTuple):
    error_code: int
    base_offset: int
    log_append_time: int
    log_start_offset: int
    body: bytes = b""  # an encoded response body (GROUP requests)


class EpochResult(NamedTuple):
    """EPOCH_END's and LATEST_EPOCH's answer (-1, -1: the log knows no epoch)."""
    leader_epoch: int
    end_offset: int


_EPOCH_RESULT = EPOCH_RESULT.struct  # type: ignore[attr-defined]


def epoch_result(comp: Completion) -> EpochResult:
    """The EPOCH_RESULT after an EPOCH_END or LATEST_EPOCH completion without an error."""
    return EpochResult(*_EPOCH_RESULT.unpack_from(comp.body, 0))


_REFUSED = Completion(ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, -1, -1)  # the disk worker is not running
_DEAD = int(WorkerState.DEAD)
_READY = int(WorkerState.READY)
_tuple_new = tuple.__new__  # a Completion without NamedTuple's Python-level __new__ (per request)


def _resolve(fut: asyncio.Future, completion: Completion) -> None:
    if not fut.done():
        fut.set_result(completion)


class DiskClient:
    def __init__(self, net_index: int, plumbing: Plumbing, table: PartitionTable) -> None:
        self.net_index = net_index
        self.plumbing = plumbing
        self.table = table
        self.channels = [Channel.attach(plumbing.channel_names[(net_index, d)])
                         for d in range(plumbing.num_disks)]
        for ch in self.channels:
            ch.completions.discard_all()  # answers meant for this slot's previous process
            ch.completions.want_data(0)  # nor its long polls
        # each disk worker's table slot (pid, heartbeat, state, kind, incarnation), read per doorbell
        self._workers = [table.worker_reader(plumbing.disk_slot(d))
                         for d in range(plumbing.num_disks)]
        # Request ids of this process start above every id of the processes that held this
        # slot before it: a disk worker answers a held request (an acks=all produce) when its
        # high watermark passes it, maybe after its sender died, on the rings its successor now
        # reads; from a shared count of 1 that answer would complete one of the successor's own
        # requests (an acknowledgement of records not yet replicated). CLOCK_MONOTONIC is one
        # clock for every process, and no process sends more than one request per nanosecond.
        self._ids = itertools.count(time.monotonic_ns())
        # request id -> (on_done, its token, disk): on_done(token, completion) answers it
        self._pending: dict[int, tuple[Callable[[Any, Completion], None], Any, int]] = {}
        self._acks0: dict[int, tuple[Callable[[Any, Completion], None], Any, int]] = {}  # insertion order
        self._incarnations = [self._incarnation(d) for d in range(plumbing.num_disks)]
        self._to_ring: set[int] = set()
        self._batching = False
        # per disk: requests (msg_type, header, payload) waiting for room in its request ring
        self._overflow: list[deque] = [deque() for _ in range(plumbing.num_disks)]
        self._max_payload = self.channels[0].requests.max_message() - REQUEST.size

    def _incarnation(self, disk: int) -> int:
        return self._workers[disk]()[4]

    def max_payload(self) -> int:
        return self._max_payload

    def _ready(self, disk: int) -> bool:
        """Whether ``disk``'s worker takes requests now (see the module docstring). A new
        incarnation not yet seen here is not ready either: what its predecessor held is failed
        first (on the next pass of the loop, not inside the caller's submit)."""
        _, _, state, _, inc = self._workers[disk]()
        if inc != self._incarnations[disk]:
            asyncio.get_running_loop().call_soon(self.check_disks)
            return False
        return state == _READY

    def submit(self, disk: int, msg_type: int, slot: int, *payload: bytes | memoryview,
               acks: int = 1, timeout_ms: int = 30000,
               on_done: Callable[[Any, Completion], None] | None = None, token: Any = None,
               stamp_us: int = 0, ring_now: bool = False, slot_online: bool = False) -> asyncio.Future | None:
        """Put one request on ``disk``'s request ring; ``payload``: its parts, in order.

        - ``on_done``: called as ``on_done(token, completion)`` from :meth:`on_doorbell` when it
          is answered (no future, no task: the produce path's way); returns None.
        - without it: returns a future of its :class:`Completion` to await.
        - an acks=0 produce or follower position gets no completion: None, and ``on_done`` is
          never called.
        - ``stamp_us``: a timed request's stamp (REQUEST.stamp_us), 0 when untimed.
        - ``ring_now``: ring the doorbell at once unless a batch is open (the produce fast
          path: a read of one request has nothing to coalesce); otherwise the doorbells of one
          pass of the loop go out together.
        - ``slot_online``: the caller has just read the slot ONLINE, which a disk worker sets
          only once it is READY: the worker's state is not read again (the fast path's guard).

        Never waits: when the ring is full the request waits in an overflow queue, behind which
        later requests to that disk wait too (produce order holds). A disk worker that does
        not take requests now (starting, dead) answers NOT_LEADER_OR_FOLLOWER, retriable, on
        the loop's next pass, never inside this call."""
        answered = not (acks == 0 and msg_type in NO_COMPLETION_AT_ACKS_0)
        # an acks=0 produce is answered only if it fails: its on_done is kept among the recent ones
        failures_only = not answered and on_done is not None and msg_type == MsgType.PRODUCE
        fut = None
        if on_done is None and answered:
            fut = asyncio.get_running_loop().create_future()
            on_done, token = _resolve, fut
        if not slot_online and not self._ready(disk):
            if answered:
                asyncio.get_running_loop().call_soon(self._deliver, (on_done, token, disk), _REFUSED)
            return fut
        request_id = next(self._ids)
        header = _REQ.pack(request_id, slot, acks, 0, timeout_ms, stamp_us)
        if answered:
            self._pending[request_id] = (on_done, token, disk)
        elif failures_only:
            recent = self._acks0
            recent[request_id] = (on_done, token, disk)
            if len(recent) > ACKS0_REMEMBERED:
                del recent[next(iter(recent))]  # the oldest: long appended, or failed unheard
        if not self._overflow[disk] and self.channels[disk].requests.put(msg_type, header, *payload):
            if ring_now and not self._batching:
                ring_doorbell(self.plumbing.disk_bells[disk])
            else:
                self._schedule_ring(disk)
            return fut
        self._overflow_put(disk, msg_type, header, payload[0] if len(payload) == 1 else b"".join(payload))
        return fut

    def _overflow_put(self, disk: int, msg_type: int, header: bytes,
                      payload: bytes | memoryview) -> None:
        """The request ring is full (or others wait): queue behind them, retried by timer and
        completions."""
        overflow = self._overflow[disk]
        overflow.append((msg_type, header, bytes(payload)))
        if len(overflow) == 1:
            ring_doorbell(self.plumbing.disk_bells[disk])  # the disk is behind: make sure it runs
            asyncio.get_running_loop().call_later(0.05, self._retry_overflow, disk)

    def _drain_overflow(self, disk: int) -> None:
        overflow = self._overflow[disk]
        ring = self.channels[disk].requests
        while overflow and ring.put(*overflow[0]):
            overflow.popleft()
            self._schedule_ring(disk)

    def _retry_overflow(self, disk: int) -> None:
        # a timer too, not only completions: the ring may have emptied without an answer to us
        self._drain_overflow(disk)
        if self._overflow[disk]:
            ring_doorbell(self.plumbing.disk_bells[disk])
            asyncio.get_running_loop().call_later(0.05, self._retry_overflow, disk)

    def _schedule_ring(self, disk: int) -> None:
        # coalesce doorbells: one eventfd write per disk per loop iteration (or per batch)
        if not self._to_ring and not self._batching:
            asyncio.get_running_loop().call_soon(self._ring_all)
        self._to_ring.add(disk)

    def begin_batch(self) -> None:
        """Hold doorbells until :meth:`end_batch` (the requests of one read go out together)."""
        self._batching = True

    def end_batch(self) -> None:
        self._batching = False
        if self._to_ring:
            self._ring_all()

    def _ring_all(self) -> None:
        for d in self._to_ring:
            ring_doorbell(self.plumbing.disk_bells[d])
        self._to_ring.clear()

    def pending(self) -> int:
        """Requests sent and not answered yet."""
        return len(self._pending)

    def want_data(self, wanted: int) -> None:
        """Ask every disk worker to ring us when offsets of the DataWanted kinds in ``wanted``
        move (long polls wait), or (0) stop asking."""
        for ch in self.channels:
            ch.completions.want_data(wanted)

    def on_doorbell(self) -> None:
        """Drain every completion ring; called when our eventfd fires."""
        drain_doorbell(self.plumbing.net_bells[self.net_index])
        for ch in self.channels:
            ring = ch.completions
            while True:
                try:
                    msg = ring.peek()
                except RingFormatError:
                    ring.discard_all()
                    break
                if msg is None:
                    break
                _, payload = msg
                request_id, base, lat, log_start, _slot, err = _COMP.unpack_from(payload, 0)
                body = bytes(payload[COMPLETION.size:]) if len(payload) > COMPLETION.size else b""
                del payload
                ring.release()
                entry = self._pending.pop(request_id, None)
                if entry is None and self._acks0:
                    entry = self._acks0.pop(request_id, None)
                if entry is not None:
                    self._deliver(entry, _tuple_new(Completion, (err, base, lat, log_start, body)))
        for d, overflow in enumerate(self._overflow):
            if overflow:
                self._drain_overflow(d)
        self.check_disks()

    def check_disks(self) -> None:
        """Fail what a dead disk worker held (its successor discards its request ring)."""
        for d, read in enumerate(self._workers):
            _, _, state, _, inc = read()
            if inc != self._incarnations[d] or state == _DEAD:
                self._incarnations[d] = inc
                self._overflow[d].clear()  # never queued: answered below like the rest
                for rid, entry in list(self._pending.items()):
                    if entry[2] == d:
                        del self._pending[rid]
                        self._deliver(entry, _REFUSED)

    @staticmethod
    def _deliver(entry: tuple, completion: Completion) -> None:
        try:
            entry[0](entry[1], completion)
        except Exception:  # one broken callback must not strand the other completions
            log.exception("completion callback failed")

    def close(self) -> None:
        for ch in self.channels:
            ch.close()
