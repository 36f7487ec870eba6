"""The local IPC transport: hand whole record batches to the owning disk worker through shared memory.

No socket carries data: the producer claims a channel of its own in the disk worker's IPC
directory (``appliance.shm.ipc_directory``), writes each batch into the channel's request ring,
rings the disk worker's doorbell (an abstract Unix datagram socket) and waits for the completion
on its own ring. The disk worker validates every batch exactly as on the TCP path, so a producer
that writes garbage only gets its own batches refused.

If the disk worker dies, every send it had not acknowledged fails with NotLeaderOrFollowerError
(retriable): nothing is ever silently lost. Implements the Transport seam of
:mod:`appliance.client.transport` (``send_batch`` -> future with ``result()``/``done()``).

Thread-safety: two locks per disk link (sending, and collecting completions); futures may be
waited on from any thread.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import select
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import posix_ipc

from appliance.errors import (
    KafkaError,
    MessageTooLargeError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from appliance.shm.ipc_directory import IpcDirectory
from appliance.shm.layout import (
    COMPLETION,
    REQUEST,
    MsgType,
    SlotState,
    WorkerState,
    disk_wake_address,
)
from appliance.shm.partition_index import PartitionIndex
from appliance.shm.partition_table import PartitionTable

__all__ = ["IpcTransport", "IpcUnavailable", "find_broker_base", "open_ipc_transport", "SHM_NAME_FILE"]

SHM_NAME_FILE = ".appliance-shm-name"  # written by the broker into each log dir
_REQ = REQUEST.struct  # type: ignore[attr-defined]
_COMP = COMPLETION.struct  # type: ignore[attr-defined]


class IpcUnavailable(KafkaError):
    """No local broker to attach to (or no permission to): use TCP."""


class SendResult(NamedTuple):
    topic: str
    partition: int
    base_offset: int
    log_append_time: int


def find_broker_base(bootstrap_servers: str | None = None, shm_name: str | None = None,
                     log_dir: str | None = None) -> str | None:
    """The shared-memory base name of a broker on this host, from (in order) an explicit name,
    a log dir (the broker writes its name there), or a loopback bootstrap address's port."""
    if shm_name:
        return shm_name
    if log_dir:
        try:
            with open(os.path.join(log_dir, SHM_NAME_FILE)) as f:
                return f.read().strip() or None
        except OSError:
            return None
    for item in (bootstrap_servers or "").split(","):
        host, _, port = item.strip().rpartition(":")
        if not port.isdigit() or host.strip("[]") not in ("127.0.0.1", "localhost", "::1", socket.gethostname()):
            continue
        with contextlib.suppress(OSError):
            for name in sorted(os.listdir("/dev/shm")):
                if not name.endswith("-table"):
                    continue
                try:
                    table = PartitionTable.attach("/" + name, read_only=True)
                except (posix_ipc.ExistentialError, PermissionError, RuntimeError, ValueError, OSError):
                    continue  # not ours to read, or not a table of this layout
                try:
                    if table.port == int(port):
                        return name[:-len("-table")]
                finally:
                    table.close()
    return None


class _Future:
    __slots__ = ("link", "request_id", "topic", "partition", "incarnation", "_result", "_error", "deadline")

    def __init__(self, link: _DiskLink, request_id: int, topic: str, partition: int,
                 incarnation: int, deadline: float) -> None:
        self.link, self.request_id, self.topic, self.partition = link, request_id, topic, partition
        self.incarnation, self.deadline = incarnation, deadline
        self._result: SendResult | None = None
        self._error: BaseException | None = None

    def done(self) -> bool:
        return self._result is not None or self._error is not None

    def _set(self, result: SendResult | None, error: BaseException | None) -> None:
        self._result, self._error = result, error

    def result(self, timeout: float | None = None) -> SendResult:
        end = None if timeout is None else time.monotonic() + timeout
        while not self.done():
            if end is not None and time.monotonic() >= end:
                raise RequestTimedOutError(f"no acknowledgement within {timeout} s")
            self.link.poll(0.05 if end is None else max(0.0, min(0.05, end - time.monotonic())))
        if self._error is not None:
            raise self._error
        return self._result  # type: ignore[return-value]


