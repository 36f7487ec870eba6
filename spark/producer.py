"""A small blocking producer over :class:`appliance.client.connection.BrokerConnection`.

Used by the data source's writers: records are grouped per partition into v2 batches
(:func:`appliance.records.batch.build_batch`) and sent to each partition's leader with Produce
(api key 0). Partitions are chosen as Kafka's default partitioner does: an explicit partition,
else murmur2 of the key, else one sticky partition per flushed batch.

Idempotent (with acks=all, the default): the producer takes a producer id (InitProducerId) and
numbers each partition's batches, so a Produce retried after a timeout, a dropped connection or
a retriable error is written once — the broker answers DUPLICATE_SEQUENCE_NUMBER (or the
original offset) for a batch it already has. Retries resend the very same bytes.

Transactional (``txn`` given, for the exactly-once sink): the producer id comes from
InitProducerId with the transactional id (:class:`spark.txn_client.TxnClient`), each partition
joins the transaction (AddPartitionsToTxn) before its first batch is sent, batches carry the
transactional flag, and the transaction is left open: whoever holds (transactional id,
producer id, epoch) ends it.

Not thread-safe: one producer per task.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from appliance.client.connection import (
    BrokerConnection,
    ConnectionFailed,
    connect_first,
    parse_bootstrap,
)
from appliance.client.partitioner import StickyPartitioner, partition_for
from appliance.client.producer_id import init_producer_id
from appliance.errors import (
    ErrorCode,
    InvalidConfigError,
    KafkaError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from appliance.records.batch import build_batch
from appliance.records.record_types import Compression
from spark.txn_client import TxnClient

__all__ = ["Producer"]

_CODECS = {"none": Compression.NONE, "gzip": Compression.GZIP, "snappy": Compression.SNAPPY,
           "lz4": Compression.LZ4, "zstd": Compression.ZSTD}
_RETRY_METADATA = (ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
_RETRIABLE = frozenset({
    ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NETWORK_EXCEPTION, ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.NOT_LEADER_OR_FOLLOWER,
})
#: Produce attempts after the first, like the Java producer's bounded delivery retries
PRODUCE_RETRIES = 5


class Producer:
    """Buffers records per (topic, partition) and produces them in batches of ``batch_records``.

    Raises ConnectionFailed (no bootstrap server reachable), UnknownTopicOrPartitionError,
    InvalidConfigError (a partition number outside the topic), and the KafkaError subclass of
    any error code a Produce answer carries.
    """

    def __init__(self, bootstrap_servers: str, *, acks: int = -1, compression: str = "none",
                 batch_records: int = 4096, timeout_ms: int = 30000,
                 idempotent: bool = True, retries: int = PRODUCE_RETRIES,
                 txn: TxnClient | None = None, transactional_id: str | None = None,
                 txn_timeout_ms: int = 60000) -> None:
        try:
            self._servers = parse_bootstrap(bootstrap_servers)
        except ValueError as e:
            raise InvalidConfigError(f"option kafka.bootstrap.servers: {e}") from None
        self.acks = acks
        self.codec = _CODECS[compression]
        self.batch_records = batch_records
        self.timeout_ms = timeout_ms
        self._boot: BrokerConnection | None = None
        self._conns: dict[int, BrokerConnection] = {}
        self._brokers: dict[int, tuple[str, int]] = {}
        self._topics: dict[str, list[int]] = {}  # topic -> leader id per partition
        self._pending: dict[tuple[str, int], list] = {}
        self._sticky = StickyPartitioner()
        self.sent = 0
        # Kafka's rule: idempotence needs acks=all (a batch acknowledged by the leader alone could
        # be lost and resent under the same sequence).
        self.idempotent = idempotent and acks == -1
        self.retries = retries
        self.producer_id, self.producer_epoch = -1, -1
        self._sequences: dict[tuple[str, int], int] = {}
        self.retried = 0  # Produce requests sent again (for tests and logs)
        self.txn, self.transactional_id, self.txn_timeout_ms = txn, transactional_id, txn_timeout_ms
        if txn is not None:
            if acks != -1 or not idempotent or not transactional_id:
                raise InvalidConfigError("a transactional producer needs acks=all, idempotence "
                                         "and a transactional id")
        self._in_txn: set[tuple[str, int]] = set()  # partitions added to the transaction

    def _bootstrap(self) -> BrokerConnection:
        if self._boot is None:
            self._boot = connect_first(self._servers, self.timeout_ms / 1000, "appliance-spark")
        return self._boot

    def _metadata(self, topic: str) -> list[int]:
        leaders = self._topics.get(topic)
        if leaders is not None:
            return leaders
        conn = self._bootstrap()
        deadline = time.monotonic() + self.timeout_ms / 1000
        while True:
            md = conn.request(3, {"topics": [{"name": topic}], "allow_auto_topic_creation": True})
            for b in md.brokers:
                self._brokers[b.node_id] = (b.host, b.port)
            t = md.topics[0]
            if t.error_code == 0 and t.partitions and all(p.leader_id >= 0 for p in t.partitions):
                leaders = [-1] * len(t.partitions)
                for p in t.partitions:
                    leaders[p.partition_index] = p.leader_id
                self._topics[topic] = leaders
                return leaders
            if t.error_code not in (0, *_RETRY_METADATA) or time.monotonic() > deadline:
                if t.error_code in (0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
                    raise UnknownTopicOrPartitionError(
                        f"topic {topic!r} does not exist on {conn.address} (and was not created)")
                raise error_for_code(t.error_code)(f"metadata for topic {topic!r}")
            time.sleep(0.1)

    def _conn(self, node: int) -> BrokerConnection:
        c = self._conns.get(node)
        if c is None:
            host, port = self._brokers[node]
            c = self._conns[node] = BrokerConnection(host, port, timeout=self.timeout_ms / 1000,
                                                     client_id="appliance-spark")
        return c

    def send(self, topic: str, key: bytes | None, value: bytes | None,
             headers: Sequence[tuple[str, bytes | None]] = (), partition: int | None = None) -> None:
        """Queue one record (sent when its partition's buffer is full or on :meth:`flush`)."""
        n = len(self._metadata(topic))
        if partition is None:
            partition = (partition_for(key, n) if key is not None
                         else self._sticky.partition(topic, n))
        elif not 0 <= partition < n:
            raise InvalidConfigError(f"partition {partition} is outside topic {topic!r} "
                                     f"(it has {n} partitions)")
        buf = self._pending.setdefault((topic, partition), [])
        buf.append((key, value, tuple(headers)))
        if len(buf) >= self.batch_records:
            self.flush()
            self._sticky.next(topic, n)

    @property
    def partitions(self) -> set[tuple[str, int]]:
        """The partitions this transactional producer added to its transaction."""
        return set(self._in_txn)

    def begin(self) -> None:
        """Take the producer id now (a transactional one aborts what its id left open)."""
        if self.idempotent and self.producer_id < 0:
            self._init_producer_id()

    def _init_producer_id(self) -> None:
        if self.txn is not None:
            self.producer_id, self.producer_epoch = self.txn.init_producer(
                self.transactional_id, self.txn_timeout_ms)
            return
        conn = self._bootstrap()
        self.producer_id, self.producer_epoch = init_producer_id(
            lambda: conn.request(22, {"transactional_id": None, "transaction_timeout_ms": self.timeout_ms}),
            self.timeout_ms / 1000)

    def flush(self) -> None:
        """Send everything queued and wait for the acknowledgements (acks option).

        Retries a request up to ``retries`` times on connection errors and retriable error
        codes, resending the same batches (idempotent: written once)."""
        if self.idempotent and self.producer_id < 0:
            self._init_producer_id()
        if self.txn is not None:
            new = [tp for tp, recs in self._pending.items() if recs and tp not in self._in_txn]
            if new:
                self.txn.add_partitions(self.transactional_id, self.producer_id,
                                        self.producer_epoch, new)
                self._in_txn.update(new)
        by_leader: dict[int, dict[str, list]] = {}
        for (topic, part), recs in self._pending.items():
            if not recs:
                continue
            leader = self._metadata(topic)[part]
            kw = {}
            if self.idempotent:
                seq = self._sequences.get((topic, part), 0)
                kw = {"producer_id": self.producer_id, "producer_epoch": self.producer_epoch,
                      "base_sequence": seq, "is_transactional": self.txn is not None}
                self._sequences[(topic, part)] = (seq + len(recs)) % (1 << 31)
            by_leader.setdefault(leader, {}).setdefault(topic, []).append(
                {"index": part, "records": build_batch(recs, compression=self.codec, **kw)})
            self.sent += len(recs)
        self._pending = {}
        for leader, topics in by_leader.items():
            self._produce(leader, topics)

    def _produce(self, leader: int, topics: dict[str, list]) -> None:
        body = {"transactional_id": self.transactional_id, "acks": self.acks, "timeout_ms": self.timeout_ms,
                "topic_data": [{"name": t, "partition_data": d} for t, d in topics.items()]}
        delay = 0.1
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            try:
                resp = self._conn(leader).request(0, body)
            except ConnectionFailed:
                if last:
                    raise
                self._drop(leader)
            else:
                if resp is None:  # acks=0
                    return
                retry = self._check(resp, last)
                if not retry:
                    return
            self.retried += 1
            time.sleep(delay)
            delay = min(delay * 2, 2.0)

    def _check(self, resp, last: bool) -> bool:
        """Whether to resend; raises for errors that are final."""
        retry = False
        for t in resp.responses:
            for pr in t.partition_responses:
                code = pr.error_code
                if not code or (code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER and self.idempotent):
                    continue  # a retried batch the broker already had: written once
                if code in _RETRIABLE and not last:
                    retry = True
                    continue
                raise error_for_code(code)(f"producing to {t.name}-{pr.index}: "
                                           f"{ErrorCode(code).name}")
        return retry

    def _drop(self, node: int) -> None:
        c = self._conns.pop(node, None)
        if c is not None:
            c.close()

    def close(self) -> None:
        for c in self._conns.values():
            c.close()
        if self._boot is not None:
            self._boot.close()
        self._conns.clear()
        self._boot = None


assert issubclass(UnknownTopicOrPartitionError, KafkaError)
