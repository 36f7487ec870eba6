"""The network worker: the asyncio I/O shell around the sans-I/O protocol module (model: uvicorn).

Every network worker listens on the same port (SO_REUSEPORT: the kernel spreads connections).
A :class:`KafkaConnection` feeds received bytes to a protocol ``ServerConnection``, runs one task
per request (so a producer's pipelined requests proceed together) and writes the responses back
strictly in request order, as Kafka clients require. Fetch responses go out with ``sendfile``
straight from the segment files.

SIGTERM: stop accepting, let in-flight requests finish (bounded), exit. SIGQUIT: exit at once.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import functools
import logging
import os
import signal
import socket
import time
from typing import Any

import setproctitle

import appliance.protocol as proto
from appliance.broker import handlers
from appliance.broker.acceptor import Acceptor
from appliance.broker.broker_context import BrokerContext
from appliance.broker.connection_limits import ConnectionLimits
from appliance.broker.door import ConnectionContext, Door, Refusal, RequestContext
from appliance.broker.handlers.answer import CloseConnection
from appliance.broker.handlers.answer import encode as encode_answer
from appliance.broker.handlers.produce_fast import FastProduce
from appliance.broker.idle_connections import reap_idle_connections
from appliance.broker.request_memory import RequestMemory
from appliance.broker.request_queue import RequestQueue
from appliance.config import BrokerConfig, ConfigError
from appliance.errors import ErrorCode
from appliance.metrics.listener import parse_listener
from appliance.metrics.recorder import AnswerTiming, attach_recorder
from appliance.process.disk_client import DiskClient
from appliance.process.event_loop import run_event_loop
from appliance.process.exit_codes import EXIT_BOOT_ERROR, EXIT_OK
from appliance.process.gc_policy import freeze_startup_objects
from appliance.process.plumbing import Plumbing
from appliance.process.producer_ids import block_source, take_first_block
from appliance.protocol.frames import SIZE
from appliance.protocol.types import FileSlice
from appliance.security.sasl import AUTHENTICATE as SASL_AUTHENTICATE
from appliance.security.sasl import COMPLETE as SASL_COMPLETE
from appliance.security.sasl import FAILED as SASL_FAILED
from appliance.security.sasl import SaslAuthenticator, uses_sasl
from appliance.security.tls import PrincipalRules, TlsError, principal_of, server_context, uses_tls
from appliance.shm.connection_counts import ConnectionCounts
from appliance.shm.layout import WorkerState, conns_name
from appliance.shm.partition_table import PartitionTable

__all__ = ["NetworkWorker", "KafkaConnection"]

log = logging.getLogger("appliance.network")

MAX_IN_FLIGHT = 64  # per connection; past it we stop reading (backpressure, uvicorn's FlowControl)
# An answer whose file slices hold at most this many bytes is read with pread and sent with its
# frame in one write. sendfile pays off for large slices; for small ones (a follower's fetch
# under acks=all, a consumer at the tail) each slice was its own send in a writer task: the
# reader woke for every piece of the frame (header, slice, next header, slice ...).
INLINE_SLICE_BYTES = 64 << 10
# A slice sendfile could not finish (the socket buffer is full) goes on this many bytes at a
# time through the transport, which then tells us when the socket has room again.
SENDFILE_STEP = 64 << 10
# A file slice sent over TLS (no sendfile: the bytes must be encrypted in this process) is read
# and written this many bytes at a time: large enough that the per-write cost is spread over
# many TLS records (16 KiB each), small enough to bound a connection's buffered memory.
TLS_READ_STEP = 256 << 10
STOP_GRACE_S = 5.0
API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE_API = 18, 17, 36
_SASL_APIS = frozenset({SASL_HANDSHAKE, SASL_AUTHENTICATE_API})


def _read_slice(readers: Any, sl: FileSlice) -> bytes | None:
    """A file slice's bytes, or None when they cannot all be read (the writer task's sendfile
    meets the same fault and closes the connection, as for any slice)."""
    try:
        fd = sl.fd_or_path if isinstance(sl.fd_or_path, int) else readers.file(sl.fd_or_path).fileno()
        data = os.pread(fd, sl.length, sl.position)
    except OSError:
        return None
    return data if len(data) == sl.length else None


def _inlined(readers: Any, chunks: Any) -> list | None:
    """``chunks`` with their file slices read into bytes when they are small
    (INLINE_SLICE_BYTES), else None."""
    if isinstance(chunks, bytes | bytearray | memoryview):
        return None
    total = 0
    for c in chunks:
        if type(c) is FileSlice:
            total += c.length
        elif not isinstance(c, bytes | bytearray | memoryview):
            return None
    if total > INLINE_SLICE_BYTES:
        return None
    out = []
    for c in chunks:
        if type(c) is FileSlice:
            c = _read_slice(readers, c)
            if c is None:
                return None
        out.append(c)
    return out


def _retrieved(fut: asyncio.Future) -> None:
    if not fut.cancelled():
        fut.exception()


def _all_bytes(chunks: object) -> bool:
    if chunks is None or isinstance(chunks, bytes | bytearray | memoryview):
        return True
    return all(isinstance(c, bytes | bytearray | memoryview) for c in chunks)


class KafkaConnection(asyncio.Protocol):
    """One client connection, accepted on ``listener`` (default: the broker's first)."""

    def __init__(self, ctx: BrokerContext, listener: ConnectionContext | None = None) -> None:
        self.ctx = ctx
        # what the door and the handlers know of this connection; the address comes on accept
        self.context: ConnectionContext = listener or ctx.listeners[0]
        self.door: Door = ctx.door
        self.conn = proto.ServerConnection(max_request_size=int(ctx.config["socket.request.max.bytes"]),
                                           extra_apis=ctx.extra_apis)
        self.transport: asyncio.Transport | None = None
        self._responses: collections.deque[asyncio.Future] = collections.deque()
        self._writer: asyncio.Task | None = None
        self._paused = False
        self._closing = False
        self._stop_reading = False  # the peer broke the protocol or half-closed: drain, then close
        self._sock_fd = -1
        self._tls = False
        self.sasl: SaslAuthenticator | None = None  # a SASL listener's exchange, from the accept
        self._session_ends = 0.0  # monotonic end of the SASL session (0: none)
        self._drained = asyncio.Event()
        # metrics only: the timed requests' answers (future -> AnswerTiming), and the timed
        # answers written but still partly in the transport's buffer (sent when it drains)
        self.timed: dict[asyncio.Future, AnswerTiming] = {}
        self._sending: list[AnswerTiming] = []
        # connection limits: the address key this connection counts under (set by the
        # Acceptor), and whether it still counts (released once, on close)
        self.limit_key: tuple[int, int] | None = None
        self._counted = ctx.limits is not None
        # queued.max.request.bytes: the size of each queued request, beside self._responses
        self._mem = ctx.request_memory
        self._held: collections.deque[int] = collections.deque()
        # queued.max.requests: the worker's count of unanswered requests
        self._bound = ctx.request_queue
        # why reading is muted (queued.max.request.bytes, queued.max.requests): read again
        # only once every reason has gone
        self._mutes: set[str] = set()
        # connections.max.idle.ms: when this connection last read or wrote (idle_connections.py)
        self.last_active = time.monotonic()

    # asyncio.Protocol ---------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        # kept: asyncio.get_running_loop() makes a getpid() system call each time (CPython 3.11)
        self._loop = asyncio.get_running_loop()
        sock = transport.get_extra_info("socket")
        self._sock_fd = -1
        tls = transport.get_extra_info("ssl_object")
        if tls is not None:  # TLS: the principal from the client's certificate, if it gave one
            name = principal_of(tls, self.ctx.principal_rules)
            if name is not None:
                self.context = dataclasses.replace(self.context, principal=f"User:{name}")
        if uses_sasl(self.context.security_protocol):
            self.sasl = self.ctx.authenticator(self.context.listener)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                for opt, key in ((socket.SO_SNDBUF, "socket.send.buffer.bytes"),
                                 (socket.SO_RCVBUF, "socket.receive.buffer.bytes")):
                    if self.ctx.config[key] > 0:  # -1: the OS default
                        sock.setsockopt(socket.SOL_SOCKET, opt, self.ctx.config[key])
            # sendfile would put file bytes on a TLS connection unencrypted: TLS goes through
            # the transport (_sendfile's read-and-write path)
            self._sock_fd = sock.fileno() if tls is None else -1
        self._drained = asyncio.Event()
        self._drained.set()
        self._tls = tls is not None
        if self._tls:
            # a TLS transport pauses on its own backlog of records; with no room at all it can
            # pause after a write it has already flushed and never resume (seen with asyncio's
            # and uvloop's SSL transports), so it gets a window of a read step
            transport.set_write_buffer_limits(high=TLS_READ_STEP, low=TLS_READ_STEP // 2)  # type: ignore[attr-defined]
        else:
            # pause_writing as soon as anything is buffered, resume when the buffer is empty:
            # that is exactly when the socket is ours for a direct sendfile
            transport.set_write_buffer_limits(high=0, low=0)  # type: ignore[attr-defined]
        self.ctx.connections.add(self)
        peer = transport.get_extra_info("peername")
        if peer:
            self.context = dataclasses.replace(self.context, client_address=str(peer[0]))

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        self.ctx.connections.discard(self)
        if self._bound is not None:
            self._bound.forget(self)
            self._bound.free(self, len(self._responses))
        if self._mem is not None:
            self._mem.forget(self)
            self._mem.free(sum(self._held))
            self._held.clear()
        self.release_limits()
        # handlers still running finish on their own (each is bounded by its timeout); their
        # answers are dropped. Cancelling them would abandon futures mid-gather. A dropped one
        # that fails (the request that closed the connection had others queued behind it) has
        # its exception retrieved, not logged by asyncio as "never retrieved".
        for fut in self._responses:
            fut.add_done_callback(_retrieved)
        self._responses.clear()
        self.timed.clear()
        self._sending.clear()
        self._drained.set()
        if self._writer is not None:
            self._writer.cancel()

    def release_limits(self) -> None:
        """This connection no longer counts against max.connections(.per.ip) (once)."""
        if self._counted:
            self._counted = False
            limits = self.ctx.limits
            limits.give_back()
            if self.limit_key is not None:
                limits.release(self.limit_key)
            for acceptor in self.ctx.acceptors:  # max.connections is shared by the listeners
                acceptor.connection_closed()

    def mute(self, reason: str = "queued.max.request.bytes") -> None:
        """A bound of the worker is reached (``reason`` names its key): read nothing more
        until it frees."""
        self._mutes.add(reason)
        if self.transport is not None and not self._closing:
            self.transport.pause_reading()

    def unmute(self, reason: str = "queued.max.request.bytes") -> None:
        self._mutes.discard(reason)
        if not (self._mutes or self._paused or self._stop_reading or self._closing) \
                and self.transport is not None:
            self.transport.resume_reading()

    def waiting(self) -> int:
        """Requests read and not yet answered (queued.max.requests counts them)."""
        return len(self._responses)

    def idle_since(self) -> float:
        """When this connection went idle (monotonic s): its last read or write, if nothing is
        waiting for an answer; else infinity (a long poll in progress is not idleness)."""
        if self._responses or self._writer is not None and not self._writer.done():
            return float("inf")
        return self.last_active

    def close_idle(self) -> None:
        """connections.max.idle.ms passed with nothing read or written: close."""
        self._closing = True
        if self.transport is not None:
            self.transport.close()

    def pause_writing(self) -> None:
        self._drained.clear()

    def resume_writing(self) -> None:
        self._drained.set()
        if self._sending:  # the last byte of these answers has just gone to the kernel
            self._sent(self._sending)
            self._sending = []

    def _sent(self, timings: list[AnswerTiming]) -> None:
        done = time.monotonic()
        sent = self.ctx.metrics.sent
        for t in timings:
            sent(t, done)

    def _written(self, timings: list[AnswerTiming]) -> None:
        """``timings``' answers were handed to the transport: sent now if it took every byte,
        else when it drains (resume_writing)."""
        if self._tls or (self.transport is not None and self.transport.get_write_buffer_size() == 0):
            # (TLS: sent once the transport has them; it tells of its backlog only past a window)
            self._sent(timings)
        else:
            self._sending.extend(timings)

    async def _sendfile(self, f, position: int, length: int) -> None:
        """os.sendfile straight from the page cache to the socket while the kernel takes the
        bytes (asyncio's loop.sendfile costs several times more Python per slice; measured 29 %
        of fetch CPU was Python, and uvloop has none). When the socket buffer fills, the next
        SENDFILE_STEP bytes go through the transport, which waits for the socket to take them:
        the transport owns the descriptor, so that is how we learn it is writable again.
        Raises EOFError if the file ends inside the slice."""
        await self._drained.wait()
        fd = f.fileno()
        if self._sock_fd < 0:  # TLS: read from the page cache, encrypt in the transport
            while length > 0 and not self._closing:
                step = os.pread(fd, min(length, TLS_READ_STEP), position)
                if not step:
                    raise EOFError(f"file ends {length} bytes short of the slice at {position}")
                self.transport.write(step)  # type: ignore[union-attr]
                position += len(step)
                length -= len(step)
                await self._drained.wait()
            return
        while length > 0 and not self._closing:
            try:
                n = os.sendfile(self._sock_fd, fd, position, length)
            except BlockingIOError:
                n = len(step := os.pread(fd, min(length, SENDFILE_STEP), position))
                if n:
                    self.transport.write(step)  # type: ignore[union-attr]
                    position += n
                    length -= n
                    await self._drained.wait()
                    continue
            if n == 0:
                raise EOFError(f"file ends {length} bytes short of the slice at {position}")
            position += n
            length -= n

    def data_received(self, data: bytes) -> None:
        if self._stop_reading:
            return
        self.last_active = time.monotonic()
        fast = self.ctx.fast_produce if not self._closing else None
        if self.sasl is not None and self._needs_sasl():
            if self._stop_reading:  # its session ran out: closing
                return
            fast = None  # the exchange first: the request loop admits only its requests
        if fast is not None:
            frame = self.conn.frame_at(data, 0)
            if frame is None:
                fast = None  # a partial frame, or bytes already buffered: the generic path
            elif len(frame) + 4 == len(data):  # one request in this read, the usual case
                if self._try_fast(fast, frame):
                    return
                fast = None
        disks = self.ctx.disks
        disks.begin_batch()  # every request of this read reaches its disk with one doorbell
        try:
            if fast is not None:  # pipelined requests: the fast path takes what it can in order
                taken = self._take_fast(fast, data)
                if taken == len(data):
                    return
                if taken:
                    data = memoryview(data)[taken:]
            self.conn.receive_data(data)
            self._serve_events()
        except (proto.RemoteProtocolError, proto.LocalProtocolError) as e:
            log.info("closing connection from %s: %s", self._peer(), e)
            self._close_after_responses()
        finally:
            disks.end_batch()

    def _serve_events(self) -> None:
        """Dispatch every whole request fed to the protocol state machine, in order. Raises
        the protocol's errors (the caller closes the connection)."""
        sasl = self.sasl
        while not self._closing and not self._stop_reading:
            if sasl is not None and sasl.v0 and sasl.state == SASL_AUTHENTICATE:
                if not self._sasl_token():  # after a v0 handshake: a bare token frame
                    break
                continue
            event = self.conn.next_event()
            if event is proto.NEED_DATA:
                break
            if event is proto.PEER_CLOSED:
                self._close_after_responses()
                break
            if isinstance(event, proto.RejectedRequest):
                self._reject(event)
                continue
            if sasl is not None:  # a SASL listener: the exchange, or a re-authentication
                if event.api_key in _SASL_APIS:
                    self._sasl_request(event)
                    continue
                if sasl.state != SASL_COMPLETE and event.api_key != API_VERSIONS:
                    log.info("closing connection from %s on listener %s: request (api key %d) "
                             "before SASL authentication", self._peer(), self.context.listener,
                             event.api_key)
                    self._close_after_responses()
                    break
            self._dispatch(event)

    # -- SASL (SASL_PLAINTEXT / SASL_SSL listeners) ------------------------------------------
    def _needs_sasl(self) -> bool:
        """True until the client has authenticated, and again once its session (KIP-368,
        connections.max.reauth.ms) has run out without a re-authentication (then it closes)."""
        sasl = self.sasl
        if sasl.state != SASL_COMPLETE:
            return True
        if self._session_ends and time.monotonic() > self._session_ends:
            log.info("closing connection from %s (%s): its SASL session expired without a "
                     "re-authentication", self._peer(), self.context.principal)
            self._close_after_responses()
            return True
        return False

    def _sasl_token(self) -> bool:
        """One bare token frame after a v0 SaslHandshake, answered as bare as it came. False when
        the loop must stop: no whole frame yet, the peer closed, or the exchange failed (v0 has
        no error answer: the connection closes)."""
        frame = self.conn.next_raw_frame()
        if frame is proto.NEED_DATA:
            return False
        if frame is proto.PEER_CLOSED:
            self._close_after_responses()
            return False
        code, _, out = self.sasl.authenticate(frame)
        if code:
            self._sasl_failed()
            return False
        self._answer_now([SIZE.pack(len(out)), out])
        self._after_sasl_step()
        return True

    def _sasl_request(self, event: proto.Request) -> None:
        sasl = self.sasl
        if event.api_key == SASL_HANDSHAKE:
            body = sasl.handshake(event.api_version, event.body.mechanism)
        else:
            if sasl.v0:  # after a v0 handshake tokens come bare, not in requests
                sasl.state, sasl.error = SASL_FAILED, "SaslAuthenticate after a v0 SaslHandshake"
                body = {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "error_message": sasl.error,
                        "auth_bytes": b"", "session_lifetime_ms": 0}
            else:
                code, message, out = sasl.authenticate(bytes(event.body.auth_bytes))
                lifetime = int(self.ctx.config["connections.max.reauth.ms"])
                body = {"error_code": code, "error_message": message, "auth_bytes": out,
                        "session_lifetime_ms": lifetime if sasl.state == SASL_COMPLETE else 0}
        self._answer_now(encode_answer(event, body))
        if sasl.state == SASL_FAILED:
            self._sasl_failed()
        else:
            self._after_sasl_step()

    def _after_sasl_step(self) -> None:
        sasl = self.sasl
        if sasl.state == SASL_COMPLETE:
            self.context = dataclasses.replace(self.context, principal=sasl.principal)
            lifetime = int(self.ctx.config["connections.max.reauth.ms"])
            self._session_ends = time.monotonic() + lifetime / 1000 if lifetime > 0 else 0.0

    def _sasl_failed(self) -> None:
        """Logged once, without the secret; the answer already queued goes out, then the close."""
        log.info("SASL authentication from %s on listener %s failed: %s", self._peer(),
                 self.context.listener, self.sasl.error)
        if self.ctx.metrics is not None:
            self.ctx.metrics.failed_authentication()
        self._close_after_responses()

    def _answer_now(self, chunks: list) -> None:
        fut = self._loop.create_future()
        fut.set_result(chunks)
        self._queue(fut, size=0)

    def _try_fast(self, fast: Any, frame: memoryview) -> bool:
        """Give one whole request to the produce fast path; False when it is not for it (then
        nothing was done and the generic path must read it)."""
        if frame[0] or frame[1]:  # not API key 0, Produce
            return False
        answer = self._loop.create_future()
        try:
            if not fast.start(self, frame, answer):
                return False
        except Exception as e:  # a bug, as in a handler: the connection closes
            answer.set_exception(e)
        # queued after start: its answer comes from a later doorbell at the earliest
        self._queue(answer, notify=False, size=len(frame))
        if answer.done():
            self.flush_answers()
        return True

    def _take_fast(self, fast: Any, data: bytes) -> int:
        """How many leading bytes of ``data`` (whole requests) the fast path took, in order;
        the generic path reads the rest."""
        pos = 0
        n = len(data)
        while pos < n and not self._closing:
            frame = self.conn.frame_at(data, pos)
            if frame is None or not self._try_fast(fast, frame):
                break
            pos += 4 + len(frame)
        return pos

    def _peer(self) -> str:
        peer = self.transport.get_extra_info("peername") if self.transport else None
        return f"{peer[0]}:{peer[1]}" if peer else "?"

    # requests -----------------------------------------------------------------------------
    def _reject(self, event: proto.RejectedRequest) -> None:
        """A request we do not serve: answer it if the protocol says how, close if it says so."""
        # DEBUG: clients probe ApiVersions above our range on every connect; that is normal
        log.debug("%s from %s: api key %d version %d (%s)", type(event).__name__, self._peer(),
                 event.api_key, event.api_version, event.error.name)
        fut = asyncio.get_running_loop().create_future()
        if event.close_connection:
            fut.set_exception(CloseConnection(f"api key {event.api_key} v{event.api_version}"))
        else:
            fut.set_result([event.response] if event.response is not None else None)
        self._queue(fut, size=0)

    def request_context(self, api_key: int, api_version: int, correlation_id: int,
                        client_id: str | None) -> RequestContext:
        return RequestContext(self.context, api_key, api_version, correlation_id, client_id)

    def refuse(self, refusal: Refusal, answer: asyncio.Future) -> None:
        """The door said no: ``answer`` (queued, or about to be) closes the connection once
        the answers before it are written."""
        log.info("refused a request from %s on listener %s: %s (%s)", self._peer(),
                 self.context.listener, refusal.reason, refusal.error.name)
        answer.set_exception(CloseConnection(f"refused: {refusal.reason}"))

    def _dispatch(self, event: proto.Request) -> None:
        task_free = event.api_key in handlers.TASK_FREE
        rc = RequestContext(self.context, event.api_key, event.api_version,
                            event.correlation_id, event.client_id)
        entry = self.door.enter(rc, timed=not task_free)
        if type(entry) is Refusal:
            fut = self._loop.create_future()
            self.refuse(entry, fut)
            self._queue(fut, size=event.size)
            return
        if not task_free:
            timing = entry.timing
            fut = asyncio.ensure_future(handlers.run(self.ctx, event, rc, timing))
            if timing is not None:
                self.timed[fut] = timing
            self._queue(fut, size=event.size)
            return
        # no task: answered from a doorbell callback, which sets the future and then calls
        # flush_answers (through ctx.wakeups); queued first, as the answer may come at once
        answer = self._loop.create_future()
        self._queue(answer, notify=False, size=event.size)
        handlers.start(self.ctx, event, answer, self)

    def _queue(self, fut: asyncio.Future, notify: bool = True, size: int = 0) -> None:
        self._responses.append(fut)
        if self._mem is not None:  # queued.max.request.bytes: held until its answer is written
            self._held.append(size)
            self._mem.hold(self, size)
        if self._bound is not None:
            self._bound.hold(self)
        if notify:
            fut.add_done_callback(self._on_response_ready)
        if len(self._responses) >= MAX_IN_FLIGHT and not self._paused:
            self._paused = True
            self.transport.pause_reading()

    def flush_answers(self) -> None:
        self._on_response_ready()

    def _on_response_ready(self, _fut: asyncio.Future | None = None) -> None:
        if self._closing:
            return
        if self._writer is not None and not self._writer.done():
            return  # the writer is sending a file slice; it goes on in order when done
        self._flush_ready()

    def _flush_ready(self) -> None:
        """Write every answer at the head of the queue that is ready, in order, with one send:
        under a stream of small produce requests one write per batch of answers, not one per
        answer (each send that wakes the client costs a context switch). Small file slices are
        read in (INLINE_SLICE_BYTES); a larger one, or a failed handler, goes to the writer
        task."""
        out: list = []
        responses = self._responses
        timed = self.timed
        timings: list[AnswerTiming] | None = None  # made only for a timed answer (1 in 32)
        while responses and not self._closing:
            fut = responses[0]
            if not fut.done():
                break
            failed = fut.cancelled() or fut.exception() is not None
            chunks = None if failed else fut.result()
            # a fast-path produce answer is one bytes object: no call to look at it; small file
            # slices are read in and sent below, in the one write with the answers before it
            if not failed and type(chunks) is not bytes and not _all_bytes(chunks):
                chunks = _inlined(self.ctx.readers, chunks)
                failed = chunks is None
            if failed:
                if out:
                    self.transport.write(b"".join(out))
                    if timings:
                        self._written(timings)
                self._writer = asyncio.ensure_future(self._write_slow(fut))
                return
            responses.popleft()
            self._answered()
            if timed:  # metrics on and a timed answer on this connection (one in 32 produces)
                t = timed.pop(fut, None)
                if t is not None:
                    t.writing = time.monotonic()
                    if chunks is None:  # acks=0: nothing to send
                        t.writing = t.ready
                    if timings is None:
                        timings = []
                    timings.append(t)
            if chunks is None:  # acks=0 produce: no response at all
                continue
            if isinstance(chunks, bytes | bytearray | memoryview):
                out.append(chunks)
            else:
                out.extend(chunks)
        if out and not self._closing:
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))
        if timings:
            self._written(timings)
        self._after_writes()

    def _answered(self) -> None:
        """The head request's answer left the queue: the bounds that count it let go."""
        if self._mem is not None:
            self._mem.free(self._held.popleft())
        if self._bound is not None:
            self._bound.free(self)

    def _after_writes(self) -> None:
        self.last_active = time.monotonic()
        if self._paused and not self._stop_reading and len(self._responses) < MAX_IN_FLIGHT // 2:
            self._paused = False
            if not self._mutes:
                self.transport.resume_reading()
        if self._stop_reading and not self._responses and not self._closing:
            self._closing = True
            self.transport.close()

    async def _write_slow(self, fut: asyncio.Future) -> None:
        """The head answer needs awaiting: a file slice to sendfile, or a handler that failed."""
        try:
            chunks = fut.result()
        except CloseConnection as e:
            log.info("closing connection from %s: %s", self._peer(), e)
            self._closing = True
            self.transport.close()
            return
        except (Exception, asyncio.CancelledError):
            log.exception("request handler failed; closing the connection")
            self._closing = True
            self.transport.close()
            return
        if self._responses and self._responses[0] is fut:
            self._responses.popleft()
            self._answered()
        timing = self.timed.pop(fut, None)
        if timing is not None:
            timing.writing = time.monotonic()
        for chunk in chunks:
            if self._closing:
                return
            if isinstance(chunk, bytes | bytearray | memoryview):
                self.transport.write(chunk)
                continue
            f = self.ctx.readers.file(chunk.fd_or_path)  # a file slice: page cache to socket
            try:
                await self._sendfile(f, chunk.position, chunk.length)
            except (ConnectionError, OSError, EOFError, RuntimeError) as e:
                # the frame cannot be completed: closing is the only honest answer
                log.info("sendfile to %s failed: %s", self._peer(), e)
                self._closing = True
                self.transport.close()
                return
        self._writer = None
        if timing is not None:
            self._written([timing])
        self._flush_ready()

    def abort(self, reason: str) -> None:
        """Close once the answers already owed are written (an acks=0 produce that failed)."""
        log.info("closing connection from %s: %s", self._peer(), reason)
        self._close_after_responses()

    def _close_after_responses(self) -> None:
        """Stop reading; answer the requests already accepted, then close (a bad frame or a
        half-close after valid pipelined requests must not swallow their answers)."""
        self._stop_reading = True
        if self.transport is None:
            return
        with contextlib.suppress(Exception):
            self.transport.pause_reading()
        if not self._responses:
            self._closing = True
            self.transport.close()


