"""The controller's requests over the Kafka wire protocol (Kafka's ControllerChannelManager):
one sender thread and one TCP connection per destination broker, requests sent in order, one at
a time, each retried until it is answered or the broker is removed.

The controller thread only queues (:meth:`WireChannel.send` never blocks). Responses are decoded
with the inter-broker schemas and handed to ``on_response(broker_id, body_dict)`` on the sender
thread; the controller's callbacks only enqueue events.

Thread-safety: every public method may be called from any thread.
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
from typing import Any

from appliance.cluster.broker_connection import BrokerConnector
from appliance.cluster.request_batch import BrokerChannel, ResponseCallback
from appliance.cluster.zk_paths import BrokerInfo
from appliance.protocol.frames import REQUEST_HEADER, RESPONSE_HEADER, SIZE
from appliance.protocol.messages.cluster import INTER_BROKER_APIS
from appliance.protocol.types import write_nullable_string

__all__ = ["WireChannel"]

log = logging.getLogger(__name__)

# A broker that cannot be reached is tried again this often (Kafka's controller: backoff 100 ms
# with a socket timeout; we back off further, since a dead broker's node vanishes soon anyway).
_RETRY_BACKOFF_S = (0.1, 0.2, 0.5, 1.0)
# Answers are bounded in size: an inter-broker response carries one entry per partition.
_MAX_RESPONSE_BYTES = 64 * 1024 * 1024
_STOP = object()


def encode_request(api_key: int, api_version: int, correlation_id: int, client_id: str, body: Any) -> bytes:
    """A whole request frame: size, header v1, body."""
    payload = bytearray(REQUEST_HEADER.pack(api_key, api_version, correlation_id))
    write_nullable_string(client_id, payload)
    payload += INTER_BROKER_APIS[api_key].encode_request(api_version, body)
    return SIZE.pack(len(payload)) + bytes(payload)


class _Sender:
    """One destination broker: its queue, its connection, its thread."""

    def __init__(self, owner: WireChannel, broker: BrokerInfo) -> None:
        self.owner = owner
        self.broker = broker
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.stopped = threading.Event()
        self.sock: socket.socket | None = None
        self.correlation_id = 0
        self.thread = threading.Thread(target=self._run, name=f"controller-to-{broker.broker_id}", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.stopped.set()
        self.queue.put(_STOP)
        self._close()

    def _close(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
            self.sock = None

    def _run(self) -> None:
        while not self.stopped.is_set():
            item = self.queue.get()
            if item is _STOP:
                return
            api_key, api_version, body, on_response = item
            attempt = 0
            while not self.stopped.is_set():
                try:
                    answer = self._round_trip(api_key, api_version, body)
                except (OSError, ValueError) as e:
                    self._close()
                    if attempt == 0:
                        log.warning("controller request %d to broker %d failed (%s); retrying",
                                    api_key, self.broker.broker_id, e)
                    self.stopped.wait(_RETRY_BACKOFF_S[min(attempt, len(_RETRY_BACKOFF_S) - 1)])
                    attempt += 1
                    continue
                if on_response is not None:
                    try:
                        on_response(self.broker.broker_id, answer)
                    except Exception:
                        log.exception("response callback for api %d failed", api_key)
                break

    def _round_trip(self, api_key: int, api_version: int, body: Any) -> dict[str, Any]:
        # a local reference: stop() on another thread may close and clear self.sock meanwhile,
        # which then fails this round trip with OSError (handled) rather than on a None
        sock = self.sock
        if sock is None:
            sock = self.owner.connector.connect(self.broker, self.owner.request_timeout_s)
            self.sock = sock
        self.correlation_id = (self.correlation_id + 1) & 0x7FFFFFFF
        sock.sendall(encode_request(api_key, api_version, self.correlation_id, self.owner.client_id, body))
        (size,) = SIZE.unpack(_read(sock, SIZE.size))
        if not RESPONSE_HEADER.size <= size <= _MAX_RESPONSE_BYTES:
            raise ValueError(f"response frame of {size} bytes")
        frame = _read(sock, size)
        (correlation_id,) = RESPONSE_HEADER.unpack_from(frame, 0)
        if correlation_id != self.correlation_id:
            raise ValueError(f"correlation id {correlation_id}, expected {self.correlation_id}")
        decoded = INTER_BROKER_APIS[api_key].decode_response(api_version, frame[RESPONSE_HEADER.size:])
        return decoded.to_dict()



def _read(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        buf += chunk
    return bytes(buf)


class WireChannel(BrokerChannel):
    """Sends controller requests to brokers, each on its inter-broker listener's endpoint
    (``connector``: broker_connection.py opens every inter-broker connection).
    ``request_timeout_s`` (controller.socket.timeout.ms) bounds the connect and each read of an
    answer; a request that times out is sent again on a new connection."""

    def __init__(self, client_id: str, request_timeout_s: float = 30.0,
                 connector: BrokerConnector | None = None) -> None:
        self.client_id = client_id
        self.connector = connector or BrokerConnector()
        self.request_timeout_s = request_timeout_s
        self._senders: dict[int, _Sender] = {}
        self._lock = threading.Lock()

    def add_broker(self, broker: BrokerInfo) -> None:
        with self._lock:
            old = self._senders.get(broker.broker_id)
            if old is not None and old.broker == broker:
                return
            if old is not None:
                old.stop()
            self._senders[broker.broker_id] = _Sender(self, broker)

    def remove_broker(self, broker_id: int) -> None:
        with self._lock:
            sender = self._senders.pop(broker_id, None)
        if sender is not None:
            sender.stop()

    def send(self, broker_id: int, api_key: int, api_version: int, body: dict[str, Any],
             on_response: ResponseCallback | None = None) -> None:
        with self._lock:
            sender = self._senders.get(broker_id)
        if sender is None:
            log.warning("no connection to broker %d for api %d; dropped", broker_id, api_key)
            return
        sender.queue.put((api_key, api_version, body, on_response))

    def close(self) -> None:
        with self._lock:
            senders, self._senders = list(self._senders.values()), {}
        for s in senders:
            s.stop()
        for s in senders:
            s.thread.join(5)
