"""A thread-safe, pipelined connection to one broker: many requests in flight, answers matched in order.

Built on :class:`~appliance.client.connection.BrokerConnection` (which connects and negotiates
versions); after the handshake a reader thread owns the receive side and completes one
:class:`ResponseFuture` per request, in request order (Kafka answers each connection in order).
A request that gets no answer within its timeout breaks the connection, as in Kafka's clients:
every request still waiting then fails with :class:`KafkaConnectionError`, and the owner opens a
new connection.

Thread-safety: ``send`` may be called from any thread; futures may be waited on from any thread.
"""

from __future__ import annotations

import collections
import contextlib
import select
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import appliance.protocol as proto
from appliance.client.connection import BrokerConnection, KafkaConnectionError
from appliance.errors import KafkaError

__all__ = ["PipelinedConnection", "ResponseFuture"]


class ResponseFuture:
    """The answer to one request: ``result(timeout)`` returns the response body or raises."""

    __slots__ = ("_event", "_value", "_error", "_callbacks", "_lock", "deadline")

    def __init__(self, deadline: float) -> None:
        self._event = threading.Event()
        self._value: Any = None
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[ResponseFuture], None]] = []
        self._lock = threading.Lock()
        self.deadline = deadline

    def done(self) -> bool:
        return self._event.is_set()

    def _complete(self, value: Any, error: BaseException | None) -> None:
        with self._lock:
            if self._event.is_set():
                return
            self._value, self._error = value, error
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for cb in callbacks:
            cb(self)

    def add_done_callback(self, cb: Callable[[ResponseFuture], None]) -> None:
        """Call ``cb(self)`` when done (at once, in this thread, if it already is)."""
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(cb)
                return
        cb(self)

    def exception(self) -> BaseException | None:
        return self._error

    def result(self, timeout: float | None = None) -> Any:
        """The response body. Raises KafkaConnectionError (connection broke / no answer in
        time), RequestTimedOutError-style errors as the connection reports them."""
        if not self._event.wait(timeout):
            raise KafkaConnectionError(f"no answer within {timeout:g} s")
        if self._error is not None:
            raise self._error
        return self._value