class _DiskLink:
    """This producer's claimed channel to one disk worker."""

    def __init__(self, transport: IpcTransport, disk: int) -> None:
        self.t = transport
        self.disk = disk
        self.lock = threading.RLock()  # the completions and the pending futures
        # the request ring's producer side: a batch is built in the ring under it, without
        # holding up the thread that collects completions under ``lock``
        self.send_lock = threading.Lock()
        try:
            self.directory = IpcDirectory.attach(transport.base, disk)
        except (posix_ipc.ExistentialError, PermissionError) as e:
            raise IpcUnavailable(f"cannot attach to disk worker {disk} of broker '{transport.base}': {e}") from e
        self.wake = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.wake.setblocking(False)
        names: list[bytes] = []

        def wake_name(k: int, claim: int) -> bytes:
            name = f"\0{transport.base}-ipcp-{os.getpid()}-{disk}-{k}-{claim}".encode()
            self.wake.bind(name)
            names.append(name)
            return name

        claimed = self.directory.claim(wake_name)
        if claimed is None:
            raise IpcUnavailable(f"all IPC channels of disk worker {disk} are in use")
        self.claimed = claimed
        self.requests = claimed.channel.requests
        self.completions = claimed.channel.completions
        self.completions.discard_all()  # whatever the previous owner left unread
        self.completions.done_waiting()  # nor is its "waiting" flag ours
        self._sleepers = 0  # threads asleep in poll(), published in the completion ring's header
        self.disk_address = disk_wake_address(transport.base, disk)
        self._ids = itertools.count(1)
        self._id_base = (claimed.claim & 0xFFFF) << 48
        self.pending: dict[int, _Future] = {}

    def _worker(self) -> tuple[int, int]:
        _, _, state, _, inc = self.t.table.worker(self.disk)
        return state, inc

    def send(self, slot: int, topic: str, partition: int, batch: bytes | memoryview | None, acks: int,
             timeout_ms: int, build: Callable[[memoryview], int] | None = None, bound: int = 0) -> _Future:
        """Queue ``batch``; or, with ``build``, a batch of at most ``bound`` bytes that
        ``build(view)`` writes straight into the ring and whose length it returns (no copy)."""
        deadline = time.monotonic() + timeout_ms / 1000
        if build is not None and REQUEST.size + bound > self.requests.max_message():
            scratch = memoryview(bytearray(bound))  # the bound does not fit: build aside, then
            batch, build = scratch[:build(scratch)], None  # the size it has is the one checked
        size = bound if build is not None else len(batch)  # type: ignore[arg-type]
        with self.send_lock:
            state, inc = self._worker()
            if state != WorkerState.READY:
                raise NotLeaderOrFollowerError(
                    f"disk worker {self.disk} holding {topic}-{partition} is not running (restarting?)")
            if REQUEST.size + size > self.requests.max_message():
                # a KafkaError, as the broker's answer to an oversized request would be: a
                # ValueError from the ring killed the producer's sender thread
                raise MessageTooLargeError(
                    f"batch of {size} bytes for {topic}-{partition} is over the IPC ring's "
                    f"limit of {self.requests.max_message() - REQUEST.size} bytes")
            rid = self._id_base | next(self._ids)
            fut = _Future(self, rid, topic, partition, inc, deadline)
            while (view := self.requests.reserve(REQUEST.size + size)) is None:
                self._ring_disk()
                if time.monotonic() >= deadline:
                    raise RequestTimedOutError(f"IPC ring to disk worker {self.disk} stayed full for {timeout_ms} ms")
                self.poll(0.001)
            _REQ.pack_into(view, 0, rid, slot, acks, 0, timeout_ms, 0)
            if build is None:
                view[REQUEST.size:] = batch
            else:
                size = build(view[REQUEST.size:])  # raises: nothing was published
            del view  # (the ring's mapping cannot close while a view of it lives)
            with self.lock:  # known before the disk worker can see it, let alone complete it
                self.pending[rid] = fut
            self.requests.commit(MsgType.PRODUCE, REQUEST.size + size)
            self._ring_disk()
            return fut

    def _ring_disk(self) -> None:
        with contextlib.suppress(OSError):  # a full socket buffer means it is awake anyway
            self.wake.sendto(b"\0", self.disk_address)

    def poll(self, timeout: float) -> None:
        """Collect completions (waiting up to ``timeout`` s for a wake-up); fail what a dead worker held.

        The disk worker sends the wake-up datagram only while the completion ring's header says
        someone sleeps here (the ring's prepare_to_wait handshake), not after every round it
        answers. The sleep holds no lock, so sends go on meanwhile."""
        with self.lock:
            sleep = not self._drain() and bool(self.pending) and timeout > 0
            if sleep:
                self._sleepers += 1
                sleep = not self.completions.prepare_to_wait(self._sleepers)
                if not sleep:  # completions arrived between the drain and the flag
                    self._sleepers -= 1
                    self.completions.done_waiting(self._sleepers)
                    self._drain()
        if sleep:
            with contextlib.suppress(InterruptedError, ValueError, OSError):  # closed meanwhile
                select.select([self.wake], [], [], timeout)
            with self.lock:
                self._sleepers -= 1
                self.completions.done_waiting(self._sleepers)
                if not self._sleepers:  # the last one out empties the socket: others still see it readable
                    with contextlib.suppress(BlockingIOError, OSError):
                        while self.wake.recv(64):
                            pass
                self._drain()
        with self.lock:
            self._check_worker()

    def _drain(self) -> int:
        n = 0
        while True:
            msg = self.completions.peek()
            if msg is None:
                return n
            _, payload = msg
            rid, base, lat, _lso, _slot, err = _COMP.unpack_from(payload, 0)
            del payload
            self.completions.release()
            fut = self.pending.pop(rid, None)
            if fut is None:
                continue  # meant for this channel's previous owner, or already failed
            n += 1
            if err:
                fut._set(None, error_for_code(err)(
                    f"broker refused the batch for {fut.topic}-{fut.partition}: error {err}"))
            else:
                fut._set(SendResult(fut.topic, fut.partition, base, lat), None)

    def _check_worker(self) -> None:
        if not self.pending:
            return
        state, inc = self._worker()
        now = time.monotonic()
        for rid, fut in list(self.pending.items()):
            if fut.incarnation != inc or state == WorkerState.DEAD:
                del self.pending[rid]
                fut._set(None, NotLeaderOrFollowerError(
                    f"disk worker {self.disk} died before acknowledging the batch for "
                    f"{fut.topic}-{fut.partition}; it was not acknowledged (retry it)"))
            elif now > fut.deadline:
                del self.pending[rid]
                fut._set(None, RequestTimedOutError(
                    f"no acknowledgement for {fut.topic}-{fut.partition} within the request timeout"))

    def close(self) -> None:
        with self.send_lock, self.lock:
            self.claimed.close()
            self.directory.close()
            self.wake.close()


