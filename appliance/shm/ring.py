"""Single-producer single-consumer message rings in POSIX shared memory.

A :class:`Channel` is one shared-memory object holding two rings: requests (network worker ->
disk worker, or IPC producer -> disk worker) and completions (back). Each ring has exactly one
writer and one reader, so it needs no lock: the producer writes the message bytes, then publishes
the new ``tail``; the consumer reads up to ``tail``, processes the message in place (a produce
payload is appended to the segment straight from the ring, no copy), then publishes ``head``.

Positions are monotonic byte counts (they never wrap in 2^64); the slot of a position is
``pos % capacity``. A message never straddles the end of the data area: when it does not fit
before the end, the producer writes a PAD frame and starts over at 0.

Wake-ups are not here: the rings carry data, a doorbell (an eventfd or a datagram) says "look".
What is here is when to ring: a consumer about to sleep sets the header's ``waiting`` word and
re-checks the ring (:meth:`Ring.prepare_to_wait`); the producer, after publishing, rings only when
that word is set (:meth:`Ring.consumer_waiting`). A memory fence sits between each side's store and
load, so one of the two always sees the other: no wake-up is lost, and none is sent to a consumer
that is busy reading anyway.
"""

from __future__ import annotations

import mmap
import os
import struct

import posix_ipc

from appliance.shm.layout import (
    LAYOUT_VERSION,
    RING_HEADER,
    RING_MAGIC,
    RING_MESSAGE,
    DataWanted,
    MsgType,
)
from appliance.shm.mapping import release_mapped, unlink_mapped
from native.fence import memory_fence

__all__ = ["Ring", "Channel", "RingFormatError"]

_FRAME = RING_MESSAGE.struct  # type: ignore[attr-defined]
_FRAME_SIZE = RING_MESSAGE.size
_HEAD = RING_HEADER.offset("head")
_TAIL = RING_HEADER.offset("tail")
_WAITING = RING_HEADER.offset("waiting")
# head and tail are read and written as single aligned 8-byte words through a typed memoryview:
# struct.pack_into zero-fills its target before writing (CPython's s_pack_internal memsets it),
# so the other side could read a position passing through 0 or a partly written one.
assert _HEAD % 8 == 0 and _TAIL % 8 == 0 and _WAITING % 8 == 0 and RING_HEADER.size % 8 == 0
assert _HEAD < _WAITING < _TAIL
_TAIL_WORD = (_TAIL - _HEAD) // 8
_WAITING_WORD = (_WAITING - _HEAD) // 8
_WANTED_WORD = (RING_HEADER.offset("data_wanted") - _HEAD) // 8
assert 0 < _WANTED_WORD < _TAIL_WORD


class RingFormatError(RuntimeError):
    """The ring's bytes do not hold a valid frame: a misbehaving producer wrote garbage."""