class PipelinedConnection:
    """One socket to one broker with a reader thread; see the module docstring."""

    def __init__(self, host: str, port: int, *, timeout: float = 30.0, client_id: str = "appliance",
                 max_in_flight: int = 64, security: Any = None) -> None:
        """Connect (secured as ``security``, a client.security.Security, says) and negotiate
        versions. Raises KafkaConnectionError naming the address."""
        self._bc = BrokerConnection(host, port, timeout=timeout, client_id=client_id, security=security)
        self.address = self._bc.address
        self.host, self.port = host, port
        self.timeout = timeout
        self._sock = self._bc.sock
        self._sock.settimeout(None)  # the reader blocks; deadlines are enforced by the watchdog
        self._conn = self._bc.conn
        self._lock = threading.Lock()  # guards the ClientConnection and the pending queue
        self._send_lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(max_in_flight)
        self._pending: collections.deque[ResponseFuture] = collections.deque()
        self._closed: BaseException | None = None
        self._reader = threading.Thread(target=self._read_loop, name=f"appliance-reader-{self.address}",
                                        daemon=True)
        self._reader.start()

    def set_buffer_sizes(self, send: int | None, receive: int | None) -> None:
        """SO_SNDBUF / SO_RCVBUF of the socket (None: leave the OS's)."""
        for opt, size in ((socket.SO_SNDBUF, send), (socket.SO_RCVBUF, receive)):
            if size is not None:
                self._sock.setsockopt(socket.SOL_SOCKET, opt, size)

    @property
    def closed(self) -> bool:
        return self._closed is not None

    def version_for(self, api_key: int) -> int:
        """The highest version of ``api_key`` both sides speak (raises UnsupportedVersionError)."""
        return self._bc.version_for(api_key)

    def supports(self, api_key: int) -> bool:
        try:
            self.version_for(api_key)
            return True
        except KafkaError:
            return False

    def send(self, api_key: int, body: Any, *, version: int | None = None, timeout: float | None = None,
             expect_response: bool | None = None) -> ResponseFuture:
        """Send one request; returns its future (already done, with None, when no answer is
        expected: Produce with acks=0). Blocks while ``max_in_flight`` requests are waiting.
        Raises KafkaConnectionError if the connection is (or becomes) broken."""
        if version is None:
            version = self._bc.version_for(api_key)
        timeout = self.timeout if timeout is None else timeout
        if not self._slots.acquire(timeout=timeout):
            raise KafkaConnectionError(f"{self.address}: too many requests in flight for {timeout:g} s")
        fut = ResponseFuture(time.monotonic() + timeout)
        queued = False  # once in _pending, its slot is released by whoever takes it out
        try:
            with self._send_lock:
                with self._lock:
                    if self._closed is not None:
                        raise KafkaConnectionError(f"connection to {self.address} is closed: {self._closed}")
                    _, frame = self._conn.send_request(api_key, version, body, expect_response=expect_response)
                    waits = self._conn.in_flight > len(self._pending)
                    if waits:
                        self._pending.append(fut)
                        queued = True
                try:
                    self._sock.sendall(frame)
                except OSError as e:
                    err = KafkaConnectionError(f"connection to {self.address} failed: {e.strerror or e}")
                    self._fail_all(err)
                    raise err from e
        except BaseException:
            # _fail_all (here or in the reader) has released a queued request's slot: releasing
            # it again raised ValueError, which killed the producer's sender thread when a
            # broker closed the connection mid-send, and the producer hung in flush
            if not queued:
                self._slots.release()
            raise
        if not waits:
            self._slots.release()
            fut._complete(None, None)
        return fut

    def request(self, api_key: int, body: Any, *, version: int | None = None, timeout: float | None = None) -> Any:
        """Send and wait for the response body. Raises KafkaConnectionError on I/O failure or
        when no answer comes within ``timeout`` (the connection is then closed)."""
        timeout = self.timeout if timeout is None else timeout
        fut = self.send(api_key, body, version=version, timeout=timeout)
        try:
            return fut.result(timeout)
        except KafkaConnectionError as e:
            if not fut.done():  # no answer in time: the stream can no longer be trusted
                err = KafkaConnectionError(f"no answer from {self.address} within {timeout:g} s")
                self._fail_all(err)
                raise err from e
            raise

    def _read_loop(self) -> None:
        try:
            while True:
                # Wake up now and then to expire requests whose answer is overdue.
                ready = self._wait_readable(0.5)
                if ready:
                    data = self._sock.recv(1 << 20)
                    with self._lock:
                        self._conn.receive_data(data)
                        events = []
                        while True:
                            ev = self._conn.next_event()
                            if ev is proto.NEED_DATA:
                                break
                            if ev is proto.PEER_CLOSED:
                                raise KafkaConnectionError(f"broker {self.address} closed the connection")
                            events.append((self._pending.popleft(), ev.body))
                    for fut, body in events:
                        self._slots.release()
                        fut._complete(body, None)
                    if not data:
                        raise KafkaConnectionError(f"broker {self.address} closed the connection")
                if self._closed is not None:
                    return
                with self._lock:
                    head = self._pending[0] if self._pending else None
                if head is not None and time.monotonic() > head.deadline + 1.0:
                    raise KafkaConnectionError(f"no answer from {self.address} within {self.timeout:g} s")
        except KafkaConnectionError as e:
            self._fail_all(e)
        except (OSError, ValueError) as e:
            self._fail_all(KafkaConnectionError(f"connection to {self.address} failed: {e}"))
        except Exception as e:  # a protocol error: nothing more on this stream can be trusted
            self._fail_all(KafkaConnectionError(f"connection to {self.address} broke: {e}"))

    def _wait_readable(self, timeout: float) -> bool:
        if self._closed is not None:
            return False
        try:
            r, _, _ = select.select([self._sock], [], [], timeout)
        except (OSError, ValueError):
            raise KafkaConnectionError(f"connection to {self.address} is closed") from None
        return bool(r)

    def _fail_all(self, err: BaseException) -> None:
        with self._lock:
            if self._closed is None:
                self._closed = err
            pending, self._pending = list(self._pending), collections.deque()
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        for fut in pending:
            with contextlib.suppress(ValueError):
                self._slots.release()
            fut._complete(None, err)

    def close(self) -> None:
        """Close the socket; requests still waiting fail with KafkaConnectionError."""
        self._fail_all(KafkaConnectionError(f"connection to {self.address} was closed by the client"))
        if self._reader is not threading.current_thread():
            self._reader.join(2.0)
        with contextlib.suppress(OSError):
            self._sock.close()
