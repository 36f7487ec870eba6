"""The transaction markers' sender (Kafka's TransactionMarkerChannelManager): a thread of the
disk worker hosting a transaction coordinator.

The coordinator hands it a decided transaction (:class:`MarkerJob`); the thread sends
WriteTxnMarkers to the leader of each of its partitions (one request per leader and pass),
retries the partitions whose answer is retriable (leader moved, not yet there, the connection
failed) after re-resolving their leaders, drops those whose topic is gone (Kafka does too: no
marker can be written on a deleted partition), and when every partition is done
puts the job on :attr:`MarkerSender.done` and wakes the disk worker's loop, which completes the
transaction (CompleteCommit / CompleteAbort is a write of the coordinator, made on its thread).

Why threads: a broker it sends to may be slow or down, and sending is blocking I/O with
timeouts; the disk worker's loop must keep serving its partitions meanwhile. The sender's thread
touches no coordinator state: jobs in, finished jobs out, both through queues. It resolves the
leaders and hands each leader's markers to that leader's channel (:class:`_Channel`, a thread
and a connection of its own, one request in flight), whose answer comes back through the jobs
queue: a leader that hangs (SIGSTOPped, a stalled disk) holds up only the markers it owes, as
Kafka's per-broker queues do, not every transaction of the coordinator.

Leaders: the sender asks this broker's own inter-broker listener (``home``) for the Metadata of
the topics concerned, so the leaders and their addresses on that listener are this broker's
metadata (the cluster worker's cache; standalone, itself); a leader is kept until a marker sent
to it fails, and asked again for every retry. The
connections are secured as the inter-broker listener says (TLS, SASL), as
``cluster/broker_connection.py`` does for the other inter-broker connections.

Thread-safety: :meth:`submit` and :attr:`done` may be used from any thread; the rest runs on
the sender's thread, but a channel's sending on the channel's.
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


class _Answer:
    """A channel's answer to one request: (pending, topic, partition, error code) per item."""
    __slots__ = ("leader", "results")

    def __init__(self, leader: tuple[str, int], results: list[tuple]) -> None:
        self.leader = leader
        self.results = results


