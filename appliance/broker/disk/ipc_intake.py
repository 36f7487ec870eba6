"""The channels of local IPC producers (appliance/client/ipc.py): produce requests only, each
answered on its channel's completion ring, the producer woken by a datagram when it sleeps.

A producer sends a wake-up datagram after every put, so the channels are looked at only after
one arrived (or when the last look left work), and at least every SWEEP_INTERVAL_S: not on
every round of the worker, which under network traffic is once per request.

With ``authorizer.class.name`` set, each produce is authorized as a TCP one is (Write on the
topic) for the principal the kernel says holds the channel (``ipc_principal.py``), from host
127.0.0.1; a refusal is TOPIC_AUTHORIZATION_FAILED, logged once per claim and topic."""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
import time
from collections.abc import Callable

from appliance.broker.disk.ipc_principal import ChannelPrincipals
from appliance.broker.disk.requests import Requests
from appliance.broker.disk.ring_intake import ROUND_LIMIT
from appliance.errors import ErrorCode
from appliance.security.acl import TOPIC, WRITE, Authorizer
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
LOCAL_HOST = "127.0.0.1"  # the host an IPC producer's ACLs are matched against


class IpcIntake:
    def __init__(self, base: str, index: int, incarnation: int, requests: Requests,
                 authorizer: Authorizer | None = None, topic_of: Callable[[int], str] | None = None) -> None:
        self.requests = requests
        self.authorizer = authorizer
        self.topic_of = topic_of  # a slot's topic name (the partition table's)
        self.principals = ChannelPrincipals()
        self._denials_logged: set[tuple[int, int, str]] = set()
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
                    if msg_type != MsgType.PRODUCE:
                        comp = _refuse(payload)
                    elif self.authorizer is not None and not self._allowed(k, payload):
                        comp = _refuse(payload, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                    else:
                        comp = self.requests.handle(None, msg_type, payload)
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

    def _allowed(self, k: int, payload: memoryview) -> bool:
        """Write on the produce's topic for the channel holder's principal."""
        if len(payload) < REQUEST.size:
            return True  # malformed: the request handler refuses it
        slot = _REQ.unpack_from(payload, 0)[1]
        try:
            topic = self.topic_of(slot) if self.topic_of is not None else ""
        except (IndexError, ValueError, struct.error):
            return True  # no such slot: the request handler answers it
        _, claim, _ = self.ipc_dir.slot(k)
        principal = self.principals.of(k, claim, self.channels[k].fd)
        if principal is not None and self.authorizer.allowed(principal, LOCAL_HOST, WRITE, TOPIC, topic):
            return True
        if self.requests.metrics is not None:
            self.requests.metrics.authorization_denied()
        if (k, claim, topic) not in self._denials_logged:
            if len(self._denials_logged) > 10_000:
                self._denials_logged.clear()
            self._denials_logged.add((k, claim, topic))
            log.warning("IPC channel %d: %s may not Write topic %s: TOPIC_AUTHORIZATION_FAILED", k,
                        principal or "a producer the kernel does not name", topic)
        return False

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


def _refuse(payload: memoryview, error: int = ErrorCode.INVALID_REQUEST) -> bytes:
    """Local producers may only produce (and only where allowed)."""
    request_id, slot = _REQ.unpack_from(payload, 0)[:2] if len(payload) >= REQUEST.size else (0, -1)
    return _COMP.pack(request_id, -1, -1, -1, slot, int(error))
