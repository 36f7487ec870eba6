"""What a client knows about the cluster: brokers, topics' partitions and leaders, and one pooled
connection per (broker, purpose).

Purposes keep slow requests from delaying fast ones (a long-polling Fetch must not hold up an
OffsetCommit or a Heartbeat). Connections that broke are replaced on the next use.

Thread-safety: every method may be called from any thread.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from appliance.client.config import security_of
from appliance.client.connection import KafkaConnectionError, parse_bootstrap
from appliance.client.errors import LeaderNotAvailableError
from appliance.client.pipeline import PipelinedConnection
from appliance.errors import ErrorCode, UnknownTopicOrPartitionError, error_for_code

__all__ = ["Cluster", "TopicInfo", "check_error", "RETRIABLE"]

# The first, quick connect attempt at each of several brokers (any_connection): long enough for
# a live broker's accept and ApiVersions answer on a busy host, short against a dead one.
QUICK_CONNECT_S = 1.0

# Errors after which a request may succeed if retried, possibly after a metadata refresh.
RETRIABLE = frozenset({
    ErrorCode.CORRUPT_MESSAGE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NETWORK_EXCEPTION,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
    ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.OFFSET_NOT_AVAILABLE, ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.FENCED_LEADER_EPOCH,
})


def check_error(code: int, what: str, message: str | None = None) -> None:
    """Raise the KafkaError subclass for a non-zero wire error ``code``, naming ``what``."""
    if code:
        name = ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)
        raise error_for_code(code)(f"{what}: {name}" + (f" ({message})" if message else ""))


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    leaders: dict[int, int]  # partition -> leader node id (-1: none)

    @property
    def partitions(self) -> list[int]:
        return sorted(self.leaders)


class Cluster:
    """Metadata cache and connection pool; see the module docstring."""

    def __init__(self, bootstrap_servers: str, *, client_id: str = "appliance", request_timeout_ms: int = 30000,
                 connect_timeout_ms: int | None = None, allow_auto_create: bool = True,
                 metadata_max_age_ms: float = 300000,
                 socket_buffers: tuple[int | None, int | None] = (None, None), security: Any = None) -> None:
        """``socket_buffers``: (SO_SNDBUF, SO_RCVBUF) for every connection, None: the OS's;
        ``security``: how every connection is secured (client.security.Security; None: plaintext).
        Raises ValueError for a malformed bootstrap list (nothing is contacted yet)."""
        self.security = security
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self.client_id = client_id
        self.request_timeout = request_timeout_ms / 1000
        self.connect_timeout = (connect_timeout_ms if connect_timeout_ms is not None else request_timeout_ms) / 1000
        self.allow_auto_create = allow_auto_create
        self.metadata_max_age = metadata_max_age_ms / 1000
        self.socket_buffers = socket_buffers
        self._lock = threading.RLock()
        self._conns: dict[tuple[str, int, str], PipelinedConnection] = {}
        self._nodes: dict[int, tuple[str, int]] = {}
        self._topics: dict[str, TopicInfo] = {}
        self._topic_errors: dict[str, int] = {}
        self._fetched_at = 0.0
        self._closed = False

    @classmethod
    def for_consumer(cls, c: dict[str, Any]) -> Cluster:
        """A consumer's cluster, from its resolved config: a consumer never creates topics."""
        return cls(c["bootstrap.servers"], client_id=c["client.id"], request_timeout_ms=c["request.timeout.ms"],
                   connect_timeout_ms=c["socket.connection.setup.timeout.ms"], allow_auto_create=False,
                   metadata_max_age_ms=c["metadata.max.age.ms"], security=security_of(c))

    # connections ----------------------------------------------------------------------------
    def connection(self, host: str, port: int, purpose: str = "default", timeout: float | None = None,
                   connect_timeout: float | None = None) -> PipelinedConnection:
        """A live connection to host:port for ``purpose`` (opened on demand).

        ``timeout`` bounds the connect and then each request (default: the request timeout);
        ``connect_timeout``, when given, bounds only the connect (a refused connection is
        retried until then), the requests keep ``timeout``.
        Raises KafkaConnectionError naming the address if it cannot connect in time."""
        key = (host, port, purpose)
        with self._lock:
            if self._closed:
                raise KafkaConnectionError("the client is closed")
            conn = self._conns.get(key)
            if conn is not None and not conn.closed:
                return conn
        # Connect outside the lock: other threads may use other connections meanwhile.
        conn = PipelinedConnection(host, port, timeout=connect_timeout or timeout or self.request_timeout,
                                   client_id=self.client_id, security=self.security)
        if timeout is None or connect_timeout is not None:
            conn.timeout = timeout or self.request_timeout
        if self.socket_buffers != (None, None):  # once connected: the handshake never needs more
            conn.set_buffer_sizes(*self.socket_buffers)
        with self._lock:
            old = self._conns.get(key)
            if old is not None and not old.closed:
                conn.close()
                return old
            self._conns[key] = conn
            return conn

    def node_connection(self, node_id: int, purpose: str = "default",
                        connect_timeout: float | None = None) -> PipelinedConnection:
        """Connection to broker ``node_id`` (refreshing metadata if the node is unknown);
        ``connect_timeout`` as in :meth:`connection`."""
        with self._lock:
            addr = self._nodes.get(node_id)
        if addr is None:
            self.refresh()
            with self._lock:
                addr = self._nodes.get(node_id)
            if addr is None:
                raise KafkaConnectionError(f"broker {node_id} is not in the cluster metadata")
        return self.connection(addr[0], addr[1], purpose, connect_timeout=connect_timeout)

    def any_connection(self, purpose: str = "default") -> PipelinedConnection:
        """A connection to some broker: a known one, else the bootstrap servers in turn.
        Raises KafkaConnectionError naming every address tried."""
        with self._lock:
            live = [c for (_, _, p), c in self._conns.items() if p == purpose and not c.closed]
            addrs = list(self._nodes.values())
        if live:
            return live[0]
        candidates = addrs + [a for a in self.bootstrap if a not in addrs]
        # With several addresses, a quick try at each first: one that refuses (a dead broker)
        # must not hold the others up for the whole connect timeout; then each as before.
        budgets = [QUICK_CONNECT_S, None] if len(candidates) > 1 else [None]
        for budget in budgets:
            errors = []
            for host, port in candidates:
                try:
                    return self.connection(host, port, purpose, timeout=self.connect_timeout,
                                           connect_timeout=budget)
                except KafkaConnectionError as e:
                    errors.append(str(e))
        raise KafkaConnectionError("; ".join(errors))

    # metadata -------------------------------------------------------------------------------
    def refresh(self, topics: list[str] | None = None, *, auto_create: bool | None = None) -> Any:
        """Fetch metadata (all topics if None) and update the cache; returns the response body."""
        conn = self.any_connection()
        body = {"topics": None if topics is None else [{"name": t} for t in topics],
                "allow_auto_topic_creation": self.allow_auto_create if auto_create is None else auto_create}
        resp = conn.request(3, body)
        with self._lock:
            self._nodes = {b.node_id: (b.host, b.port) for b in resp.brokers}
            for t in resp.topics:
                self._topic_errors[t.name] = t.error_code
                if t.error_code == 0 and t.partitions:
                    self._topics[t.name] = TopicInfo(t.name, {p.partition_index: p.leader_id for p in t.partitions})
                else:
                    self._topics.pop(t.name, None)
            self._fetched_at = time.monotonic()
        return resp

    def node_ids(self) -> list[int]:
        """The brokers the last metadata named."""
        with self._lock:
            return sorted(self._nodes)

    def topic(self, name: str, *, timeout: float = 60.0, auto_create: bool | None = None) -> TopicInfo:
        """The topic's partitions and leaders, from the cache or the broker.

        Waits (up to ``timeout`` s) while the topic is being created (LEADER_NOT_AVAILABLE).
        Raises UnknownTopicOrPartitionError at once if the broker says it does not exist (and
        did not create it), KafkaConnectionError if no broker answers."""
        with self._lock:
            info = self._topics.get(name)
            fresh = time.monotonic() - self._fetched_at < self.metadata_max_age
        if info is not None and fresh:
            return info
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.refresh([name], auto_create=auto_create)
            except KafkaConnectionError:
                # no broker answers right now (restarting?): keep using what we know, as the
                # Java client does; with nothing known, retry until the deadline
                if info is not None:
                    return info
                if not self._fetched_at or time.monotonic() >= deadline:
                    raise  # never reached any broker: say so now, naming the addresses
                time.sleep(0.2)
                continue
            with self._lock:
                info = self._topics.get(name)
                code = self._topic_errors.get(name, 0)
            if info is not None:
                return info
            if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise UnknownTopicOrPartitionError(
                    f"topic {name!r} does not exist (and the broker did not auto-create it)")
            if code not in (0, ErrorCode.LEADER_NOT_AVAILABLE):
                check_error(code, f"metadata for topic {name!r}")
            if time.monotonic() >= deadline:
                raise LeaderNotAvailableError(f"topic {name!r} has no leader after {timeout:g} s")
            time.sleep(0.05)

    def invalidate(self, topic: str | None = None) -> None:
        """Forget cached metadata (one topic or all) so the next lookup asks the broker."""
        with self._lock:
            if topic is None:
                self._topics.clear()
            else:
                self._topics.pop(topic, None)

    def leader_connection(self, topic: str, partition: int, purpose: str = "default",
                          connect_timeout: float | None = None) -> PipelinedConnection:
        """Connection to the leader of topic-partition (``connect_timeout`` as in
        :meth:`connection`). Raises UnknownTopicOrPartitionError for a partition the topic does
        not have, LeaderNotAvailableError if it has no leader."""
        info = self.topic(topic)
        leader = info.leaders.get(partition)
        if leader is None:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} has no partition {partition} "
                                               f"(it has {len(info.leaders)})")
        if leader < 0:
            self.invalidate(topic)
            raise LeaderNotAvailableError(f"{topic}-{partition} has no leader")
        return self.node_connection(leader, purpose, connect_timeout)

    def leader_of(self, topic: str, partition: int) -> int:
        info = self.topic(topic)
        if partition not in info.leaders:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} has no partition {partition}")
        return info.leaders[partition]

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conns, self._conns = list(self._conns.values()), {}
        for c in conns:
            c.close()