class Ring:
    """One SPSC ring inside ``buf`` at ``base``: a RING_HEADER then ``capacity`` data bytes.

    Not thread-safe: one producer thread/process and one consumer thread/process.
    """

    def __init__(self, buf: mmap.mmap, base: int, capacity: int | None = None) -> None:
        self._buf = buf
        self._mv = memoryview(buf)
        self._base = base
        self._data = base + RING_HEADER.size
        if capacity is not None:  # initialise
            if capacity % 8:
                raise ValueError("ring capacity must be a multiple of 8")
            RING_HEADER.pack_into(buf, base, magic=RING_MAGIC, version=LAYOUT_VERSION, capacity=capacity)
        magic, version, cap = struct.unpack_from("=IIQ", buf, base)
        if magic != RING_MAGIC or version != LAYOUT_VERSION:
            raise RingFormatError(f"no ring of layout version {LAYOUT_VERSION} at {base}")
        self.capacity = cap
        self._pending = 0  # consumer: bytes of the message handed out by peek(), not yet released
        # producer: the last claim's tail position (past any PAD), frame offset and payload room
        self._claimed_tail = self._claimed_frame = 0
        self._claimed_length = -1
        # [0] head, [_WAITING_WORD] waiting, [_TAIL_WORD] tail
        self._pos = self._mv[base + _HEAD:base + _TAIL + 8].cast("Q")

    @staticmethod
    def footprint(capacity: int) -> int:
        return RING_HEADER.size + capacity

    # positions ---------------------------------------------------------------------------
    @property
    def head(self) -> int:
        return self._pos[0]

    @property
    def tail(self) -> int:
        return self._pos[_TAIL_WORD]

    @property
    def data_wanted(self) -> int:
        """The DataWanted bits of what the consumer asks to be woken by (0: nothing; see
        RING_HEADER)."""
        return self._pos[_WANTED_WORD]

    def want_data(self, wanted: int) -> None:
        """Consumer: ask to be woken by the published changes in ``wanted`` (DataWanted bits;
        True = every change, 0/False = none)."""
        self._pos[_WANTED_WORD] = DataWanted.LOG_END | DataWanted.ANY if wanted is True else int(wanted)

    def used(self) -> int:
        return self.tail - self.head

    def discard_all(self) -> None:
        """Consumer: drop everything queued (after the peer that queued it died)."""
        self._pos[0] = self.tail
        self._pending = 0

    # sleeping and waking -----------------------------------------------------------------
    def prepare_to_wait(self, sleepers: int = 1) -> bool:
        """Consumer, before it sleeps: publish that ``sleepers`` threads wait on this ring, then
        re-check it. True when a message is (or arrived) there: do not sleep on the doorbell."""
        self._pos[_WAITING_WORD] = sleepers
        memory_fence()  # the flag is visible before the tail is read (the producer: the reverse)
        return self._pos[_TAIL_WORD] != self._pos[0] + self._pending

    def done_waiting(self, sleepers: int = 0) -> None:
        """Consumer: awake again (``sleepers`` other threads still wait)."""
        self._pos[_WAITING_WORD] = sleepers

    def consumer_waiting(self) -> bool:
        """Producer, after :meth:`put`: whether the consumer sleeps and must be rung."""
        memory_fence()  # the tail is visible before the flag is read
        return self._pos[_WAITING_WORD] != 0

    # producer ----------------------------------------------------------------------------
    def max_message(self) -> int:
        """The largest payload that can ever fit (half the ring, so a PAD skip always fits too)."""
        return self.capacity // 2 - _FRAME_SIZE

    def put(self, msg_type: int, *parts: bytes | bytearray | memoryview) -> bool:
        """Append one message made of ``parts``. False when the ring has no room now.

        Raises ValueError when the message could never fit (see :meth:`max_message`).
        """
        length = 0
        for p in parts:
            length += len(p)
        pos = self._claim(length)
        if pos < 0:
            return False
        mv = self._mv
        for p in parts:
            n = len(p)
            mv[pos:pos + n] = p
            pos += n
        self._publish(msg_type, length)
        return True

    def reserve(self, length: int) -> memoryview | None:
        """Room for a message of up to ``length`` bytes, as a writable view of the ring to
        write it in place (an IPC producer builds its batch there: no copy), published by
        :meth:`commit`; None when the ring has no room now. Until commit the consumer sees
        nothing, and a reservation never committed is simply taken again by the next one.

        Raises ValueError as :meth:`put`."""
        pos = self._claim(length)
        return None if pos < 0 else self._mv[pos:pos + length]

    def commit(self, msg_type: int, length: int) -> None:
        """Publish the message written into the last :meth:`reserve`: its first ``length``
        bytes (no more than were reserved)."""
        if not 0 <= length <= self._claimed_length:
            raise ValueError(f"commit of {length} bytes into a reservation of {self._claimed_length}")
        self._publish(msg_type, length)

    def _claim(self, length: int) -> int:
        """Room at the tail for a message of ``length`` bytes: the offset in the buffer where
        its payload goes (a PAD frame written first when it does not fit before the end), or -1
        when there is none now. Nothing is published: :meth:`_publish` does that."""
        cap = self.capacity
        if length > cap // 2 - _FRAME_SIZE:  # max_message(), inline: this runs per request
            raise ValueError(f"message of {length} bytes exceeds ring limit {self.max_message()}")
        total = (_FRAME_SIZE + length + 7) & ~7
        pos_words = self._pos
        tail = pos_words[_TAIL_WORD]
        free = cap - (tail - pos_words[0])
        idx = tail % cap
        skip = cap - idx if idx + total > cap else 0
        if skip + total > free:
            return -1
        if skip:
            _FRAME.pack_into(self._buf, self._data + idx, 0, MsgType.PAD)
            idx = 0
        self._claimed_tail = tail + skip  # plain ints, no tuple: this runs per request
        self._claimed_frame = self._data + idx
        self._claimed_length = length
        return self._data + idx + _FRAME_SIZE

    def _publish(self, msg_type: int, length: int) -> None:
        _FRAME.pack_into(self._buf, self._claimed_frame, length, msg_type)
        self._claimed_length = -1  # one commit per claim
        # publish after the bytes: x86 does not reorder these stores
        self._pos[_TAIL_WORD] = self._claimed_tail + ((_FRAME_SIZE + length + 7) & ~7)

    # consumer ----------------------------------------------------------------------------
    def peek(self) -> tuple[int, memoryview] | None:
        """The next message as (type, payload view into the ring), or None if empty.

        The view stays valid until :meth:`release`. Raises RingFormatError on a frame that
        cannot be right (the caller should then :meth:`discard_all`).
        """
        if self._pending:
            raise RuntimeError("release() the previous message first")
        head = self._pos[0]
        tail = self._pos[_TAIL_WORD]
        if head == tail:  # the common answer when polled: no frame to look at
            return None
        cap = self.capacity
        while head < tail:
            idx = head % cap
            length, msg_type = _FRAME.unpack_from(self._buf, self._data + idx)
            if msg_type == MsgType.PAD:
                head += cap - idx
                self._pos[0] = head
                continue
            total = (_FRAME_SIZE + length + 7) & ~7
            if idx + total > cap or head + total > tail:
                raise RingFormatError(
                    f"frame at {head} claims {length} bytes, past the ring end or the tail")
            start = self._data + idx + _FRAME_SIZE
            self._pending = total
            return msg_type, self._mv[start:start + length]
        return None

    def release(self) -> None:
        """Consumer: done with the message from :meth:`peek`; its space may be reused."""
        self._pos[0] += self._pending
        self._pending = 0