class _Channel:
    """One leader's own thread and connection (Kafka's marker channel keeps a queue per
    destination broker): one WriteTxnMarkers in flight to it at a time, the answer posted to the
    sender's queue. A leader that is slow, stopped or unreachable holds only the markers it owes
    (up to REQUEST_TIMEOUT_S per try), never another leader's, so another transaction of the
    coordinator completes meanwhile. Measured before: every transaction of the coordinator
    waited 10 s behind one marker owed to a SIGSTOPped leader
    (tests/transactions/test_cluster_kills.py)."""

    def __init__(self, sender: MarkerSender, leader: tuple[str, int]) -> None:
        self.sender = sender
        self.leader = leader
        self.busy = False  # a request in flight (read and written by the sender's thread only)
        self.requests: queue.SimpleQueue[list | None] = queue.SimpleQueue()
        self._conn: BrokerConnection | None = None
        self._correlation = 0
        self._thread = threading.Thread(target=self._run, name=f"txn-markers-{leader[1]}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (items := self.requests.get()) is not None:
            try:
                results = self._send(items)
            except Exception:  # a bug must not stop this leader's markers for good
                log.exception("WriteTxnMarkers to %s:%d failed; retrying", *self.leader)
                self._drop()
                results = [(p, t, part, ErrorCode.UNKNOWN_SERVER_ERROR) for p, t, part in items]
            if any(code != ErrorCode.NONE for *_, code in results):
                # what failed is sent again after a pause (a refused connection or a
                # NOT_LEADER_OR_FOLLOWER during an election comes back at once: no busy loop)
                time.sleep(RETRY_BACKOFF_S)
            self.sender.jobs.put(_Answer(self.leader, results))
        self._drop()

    def _send(self, items: list[tuple[_Pending, str, int]]) -> list[tuple]:
        """(pending, topic, partition, error code) for every item sent to the leader."""
        markers: dict[int, dict] = {}
        for p, topic, partition in items:
            m = markers.setdefault(id(p), {"job": p, "topics": {}})
            m["topics"].setdefault(topic, []).append(partition)
        try:
            if self._conn is None:
                self._conn = self.sender.connect(self.leader)
            version = _version(self._conn)
            if version is None:
                self.sender.warn_not_served(self.leader)
                time.sleep(NOT_SERVED_BACKOFF_S)
                return [(p, t, part, ErrorCode.NETWORK_EXCEPTION) for p, t, part in items]
            body = {"markers": [
                {"producer_id": m["job"].job.producer_id, "producer_epoch": m["job"].job.epoch,
                 "transaction_result": m["job"].job.commit, "coordinator_epoch": m["job"].job.coordinator_epoch,
                 "topics": [{"name": t, "partition_indexes": ps} for t, ps in m["topics"].items()]}
                for m in markers.values()]}
            answer = self._request(self._conn, version, body)
        except (OSError, ConnectionFailed) as e:
            log.info("WriteTxnMarkers to %s:%d failed: %s; retrying", *self.leader, e)
            self._drop()
            return [(p, t, part, ErrorCode.NETWORK_EXCEPTION) for p, t, part in items]
        codes: dict[tuple[int, str, int], int] = {}
        for m in answer.markers:
            for t in m.topics:
                for part in t.partitions:
                    codes[(m.producer_id, t.name, part.partition_index)] = part.error_code
        return [(p, t, part, codes.get((p.job.producer_id, t, part), ErrorCode.UNKNOWN_SERVER_ERROR))
                for p, t, part in items]

    def _request(self, conn: BrokerConnection, version: int, body: dict) -> Any:
        """One WriteTxnMarkers on ``conn``'s socket, framed here: the class is not in the
        registry the client's connection encodes from (a broker does not advertise it)."""
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        out = bytearray(_SIZE.size)
        out += REQUEST_HEADER.pack(WriteTxnMarkers.API_KEY, version, self._correlation)
        write_nullable_string(self.sender.client_id, out)
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

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class MarkerSender:
    def __init__(self, home: tuple[str, int], wake: Callable[[], None],
                 security: Security | None = None, client_id: str = "txn-marker-sender") -> None:
        self.home = home
        self.wake = wake
        self.security = security
        self.client_id = client_id
        # jobs in (None: close), and the channels' answers
        self.jobs: queue.SimpleQueue[MarkerJob | _Answer | None] = queue.SimpleQueue()
        self.done: queue.SimpleQueue[MarkerJob] = queue.SimpleQueue()
        self._home_conn: BrokerConnection | None = None
        self._channels: dict[tuple[str, int], _Channel] = {}
        self._in_flight: set[tuple[int, tuple[str, int]]] = set()  # (id(pending), partition)
        # leaders as last resolved, used until a marker sent there fails: the Metadata round trip
        # is paid once per leader change, not once per transaction (Kafka reads its metadata
        # cache). It is one hop through the network worker less before a transaction completes
        # (until then the producer's next AddPartitionsToTxn is answered CONCURRENT_TRANSACTIONS
        # and librdkafka backs off 20 ms); the time saved was lost in the noise of the shared
        # machine (perf/README.md, bench_transactions.py)
        self._cached: dict[tuple[str, int], tuple[str, int]] = {}
        self._warned_not_served = 0.0
        self._warn_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="txn-markers", daemon=True)
        self._thread.start()

    def submit(self, job: MarkerJob) -> None:
        self.jobs.put(job)

    def close(self) -> None:
        self.jobs.put(None)

    def connect(self, broker: tuple[str, int]) -> BrokerConnection:
        """A connection to ``broker`` (its inter-broker listener), secured as configured."""
        return BrokerConnection(broker[0], broker[1], timeout=REQUEST_TIMEOUT_S, client_id=self.client_id,
                                security=self.security)

    def warn_not_served(self, leader: tuple[str, int]) -> None:
        with self._warn_lock:
            now = time.monotonic()
            if now - self._warned_not_served > 60:
                self._warned_not_served = now
                log.warning("the leader at %s:%d does not serve WriteTxnMarkers: transactions wait", *leader)

    # -- the sender's thread --------------------------------------------------------------
    def _run(self) -> None:
        pending: list[_Pending] = []
        while True:
            try:
                event = self.jobs.get(timeout=RETRY_BACKOFF_S if pending else None)
            except queue.Empty:
                event = _NOTHING
            while event is not _NOTHING:
                if event is None:
                    self._close_all()
                    return
                if isinstance(event, _Answer):
                    self._take(event)
                else:
                    pending.append(_Pending(event))
                try:
                    event = self.jobs.get_nowait()
                except queue.Empty:
                    event = _NOTHING
            try:
                self._dispatch(pending)
            except Exception:  # a bug must not stop the markers of every later transaction
                log.exception("transaction marker pass failed; retrying")
                time.sleep(RETRY_BACKOFF_S)
            pending = self._report(pending)

    def _dispatch(self, pending: list[_Pending]) -> None:
        """Every marker owed and not in flight goes to its leader's channel, if that channel is
        free (a busy one gets it on a later pass, re-resolved then)."""
        idle = [(p, tp) for p in pending for tp in p.left if (id(p), tp) not in self._in_flight]
        if not idle:
            return
        leaders: dict[tuple[str, int], tuple[str, int] | None] = self._cached
        known: set[str] = set()
        gone: set[str] = set()
        unknown = {tp[0] for _, tp in idle if tp not in self._cached}
        if unknown:
            try:
                found, known, gone = self._leaders(unknown)
            except (OSError, ConnectionFailed, KafkaError) as e:
                log.info("no metadata for the transaction markers from %s:%d: %s; retrying", *self.home, e)
                if self._home_conn is not None:
                    self._home_conn.close()
                    self._home_conn = None
                return
            self._cached.update((tp, leader) for tp, leader in found.items() if leader is not None)
            leaders = {**self._cached, **found}
        by_leader: dict[tuple[str, int], list[tuple[_Pending, str, int]]] = {}
        for p, tp in idle:
            if tp[0] in gone or (tp[0] in known and tp not in leaders):
                p.left.discard(tp)  # deleted: no marker can be written there
                continue
            leader = leaders.get(tp)
            if leader is not None and not (leader in self._channels and self._channels[leader].busy):
                by_leader.setdefault(leader, []).append((p, *tp))
        for leader, items in by_leader.items():
            channel = self._channels.get(leader)
            if channel is None:
                channel = self._channels[leader] = _Channel(self, leader)
            channel.busy = True
            self._in_flight.update((id(p), (t, part)) for p, t, part in items)
            channel.requests.put(items)

    def _take(self, answer: _Answer) -> None:
        self._channels[answer.leader].busy = False
        for p, topic, partition, code in answer.results:
            self._in_flight.discard((id(p), (topic, partition)))
            if code == ErrorCode.NONE:
                p.left.discard((topic, partition))
                continue
            self._cached.pop((topic, partition), None)  # the leader is asked again
            if code not in RETRIABLE:
                # Kafka: any other error is a bug here or there; it keeps the marker pending.
                log.warning("WriteTxnMarkers for %s-%d (transactional id %r): %s; retrying",
                            topic, partition, p.job.transactional_id, _name(code))

    def _report(self, pending: list[_Pending]) -> list[_Pending]:
        """The jobs with every marker written go out (the loop woken); the rest stay."""
        still = []
        for p in pending:
            if p.left:
                still.append(p)
            else:
                self.done.put(p.job)
                self.wake()
        return still

    def _leaders(self, topics: set[str]) -> tuple[dict[tuple[str, int], tuple[str, int] | None],
                                                  set[str], set[str]]:
        """From this broker's Metadata: (topic, partition) -> its leader's (host, port) or None
        (no leader now); the topics whose partitions are listed; the topics that do not exist."""
        if self._home_conn is None:
            self._home_conn = self.connect(self.home)
        answer = self._home_conn.request(
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

    def _close_all(self) -> None:
        for channel in self._channels.values():
            channel.requests.put(None)
        if self._home_conn is not None:
            self._home_conn.close()
            self._home_conn = None


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
