"""The channels of local IPC producers (appliance/client/ipc.py): produce requests only, each
answered on its channel's completion ring, the producer woken by a datagram when it sleeps.

A producer sends a wake-up datagram after every put, so the channels are looked at only after
one arrived (or when the last look left work), and at least every SWEEP_INTERVAL_S: not on
every round of the worker, which under network traffic is once per request."""

from __future__ import annotations

import contextlib
import logging
import socket
import time

from appliance.broker.disk.requests import Requests
from appliance.broker.disk.ring_intake import ROUND_LIMIT
from appliance.errors import ErrorCode
from appliance.shm.ipc_directory import IpcDirectory
from appliance.shm.layout import (
    COMPLETION,
    IPC_CHANNELS,
    REQUEST,
    MsgType,
    disk_wake_address,
    ipc_channel_name,
)
from appliance.shm.ring import Channel, RingFormatError

__all__ = ["IpcIntake"]

log = logging.getLogger("appliance.disk")

_REQ = REQUEST.struct  # type: ignore[attr-defined]
SWEEP_INTERVAL_S = 0.1  # a lost wake-up delays a request at most this long (the loop's idle wait)
_COMP = COMPLETION.struct  # type: ignore[attr-defined]


class IpcIntake:
    def __init__(self, base: str, index: int, incarnation: int, requests: Requests) -> None:
        self.requests = requests
        self.ipc_dir = IpcDirectory.attach(base, index)
        self.channels = [Channel.attach(ipc_channel_name(base, index, k)) for k in range(IPC_CHANNELS)]
        for ch in self.channels:
            # a producer fails what it queued for our dead predecessor (it watches the incarnation)
            ch.requests.discard_all()
        self.ipc_dir.set_worker_incarnation(incarnation)
        # producers wake us with a datagram here; the worker's loop polls it
        self.wake_sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.wake_sock.bind(disk_wake_address(base, index))
        self.wake_sock.setblocking(False)
        self.due = True  # a wake-up came (or work was left) since the channels were last looked at
        self._next_sweep = 0.0

    def drain_wakeups(self) -> None:
        self.due = True
        with contextlib.suppress(BlockingIOError, OSError):
            while self.wake_sock.recv(64):
                pass

    def drain(self) -> tuple[int, bool]:
        """One round over every channel: (requests handled, whether a channel was left with
        requests at ROUND_LIMIT: its producer will not wake us for them)."""
        if not self.due and time.monotonic() < self._next_sweep:
            return 0, False
        self.due = False
        self._next_sweep = time.monotonic() + SWEEP_INTERVAL_S
        handled = 0
        more = False
        for k, ch in enumerate(self.channels):
            ring = ch.requests
            if ring.head == ring.tail:
                continue
            for _ in range(ROUND_LIMIT):
                if ch.completions.capacity - ch.completions.used() < 4096:
                    # its producer is not reading its acknowledgements: leave its requests queued
                    # rather than block this worker (and every other producer) on it; look
                    # again next round
                    self.due = True
                    break
                try:
                    msg = ring.peek()
                except RingFormatError as e:
                    log.warning("IPC channel %d: producer pid %d wrote garbage (%s): discarding its queue",
                                k, self.ipc_dir.slot(k)[0], e)
                    ring.discard_all()
                    break
                if msg is None:
                    break
                msg_type, payload = msg
                try:
                    comp = self.requests.handle(None, msg_type, payload) if msg_type == MsgType.PRODUCE \
                        else _refuse(payload)
                finally:
                    del payload
                    ring.release()
                handled += 1
                if comp is not None:
                    ch.completions.put(MsgType.COMPLETION, comp)  # room was checked above
                    # at once, not at the end of the round: a producer asleep on its
                    # acknowledgements builds its next batches while this worker appends the
                    # rest of the round (measured: woken once per round, it learnt of its 5
                    # batches in flight all at once and the worker then idled 13-14 % of a bulk
                    # run; perf/README.md, bench_ipc.py)
                    self._wake_producer(k)
            else:
                more = self.due = True
        return handled, more

    def _wake_producer(self, k: int) -> None:
        # only a producer asleep on its completions needs the datagram (measured: waking one after
        # every round, asleep or not, was a third of this worker's time in a bulk run); the ring's
        # fence orders the completions' publication before this read of its flag
        if not self.channels[k].completions.consumer_waiting():
            return
        pid, _, name = self.ipc_dir.slot(k)
        if pid and name:
            with contextlib.suppress(OSError):  # gone, or its socket buffer is full: it will poll
                self.wake_sock.sendto(b"\0", name)

    def close(self) -> None:
        self.wake_sock.close()
        for ch in self.channels:
            ch.close()


def _refuse(payload: memoryview) -> bytes:
    """Local producers may only produce."""
    request_id, slot = _REQ.unpack_from(payload, 0)[:2] if len(payload) >= REQUEST.size else (0, -1)
    return _COMP.pack(request_id, -1, -1, -1, slot, int(ErrorCode.INVALID_REQUEST))