class IpcTransport:
    """Produce to a broker on this host through shared memory (see the module docstring)."""

    def __init__(self, base: str) -> None:
        self.base = base
        try:
            self.table = PartitionTable.attach(f"/{base}-table", read_only=True)
        except (posix_ipc.ExistentialError, PermissionError, RuntimeError) as e:
            raise IpcUnavailable(f"no local broker with shared memory '{base}': {e}") from e
        self.index = PartitionIndex(self.table)
        self._links: dict[int, _DiskLink] = {}
        self._lock = threading.Lock()

    def _link(self, disk: int) -> _DiskLink:
        with self._lock:
            link = self._links.get(disk)
            if link is None:
                link = self._links[disk] = _DiskLink(self, disk)
            return link

    def send_batch(self, topic: str, partition: int, batch: bytes | memoryview, *, acks: int = 1,
                   timeout_ms: int = 30000) -> _Future:
        """Queue one v2 batch (or several back to back) for ``topic``-``partition``; returns a future.

        Raises UnknownTopicOrPartitionError, NotLeaderOrFollowerError (worker down), RequestTimedOutError,
        MessageTooLargeError (over the channel ring's limit)."""
        link, slot = self._locate(topic, partition)
        return link.send(slot, topic, partition, batch, acks, timeout_ms)

    def send_built(self, topic: str, partition: int, bound: int, build: Callable[[memoryview], int], *,
                   acks: int = 1, timeout_ms: int = 30000) -> _Future:
        """As :meth:`send_batch`, for a batch of at most ``bound`` bytes that ``build(view)``
        writes into the given view and whose length it returns: it is built in the request ring
        itself, so the only copy of the records is the one the disk worker appends. ``build``
        must write the same bytes every time it is called (a retry calls it again)."""
        link, slot = self._locate(topic, partition)
        return link.send(slot, topic, partition, None, acks, timeout_ms, build, bound)

    def _locate(self, topic: str, partition: int) -> tuple[_DiskLink, int]:
        """The link to the disk worker holding ``topic``-``partition``, and its slot there."""
        info = self.index.lookup(topic, partition)
        if info is None:
            raise UnknownTopicOrPartitionError(f"{topic}-{partition} does not exist on broker '{self.base}'")
        if self.table.state(info.slot) != SlotState.ONLINE:
            raise NotLeaderOrFollowerError(f"{topic}-{partition} is offline (its disk worker is recovering)")
        return self._link(info.disk), info.slot

    def partitions_for(self, topic: str) -> int:
        parts = self.index.partitions(topic)
        return len(parts) if parts else 0

    def close(self) -> None:
        for link in self._links.values():
            link.close()
        self._links.clear()
        self.table.close()

    def __enter__(self) -> IpcTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_ipc_transport(bootstrap_servers: str | None = None, config: dict[str, Any] | None = None) -> IpcTransport | None:
    """An IpcTransport to the broker named by ``config`` (``shm.name`` or ``log.dir``) or found
    from a loopback bootstrap address; None when there is no local broker."""
    config = config or {}
    base = find_broker_base(bootstrap_servers, config.get("shm.name"), config.get("log.dir"))
    if base is None:
        return None
    try:
        return IpcTransport(base)
    except IpcUnavailable:
        return None