class NetworkWorker:
    def __init__(self, index: int, config: BrokerConfig, plumbing: Plumbing, log_dirs: list[str]) -> None:
        self.index = index
        self.config = config
        self.plumbing = plumbing
        self.log_dirs = log_dirs
        self.slot = plumbing.net_slot(index)

    def run(self) -> int:
        setproctitle.setproctitle(f"appliance: network worker {self.index}")
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        return run_event_loop(self._main())

    async def _main(self) -> int:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        loop.add_signal_handler(signal.SIGQUIT, lambda: os._exit(0))
        table = PartitionTable.attach(self.plumbing.table_name)
        disks = DiskClient(self.index, self.plumbing, table)
        ctx = BrokerContext(self.index, self.config, table, disks, self.log_dirs)
        ctx.metrics = attach_recorder(self.config, self.plumbing.base, self.slot)
        ctx.fast_produce = FastProduce(ctx)
        counts = ConnectionCounts.attach(conns_name(self.plumbing.base))
        ctx.limits = ConnectionLimits(counts, self.index, self.plumbing.num_net, self.config)
        if self.plumbing.cluster:
            _join_cluster(ctx, self.plumbing)
        ctx.producer_id_blocks = block_source(ctx.cluster_link, self.log_dirs[0], ctx.broker_id)
        ctx.door = Door(ctx.metrics)
        socks: list[socket.socket] = []
        try:
            self.config.check_served()  # the supervisor refused it already; never plaintext
            tls = None
            if any(uses_tls(ep.security_protocol) for ep in self.config.listener_endpoints):
                tls = server_context(self.config)
            ctx.principal_rules = PrincipalRules(self.config["ssl.principal.mapping.rules"])
            for ep in self.config.listener_endpoints:
                socks.append(listen_socket(ep.host, ep.port))
        except (OSError, ConfigError, TlsError) as e:  # respawning cannot help: the supervisor halts start-up
            log.error("network worker %d cannot listen: %s", self.index, e)
            for sock in socks:
                sock.close()
            ctx.close()
            return EXIT_BOOT_ERROR
        try:
            metrics_server = await self._serve_metrics(table, ctx)
        except OSError as e:
            log.error("network worker %d cannot listen on metrics.listener %s: %s", self.index,
                      self.config["metrics.listener"], e.strerror)
            for sock in socks:
                sock.close()
            ctx.close()
            return EXIT_BOOT_ERROR
        if int(self.config["queued.max.request.bytes"]) > 0:
            ctx.request_memory = RequestMemory(int(self.config["queued.max.request.bytes"]),
                                               ctx.metrics)
        ctx.request_queue = RequestQueue(int(self.config["queued.max.requests"]), ctx.connections)
        # one accept loop per listener; each connection knows the listener it came in on
        for sock, listener in zip(socks, ctx.listeners, strict=True):
            ctx.acceptors.append(Acceptor(sock, ctx.limits,
                                          functools.partial(KafkaConnection, ctx, listener),
                                          ctx.metrics, tls=tls if uses_tls(listener.security_protocol) else None))
        for acceptor in ctx.acceptors:
            acceptor.start()
        bell = self.plumbing.net_bells[self.index]
        loop.add_reader(bell, ctx.wakeups.on_doorbell)
        freeze_startup_objects()
        table.set_worker_state(self.slot, WorkerState.READY)
        beat = asyncio.ensure_future(self._heartbeat(table, ctx, ctx.metrics))
        # standalone, the broker's first producer id block now (the cluster worker takes it
        # when it joins): the first InitProducerId waits on no fsync
        first_ids = None if self.plumbing.cluster else asyncio.ensure_future(
            take_first_block(table, ctx.producer_id_blocks))
        idle_ms = int(self.config["connections.max.idle.ms"])
        reaper = asyncio.ensure_future(reap_idle_connections(ctx.connections, idle_ms)) \
            if idle_ms > 0 else None
        await stop.wait()
        if reaper is not None:
            reaper.cancel()
        if first_ids is not None:
            first_ids.cancel()
        # graceful: no new connections, finish what is in flight, then go
        for acceptor in ctx.acceptors:
            acceptor.close()
        if metrics_server is not None:
            metrics_server.close()
        deadline = time.monotonic() + STOP_GRACE_S
        while any(c._responses for c in ctx.connections) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        for c in list(ctx.connections):
            if c.transport is not None:
                c.transport.close()
        beat.cancel()
        loop.remove_reader(bell)
        table.set_worker_state(self.slot, WorkerState.DEAD)
        ctx.close()
        counts.close()
        return EXIT_OK

    async def _serve_metrics(self, table: PartitionTable, ctx: BrokerContext) -> asyncio.Server | None:
        """Network worker 0 serves the Prometheus endpoint when metrics are on. Raises OSError."""
        listener = parse_listener(self.config["metrics.listener"])
        if listener is None or self.index != 0 or ctx.metrics is None:
            return None
        from appliance.metrics.collector import BrokerCollector
        from appliance.metrics.http_endpoint import bind_endpoint, serve_endpoint
        msock = bind_endpoint(listener)
        slots = [self.plumbing.disk_slot(d) for d in range(self.plumbing.num_disks)]
        slots += [self.plumbing.net_slot(n) for n in range(self.plumbing.num_net)]
        cluster_slot = self.plumbing.cluster_slot() if self.plumbing.cluster else None
        if cluster_slot is not None:
            slots.append(cluster_slot)  # its ISR counters and the active-controller gauge
        from appliance.broker.group_lag import committed_offsets
        collector = BrokerCollector(table, ctx.metrics.counters, slots, self.log_dirs, ctx.limits,
                                    leaders=ctx.leaders, metadata=ctx.view.cache,
                                    cluster_slot=cluster_slot, broker_config=lambda: ctx.config)

        async def render() -> bytes:
            collector.committed = await committed_offsets(ctx)
            return collector.render()

        return await serve_endpoint(msock, listener.path, render)

    async def _heartbeat(self, table: PartitionTable, ctx: BrokerContext,
                         metrics: Any = None) -> None:
        while True:
            table.heartbeat(self.slot)
            if metrics is not None:
                metrics.publish()
            ctx.disks.check_disks()
            ctx.wakeups.expire_data_interest(time.monotonic())
            if ctx.disks.pending():
                # a backstop, as the data bells to every worker used to be: a completion whose
                # wake-up went missing waits at most this beat, not for the next request
                ctx.wakeups.on_doorbell()
            await asyncio.sleep(0.25)