class Channel:
    """A shared-memory object holding a request ring and a completion ring."""

    def __init__(self, shm: posix_ipc.SharedMemory, buf: mmap.mmap, create_capacity: tuple[int, int] | None):
        self._shm = shm
        self._buf = buf
        self.name = shm.name
        if create_capacity:
            req_cap, comp_cap = create_capacity
            self.requests = Ring(buf, 0, req_cap)
            self.completions = Ring(buf, Ring.footprint(req_cap), comp_cap)
        else:
            self.requests = Ring(buf, 0)
            self.completions = Ring(buf, Ring.footprint(self.requests.capacity))

    @classmethod
    def create(cls, name: str, request_capacity: int, completion_capacity: int,
               mode: int = 0o600) -> Channel:
        size = Ring.footprint(request_capacity) + Ring.footprint(completion_capacity)
        shm = posix_ipc.SharedMemory(name, posix_ipc.O_CREX, mode=mode, size=size)
        os.fchmod(shm.fd, mode)  # shm_open applies the umask; the mode is the access policy
        buf = mmap.mmap(shm.fd, size)
        return cls(shm, buf, (request_capacity, completion_capacity))

    @classmethod
    def attach(cls, name: str) -> Channel:
        shm = posix_ipc.SharedMemory(name)
        buf = mmap.mmap(shm.fd, shm.size)
        return cls(shm, buf, None)

    @property
    def fd(self) -> int:
        """The shared-memory object's descriptor (kept open while mapped)."""
        return self._shm.fd

    def close(self) -> None:
        for ring in (getattr(self, "requests", None), getattr(self, "completions", None)):
            if ring is not None:
                ring._pos.release()
                ring._mv.release()
        release_mapped(self._shm, self._buf)

    def unlink(self) -> None:
        unlink_mapped(self._shm)
