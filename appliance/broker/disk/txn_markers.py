"""The transaction markers' sender (Kafka's TransactionMarkerChannelManager): a thread of the
disk worker hosting a transaction coordinator.

The coordinator hands it a decided transaction (:class:`MarkerJob`); the thread sends
WriteTxnMarkers to the leader of each of its partitions (one request per leader and pass),
retries the partitions whose answer is retriable (leader moved, not yet there, the connection
failed) after re-resolving their leaders, drops those whose topic is gone (Kafka does too: no
marker can be written on a deleted partition), and when every partition is done
puts the job on :attr:`MarkerSender.done` and wakes the disk worker's loop, which completes the
transaction (CompleteCommit / CompleteAbort is a write of the coordinator, made on its thread).

Why a thread: a broker it sends to may be slow or down, and sending is blocking I/O with
timeouts; the disk worker's loop must keep serving its partitions meanwhile. The thread touches
no coordinator state: jobs in, finished jobs out, both through queues.

Leaders: each pass asks this broker's own inter-broker listener (``home``) for the Metadata of
the topics concerned, so the leaders and their addresses on that listener are this broker's
metadata (the cluster worker's cache; standalone, itself), re-resolved on every retry. The
connections are secured as the inter-broker listener says (TLS, SASL), as
``cluster/broker_connection.py`` does for the other inter-broker connections.

Thread-safety: :meth:`submit` and :attr:`done` may be used from any thread; the rest runs on
the sender's thread.
"""

from __future__ import annotations

import logging
import queue
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

from appliance.client.connection import BrokerConnection, ConnectionFailed
from appliance.client.security import Security
from appliance.config import BrokerConfig
from appliance.coordinator.txn_coordinator import MarkerJob
from appliance.errors import ErrorCode, KafkaError
from appliance.protocol.frames import REQUEST_HEADER, response_body_offset
from appliance.protocol.messages.transactions import WriteTxnMarkers
from appliance.protocol.types import write_nullable_string
from appliance.security.sasl import uses_sasl
from appliance.security.sasl_client import login_of
from appliance.security.tls import client_context, uses_tls

__all__ = ["MarkerSender", "RETRY_BACKOFF_S", "security_of", "RETRIABLE"]

log = logging.getLogger("appliance.coordinator.txn")

RETRY_BACKOFF_S = 0.1  # Kafka retries a marker at once on its next send pass; a short pause here
NOT_SERVED_BACKOFF_S = 2.0  # a leader that does not serve WriteTxnMarkers yet (an older build)
REQUEST_TIMEOUT_S = 10.0  # connect and answer (Kafka: socket.connection.setup.timeout.ms, 10 s): a dead leader holds the other markers no longer
_SIZE = struct.Struct(">i")
_CORRELATION = struct.Struct(">i")
# the answers after which the marker is sent again (Kafka's TransactionMarkerRequestCompletionHandler)
RETRIABLE = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
    ErrorCode.NETWORK_EXCEPTION, ErrorCode.UNKNOWN_SERVER_ERROR,
})


def security_of(config: BrokerConfig) -> Security | None:
    """How this broker secures its connections to the inter-broker listener."""
    inter = config.inter_broker_listener
    ep = next((e for e in config.listener_endpoints if e.listener == inter), None)
    if ep is None:
        return None
    tls = client_context(config) if uses_tls(ep.security_protocol) else None
    sasl = None
    if uses_sasl(ep.security_protocol):
        mechanism = config["sasl.mechanism.inter.broker.protocol"]
        user, password = login_of(config.listener_value(inter, f"{mechanism.lower()}.sasl.jaas.config"))
        sasl = (mechanism, user, password)
    return None if tls is None and sasl is None else Security(tls, sasl)


class _Pending:
    __slots__ = ("job", "left")

    def __init__(self, job: MarkerJob) -> None:
        self.job = job
        self.left = set(job.partitions)