def listen_socket(host: str, port: int) -> socket.socket:
    """A listening socket every network worker binds too (SO_REUSEPORT: the kernel spreads the
    connections). Raises OSError naming the address."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        sock.listen(1024)
        sock.setblocking(False)
    except OSError as e:
        sock.close()
        raise OSError(e.errno, f"{host or '*'}:{port}: {e.strerror}") from e
    return sock


def _join_cluster(ctx: BrokerContext, plumbing: Plumbing) -> None:
    """Cluster mode: route through the leadership area and the cluster worker."""
    from appliance.broker.cluster_view import ClusterView
    from appliance.broker.leader_quota import LeaderQuota
    from appliance.process.cluster_link import ClusterLink
    from appliance.protocol.messages.cluster import INTER_BROKER_APIS
    from appliance.shm.layout import cluster_address, leaders_name, metadata_name
    from appliance.shm.leadership_area import LeadershipArea
    from appliance.shm.metadata_cache import MetadataCache

    ctx.leaders = LeadershipArea.attach(leaders_name(plumbing.base))
    ctx.view = ClusterView(ctx.index, MetadataCache.attach(metadata_name(plumbing.base)))
    ctx.leader_quota = LeaderQuota(ctx.leaders, plumbing.num_net)
    ctx.cluster_link = ClusterLink(cluster_address(plumbing.base))
    ctx.extra_apis = dict(INTER_BROKER_APIS)