class MarkerSender:
    def __init__(self, home: tuple[str, int], wake: Callable[[], None],
                 security: Security | None = None, client_id: str = "txn-marker-sender") -> None:
        self.home = home
        self.wake = wake
        self.security = security
        self.client_id = client_id
        self.jobs: queue.SimpleQueue[MarkerJob | None] = queue.SimpleQueue()
        self.done: queue.SimpleQueue[MarkerJob] = queue.SimpleQueue()
        self._conns: dict[tuple[str, int], BrokerConnection] = {}
        self._correlation = 0
        self._warned_not_served = 0.0
        self._thread = threading.Thread(target=self._run, name="txn-markers", daemon=True)
        self._thread.start()

    def submit(self, job: MarkerJob) -> None:
        self.jobs.put(job)

    def close(self) -> None:
        self.jobs.put(None)

    # -- the thread -----------------------------------------------------------------------
    def _run(self) -> None:
        pending: list[_Pending] = []
        while True:
            try:
                job = self.jobs.get(timeout=RETRY_BACKOFF_S if pending else None)
            except queue.Empty:
                job = _NOTHING
            while job is not _NOTHING:
                if job is None:
                    self._close_all()
                    return
                pending.append(_Pending(job))  # type: ignore[arg-type]
                try:
                    job = self.jobs.get_nowait()
                except queue.Empty:
                    job = _NOTHING
            try:
                pending = self._send_pass(pending)
            except Exception:  # a bug must not stop the markers of every later transaction
                log.exception("transaction marker pass failed; retrying")
                time.sleep(RETRY_BACKOFF_S)

    def _send_pass(self, pending: list[_Pending]) -> list[_Pending]:
        """One request per leader for every marker still owed; the jobs finished are reported."""
        try:
            leaders, known, gone = self._leaders({t for p in pending for t, _ in p.left})
        except (OSError, ConnectionFailed, KafkaError) as e:
            log.info("no metadata for the transaction markers from %s:%d: %s; retrying", *self.home, e)
            self._drop(self.home)
            return pending
        by_leader: dict[tuple[str, int], list[tuple[_Pending, str, int]]] = {}
        for p in pending:
            for tp in list(p.left):
                if tp[0] in gone or (tp[0] in known and tp not in leaders):
                    p.left.discard(tp)  # deleted: no marker can be written there
                    continue
                leader = leaders.get(tp)
                if leader is not None:
                    by_leader.setdefault(leader, []).append((p, *tp))
        for leader, items in by_leader.items():
            for p, topic, partition, code in self._send(leader, items):
                if code == ErrorCode.NONE:
                    p.left.discard((topic, partition))
                elif code not in RETRIABLE:
                    # Kafka: any other error is a bug here or there; it keeps the marker pending.
                    log.warning("WriteTxnMarkers for %s-%d (transactional id %r): %s; retrying",
                                topic, partition, p.job.transactional_id, _name(code))
        still = []
        for p in pending:
            if p.left:
                still.append(p)
            else:
                self.done.put(p.job)
                self.wake()
        return still

    def _send(self, leader: tuple[str, int], items: list[tuple[_Pending, str, int]]) -> list[tuple]:
        """(pending, topic, partition, error code) for every item sent to ``leader``."""
        markers: dict[int, dict] = {}
        for p, topic, partition in items:
            m = markers.setdefault(id(p), {"job": p, "topics": {}})
            m["topics"].setdefault(topic, []).append(partition)
        try:
            conn = self._connection(leader)
            version = _version(conn)
            if version is None:
                now = time.monotonic()
                if now - self._warned_not_served > 60:
                    self._warned_not_served = now
                    log.warning("the leader at %s:%d does not serve WriteTxnMarkers: transactions wait", *leader)
                time.sleep(NOT_SERVED_BACKOFF_S)
                return [(p, t, part, ErrorCode.NETWORK_EXCEPTION) for p, t, part in items]
            body = {"markers": [
                {"producer_id": m["job"].job.producer_id, "producer_epoch": m["job"].job.epoch,
                 "transaction_result": m["job"].job.commit, "coordinator_epoch": m["job"].job.coordinator_epoch,
                 "topics": [{"name": t, "partition_indexes": ps} for t, ps in m["topics"].items()]}
                for m in markers.values()]}
            answer = self._request(conn, version, body)
        except (OSError, ConnectionFailed) as e:
            log.info("WriteTxnMarkers to %s:%d failed: %s; retrying", *leader, e)
            self._drop(leader)
            return [(p, t, part, ErrorCode.NETWORK_EXCEPTION) for p, t, part in items]
        codes: dict[tuple[int, str, int], int] = {}
        for m in answer.markers:
            for t in m.topics:
                for part in t.partitions:
                    codes[(m.producer_id, t.name, part.partition_index)] = part.error_code
        return [(p, t, part, codes.get((p.job.producer_id, t, part), ErrorCode.UNKNOWN_SERVER_ERROR))
                for p, t, part in items]

    def _leaders(self, topics: set[str]) -> tuple[dict[tuple[str, int], tuple[str, int] | None],
                                                  set[str], set[str]]:
        """From this broker's Metadata: (topic, partition) -> its leader's (host, port) or None
        (no leader now); the topics whose partitions are listed; the topics that do not exist."""
        answer = self._connection(self.home).request(
            3, {"topics": [{"name": t} for t in sorted(topics)], "allow_auto_topic_creation": False})
        brokers = {b.node_id: (b.host, b.port) for b in answer.brokers}
        out: dict[tuple[str, int], tuple[str, int] | None] = {}
        known, gone = set(), set()
        for t in answer.topics:
            if t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                gone.add(t.name)
                continue
            if t.error_code:
                continue  # LEADER_NOT_AVAILABLE and the like: ask again next pass
            known.add(t.name)
            for part in t.partitions:
                out[(t.name, part.partition_index)] = brokers.get(part.leader_id)
        return out, known, gone

    def _connection(self, leader: tuple[str, int]) -> BrokerConnection:
        conn = self._conns.get(leader)
        if conn is None:
            conn = BrokerConnection(leader[0], leader[1], timeout=REQUEST_TIMEOUT_S, client_id=self.client_id,
                                    security=self.security)
            self._conns[leader] = conn
        return conn

    def _request(self, conn: BrokerConnection, version: int, body: dict) -> Any:
        """One WriteTxnMarkers on ``conn``'s socket, framed here: the class is not in the
        registry the client's connection encodes from (a broker does not advertise it)."""
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        out = bytearray(_SIZE.size)
        out += REQUEST_HEADER.pack(WriteTxnMarkers.API_KEY, version, self._correlation)
        write_nullable_string(self.client_id, out)
        if WriteTxnMarkers.is_flexible(version):
            out += b"\x00"
        out += WriteTxnMarkers.encode_request(version, body)
        _SIZE.pack_into(out, 0, len(out) - _SIZE.size)
        sock = conn.sock
        sock.sendall(out)
        size = _SIZE.unpack(_read(sock, _SIZE.size))[0]
        frame = memoryview(_read(sock, size))
        if _CORRELATION.unpack_from(frame, 0)[0] != self._correlation:
            raise ConnectionFailed("WriteTxnMarkers: an answer to another request")
        return WriteTxnMarkers.decode_response(version, bytes(frame[response_body_offset(WriteTxnMarkers, version, frame):]))

    def _drop(self, leader: tuple[str, int]) -> None:
        conn = self._conns.pop(leader, None)
        if conn is not None:
            conn.close()

    def _close_all(self) -> None:
        for leader in list(self._conns):
            self._drop(leader)


_NOTHING: Any = object()


def _version(conn: BrokerConnection) -> int | None:
    """The highest WriteTxnMarkers version both sides speak (None: the leader does not serve it)."""
    lo, hi = conn.versions.get(WriteTxnMarkers.API_KEY, (0, -1))
    top = min(hi, WriteTxnMarkers.MAX_VERSION)
    return top if top >= max(lo, WriteTxnMarkers.MIN_VERSION) else None


def _read(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionFailed("the leader closed the connection")
        buf += chunk
    return bytes(buf)


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)
