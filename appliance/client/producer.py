"""The producer: records in, acknowledged batches out (Kafka's producer API, 0.8 design names).

``send(topic, record)`` encodes the key and value, picks the partition and appends the record
to that partition's queue; a sender thread cuts a batch from a queue once it holds
``batch.size`` bytes or its oldest record waited ``linger.ms`` (at once for ``producer.type=sync``,
where ``send`` then waits for the acknowledgement) and hands it to the transport. A completion
thread waits for acknowledgements in send order, retries retriable failures (NOT_LEADER,
UNKNOWN_TOPIC, lost connections, timeouts) after ``retry.backoff.ms`` with fresh metadata, and
completes the records' futures.

Ordering: with ``enable.idempotence`` a partition has one batch in flight at a time and every
batch carries the producer id and its sequence number, so a retried batch the broker already
wrote is recognised and never written twice.

Transactions (``transactional.id``, KIP-98): ``init_transactions()``, then ``begin_transaction()``,
sends, ``send_offsets_to_transaction()``, ``commit_transaction()`` / ``abort_transaction()``. The
sender thread adds each partition to the transaction (AddPartitionsToTxn) before its first
batch goes out; every batch carries the transactional bit. The state and the coordinator's
requests are :mod:`appliance.client.transactions`'. Without it, up to
``max.in.flight.requests.per.connection`` batches per partition are in flight and a retry may
reorder them (as in Kafka).

Thread-safety: ``send``, ``send_many`` and ``flush`` may be called from any thread.
"""

from __future__ import annotations

import collections
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from appliance.client import config as cfg
from appliance.client.cluster import RETRIABLE, Cluster
from appliance.client.delivery import (
    CallbackHandler,
    ProducerFuture,
    RecordFuture,
    RecordMetadata,
    RunFuture,
    call_hook,
    complete_many,
)
from appliance.client.errors import ClientClosedError, KafkaConnectionError, QueueFull
from appliance.client.java_names import encoder_named, partitioner_named
from appliance.client.partitioner import StickyPartitioner, partition_for
from appliance.client.producer_id import init_producer_id
from appliance.client.serialization import DefaultEncoder, as_encoder
from appliance.client.transactions import (
    ABORTABLE,
    IN_TRANSACTION,
    TransactionManager,
    TransactionStateError,
)
from appliance.client.transport import open_transport
from appliance.errors import (
    DuplicateSequenceError,
    KafkaError,
    MessageTooLargeError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)
from appliance.records import Compression, Record, build_batch
from native.batch_build import build_batch_columns, max_batch_size
from native.out_pool import OutputPool
from native.record_run import RECORD_OVERHEAD, Send
from native.record_run import Run as _Run

# Run: plain values sent one by one to one partition while it is open: one queue item, one
# batch, one RunFuture (each record's future is a RecordFuture into it). Send: send()'s fast
# path, which appends to an open Run. Both in C (native/record_run.c, where the measured reason
# is). Measured reason for runs: an _Item, a ProducerFuture and a RecordMetadata per record,
# queued and cut one by one, held Producer.send to ~0.2 M records/s; a run takes a list append,
# a clock read and a two-slot future per record, and the numba builder encodes the whole list
# at once. The fast path checks two numbers only: ``left`` (estimated bytes the batch still has
# room for) and ``cap`` (records the run may hold: the slots it reserved in the producer's queue
# budget; 0 while the slow path changes the run, -1 once closed). Everything else (a new run,
# more slots, a full run, a queue that is full) is the slow path, _put_run, taken about once per
# batch.

__all__ = ["Producer", "ProducerRecord", "RecordMetadata", "ProducerFuture", "CallbackHandler",
           "DefaultPartitioner", "QueueFull"]

log = logging.getLogger("appliance.client.producer")

CODECS = {"none": Compression.NONE, "gzip": Compression.GZIP, "snappy": Compression.SNAPPY,
          "lz4": Compression.LZ4, "zstd": Compression.ZSTD}
# RECORD_OVERHEAD (from native.record_run): varint lengths, attributes, deltas: a safe
# over-estimate of a record's bytes beyond its key and value
BATCH_OVERHEAD = 61  # the v2 batch header
# Queue slots an open run takes from queue.buffering.max.messages at a time: send()'s fast path
# then counts nothing but the run's own length. Unused slots go back when the run closes, and
# at once (from every open run) when the queue is otherwise full, so the limit stays exact.
RUN_RESERVE = 4096


@dataclass(slots=True)
class ProducerRecord:
    """A record to send; every field but ``value`` is optional."""

    value: Any
    key: Any = None
    headers: Sequence[tuple[str, bytes | None]] = ()
    timestamp: int | None = None
    partition: int | None = None


class DefaultPartitioner:
    """Kafka's default: murmur2(key) & 0x7fffffff % partitions for keyed records; null keys stick
    to one partition until a batch for it is sent (KIP-480's sticky partitioner)."""

    def __init__(self) -> None:
        self.sticky = StickyPartitioner()

    def partition(self, key: bytes | None, num_partitions: int, topic: str = "") -> int:
        if key is None:
            return self.sticky.partition(topic, num_partitions)
        return partition_for(key, num_partitions)

    def on_new_batch(self, topic: str, partition: int, num_partitions: int) -> None:
        if self.sticky._current.get(topic) == partition and num_partitions > 1:
            self.sticky.next(topic, num_partitions)


def _encoders(c: dict[str, Any]) -> tuple[Any, Any]:
    """(key encoder, value encoder) from the resolved config. A str names a Kafka class
    (java_names). 0.8.2: keys use serializer.class's encoder unless a key serializer is set.
    Raises InvalidConfigError for an unknown name or a modern and a 0.8.2 key both set."""
    def one(modern: str, old: str) -> tuple[Any, str]:
        if c[modern] is not None and c[old] is not None:
            raise cfg.InvalidConfigError(f"config {modern} and {old} are both set: give one")
        return (c[modern], modern) if c[modern] is not None else (c[old], old)

    def encoder(x: Any, name: str) -> Any:
        if isinstance(x, str):
            return encoder_named(x, c["serializer.encoding"], key=name)
        return as_encoder(x)

    value, value_name = one("value.serializer", "serializer.class")
    key, key_name = one("key.serializer", "key.serializer.class")
    if key is None and c["serializer.class"] is not None:
        key, key_name = c["serializer.class"], "serializer.class"
    return encoder(key, key_name), encoder(value, value_name)


def _partitioner(c: dict[str, Any], refresh_ms: int) -> Any:
    """The partitioner object from ``partitioner`` / ``partitioner.class`` (an object, or a
    Kafka class name). Raises InvalidConfigError for an unknown name or both keys set."""
    p, old = c["partitioner"], c["partitioner.class"]
    if p is not None and old is not None:
        raise cfg.InvalidConfigError("config partitioner and partitioner.class are both set: give one")
    p = p if p is not None else old
    if isinstance(p, str):
        p = partitioner_named(p, refresh_ms)
    return p if p is not None else DefaultPartitioner()


def _metadata_max_age(c: dict[str, Any]) -> float:
    """metadata.max.age.ms, or 0.8.2's topic.metadata.refresh.interval.ms when set (negative:
    no periodic refresh; lookups of a known topic then use the cache until an error)."""
    refresh = c["topic.metadata.refresh.interval.ms"]
    if refresh is None:
        return c["metadata.max.age.ms"]
    return float("inf") if refresh < 0 else refresh


class _Columns:
    """Bulk values as one byte array and value offsets: what the numba batch builder takes.

    Measured reason: send_many's per-value Python loop (type check, len, list append, then a
    join and a length pass in the sender thread) held a list of 100-byte values to 0.6-1.3 M
    records/s. Here the lengths come from one C-level map and the bytes from one join, and the
    cuts into batches from a cumulative sum, so no Python runs per value."""

    __slots__ = ("buf", "offsets")

    def __init__(self, buf: np.ndarray, offsets: np.ndarray) -> None:
        self.buf, self.offsets = buf, offsets

    @classmethod
    def of(cls, values: Sequence) -> _Columns | None:
        """None unless every value is bytes-like (None, str and others take the general path,
        which raises or converts as before)."""
        if not values:
            return None
        try:
            lengths = np.fromiter(map(len, values), np.int64, count=len(values))
            joined = b"".join(values)
        except TypeError:  # None, or a value join does not take
            return None
        offsets = np.zeros(len(values) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        if int(offsets[-1]) != len(joined):  # e.g. a memoryview of wider items: len != bytes
            return None
        return cls(np.frombuffer(joined, np.uint8), offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def chunks(self, room: int) -> list[tuple[_Columns, int]]:
        """Consecutive runs of values whose estimated record sizes (RECORD_OVERHEAD + length)
        add up to at most ``room`` (at least one value each), with their estimated batch size:
        the cuts send_many's loop makes value by value."""
        n = len(self)
        est = np.arange(n + 1, dtype=np.int64) * RECORD_OVERHEAD + self.offsets
        out, i = [], 0
        while i < n:
            j = int(np.searchsorted(est, est[i] + room, side="right")) - 1
            j = min(max(j, i + 1), n)
            lo, hi = int(self.offsets[i]), int(self.offsets[j])
            out.append((_Columns(self.buf[lo:hi], self.offsets[i:j + 1] - lo),
                        BATCH_OVERHEAD + int(est[j] - est[i])))
            i = j
        return out

    def to_list(self) -> list[bytes]:
        b, o = self.buf, self.offsets.tolist()
        return [b[o[k]:o[k + 1]].tobytes() for k in range(len(o) - 1)]


@dataclass(slots=True)
class _Item:
    """A queued record, or (``bulk``) a whole list of values that becomes one batch of its own."""

    key: bytes | None
    value: bytes | None
    headers: tuple
    timestamp: int
    future: ProducerFuture | None
    size: int
    bulk: list | np.ndarray | _Columns | _Run | None = None


@dataclass(slots=True)
class _Queue:
    items: collections.deque = field(default_factory=collections.deque)
    nbytes: int = 0
    first_at: float = 0.0  # monotonic time the oldest queued item arrived
    in_flight: int = 0
    urgent: int = 0  # sync sends waiting on this partition: send without lingering
    bulks: int = 0  # bulk items queued


class _InPlace:
    """A numba-built batch that the transport builds in place (the IPC transport: in its request
    ring, sparing the producer a copy of every byte, measured in perf/README.md); ``size`` is its
    length once built. The build is pure, so a retry builds the same bytes again."""

    __slots__ = ("bound", "build", "size")

    def __init__(self, bound: int, build: Callable[..., memoryview]) -> None:
        self.bound = bound
        self.build = build
        self.size = 0

    def __call__(self, view: memoryview) -> int:
        self.size = len(self.build(out=np.frombuffer(view, np.uint8)))
        return self.size

    def __len__(self) -> int:
        return self.size


@dataclass(slots=True)
class _Batch:
    topic: str
    partition: int
    items: list
    data: bytes | memoryview | _InPlace  # a view of a reused array for numba-built batches
    count: int
    attempts: int = 0
    future: Any = None
    producer_id: int = -1
    sequence: int = -1


class Producer(Send):
    """See the module docstring. ``config`` uses Kafka's key names (see
    :data:`appliance.client.config.PRODUCER_KEYS`); keyword arguments with underscores work too.
    A 0.8.2 producer.properties works as it is (``config.load_properties``): class names resolve
    through :mod:`appliance.client.java_names`, ``kafka.producer.DefaultPartitioner`` hashes keys
    as 0.8.2 did (:mod:`appliance.client.java_hash`).

    Raises InvalidConfigError (naming key and value) for bad settings, KafkaError when the
    IPC transport is required but unavailable."""

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        c = self.config = cfg.resolve(cfg.PRODUCER_KEYS, config, kwargs)
        self.sync = c["producer.type"] == "sync"
        self.acks = c["acks"]
        self.idempotent = c["enable.idempotence"]
        self._txn: TransactionManager | None = None
        self._transactional = c["transactional.id"] is not None
        if self._transactional:
            if not c["transactional.id"]:
                raise cfg.InvalidConfigError("config transactional.id='': an id must not be empty")
            if c["transport"] == "ipc":  # the transactional path is the TCP one (AddPartitionsToTxn first)
                raise cfg.InvalidConfigError("config transport=ipc: a transactional producer uses tcp")
            c["transport"] = "tcp"
            self.idempotent = True  # Kafka: transactional.id implies enable.idempotence
        if self.idempotent and self.acks != -1:
            raise cfg.InvalidConfigError(f"config acks={self.acks}: enable.idempotence needs acks=all")
        self.codec = CODECS[c["compression.type"]]
        # 0.8.2's compressed.topics: the codec applies to these topics only
        self._compressed = frozenset(c["compressed.topics"]) if c["compressed.topics"] else None
        self.batch_size = c["batch.size"]
        self.linger = c["linger.ms"] / 1000
        self.max_queued = c["queue.buffering.max.messages"]
        self._room_low = self.max_queued - max(1, self.max_queued // 4)  # see self._room
        self.enqueue_timeout = c["queue.enqueue.timeout.ms"]
        if c["block.on.buffer.full"] is False and self.enqueue_timeout == -1:
            self.enqueue_timeout = 0  # the new producer's "raise at once" (BufferExhaustedException)
        self.batch_records = c["batch.num.messages"]  # None: batches are cut by bytes and time
        self.retries = c["retries"]
        self.backoff = c["retry.backoff.ms"] / 1000
        self.request_timeout_ms = c["request.timeout.ms"]
        # what the produce request asks the broker to wait for the acks (timeout.ms when given)
        self.ack_timeout_ms = c["timeout.ms"] if c["timeout.ms"] is not None else self.request_timeout_ms
        self.max_in_flight = 1 if self.idempotent else c["max.in.flight.requests.per.connection"]
        self.max_request_size = c["max.request.size"]
        self.key_encoder, self.value_encoder = _encoders(c)
        self._plain_values = type(self.value_encoder) is DefaultEncoder
        self._max_block_s = c["max.block.ms"] / 1000
        refresh_ms = c["topic.metadata.refresh.interval.ms"]
        self.partitioner = _partitioner(c, 600_000 if refresh_ms is None else refresh_ms)
        # 0.8.2's partitioners hash the key as given to send(), not its encoded bytes
        self._key_objects = bool(getattr(self.partitioner, "takes_key_object", False))
        for name, why in cfg.PRODUCER_NO_EFFECT.items():
            if c[name] is not None:
                log.warning("producer config %s=%s is accepted but has no effect here: %s", name, c[name], why)
        self.handler: Any = c["callback.handler"]
        self.cluster = Cluster(c["bootstrap.servers"], client_id=c["client.id"],
                               request_timeout_ms=c["request.timeout.ms"],
                               connect_timeout_ms=c["socket.connection.setup.timeout.ms"],
                               allow_auto_create=c["allow.auto.create.topics"],
                               metadata_max_age_ms=_metadata_max_age(c),
                               socket_buffers=(c["send.buffer.bytes"], c["receive.buffer.bytes"]),
                               security=cfg.security_of(c))
        self.transport = open_transport(c["transport"], self.cluster, c["bootstrap.servers"], c)
        self._send_many_batches = getattr(self.transport, "send_batches", None)
        self._send_built = getattr(self.transport, "send_built", None)
        # _put takes the lock itself: Condition.__enter__ is a Python-level call per record
        self._cond_lock = threading.RLock()
        self._cond = threading.Condition(self._cond_lock)
        # Callers blocked on a full queue wait on their own condition, woken once the sender
        # has taken a quarter of the queue, not after each batch it takes nor by every event
        # the sender waits for: each wake-up is a thread switch, and on 2 CPUs a preempted
        # disk worker (measured in perf/README.md, bench_ipc's bulk cell)
        self._room = threading.Condition(self._cond_lock)
        # Guards the runs (their values, open flags, self._runs) and self._queued among the
        # Python paths. send()'s fast path (C) takes no lock: the code under this one closes a
        # run's fast path (cap) before changing it (see native/record_run.c). Order: _cond_lock,
        # then _run_lock.
        self._run_lock = threading.Lock()
        self._queues: dict[tuple[str, int], _Queue] = {}
        # the open run of each partition: plain bytes values sent one by one join it in send()
        self._runs: dict[tuple[str, int | None], _Run] = {}
        # send()'s look-up: (topic, the partition argument as given, None included) -> the open
        # run records sent so go to (None: the sticky partition's run)
        self._fast: dict[tuple[str, int | None], _Run] = {}
        # estimated bytes a run may hold: it closes when the next record does not fit
        self._run_room = min(self.batch_size, self.max_request_size) - BATCH_OVERHEAD
        self._runs_on = (not self.sync and self.handler is None and self._plain_values
                         and self.batch_records is None)
        self._sticky = (self.partitioner.sticky._current if isinstance(self.partitioner, DefaultPartitioner)
                        else None)
        self._queued = 0  # records queued, not yet cut into a batch
        self._outstanding = 0  # batches cut and not yet completed
        self._flushing = 0
        self._closing = False
        self._closed = False
        self._failed: BaseException | None = None  # what stopped the sender or completer thread
        self._inflight: collections.deque[_Batch] = collections.deque()
        self._inflight_cond = threading.Condition()
        self._producer_id, self._epoch = -1, -1
        # Batches are built into reused arrays (the sender thread's alone; an array goes back
        # once its batch is done, retries included). Measured reason: a fresh 1 MB array per
        # batch (page faults on first touch) and its copy into a bytes object were a third of
        # the bulk producer's CPU over IPC.
        self._out_pool = OutputPool(depth=self.max_in_flight + 3)
        self._sequences: dict[tuple[str, int], int] = {}
        if self._transactional:  # its producer id comes with init_transactions()
            self._txn = TransactionManager(self.cluster, c["transactional.id"], c["transaction.timeout.ms"],
                                           self.backoff)
        elif self.idempotent:
            self._init_producer_id()
        self._sender = threading.Thread(target=self._send_loop, name="appliance-producer-sender", daemon=True)
        self._completer = threading.Thread(target=self._complete_loop, name="appliance-producer-acks", daemon=True)
        self._sender.start()
        self._completer.start()

    # ------------------------------------------------------------------ public API
    # send(topic, record, *, partition=None, timeout=None) is Send.send (native/record_run.c):
    # a bytes value joining its partition's open run there, everything else here.
    def _send_slow(self, topic: str, record: Any, *, partition: int | None = None,
                   timeout: float | None = None) -> Any:
        """send(): queue one record, or each record of a list, for ``topic``; returns its ProducerFuture
        (a list of them for a list).

        A record is a value (bytes/str, or anything the value encoder takes), a ``(key, value)``
        or ``(key, value, headers)`` tuple, or an object with ``key``/``value`` and optionally
        ``headers``/``timestamp``/``partition`` attributes (ProducerRecord, Record).

        Sync producers wait for the acknowledgement and raise its error. Raises QueueFull (per
        queue.enqueue.timeout.ms), UnknownTopicOrPartitionError (topic missing and not
        auto-created, or no such partition), MessageTooLargeError, TypeError (unencodable value),
        ClientClosedError."""
        if isinstance(record, list):
            futures = [self._enqueue(topic, r, partition) for r in record]
        else:
            futures = [self._enqueue(topic, record, partition)]
        if self.sync:
            deadline = None if timeout is None else time.monotonic() + timeout
            for f in futures:
                f.result(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return futures if isinstance(record, list) else futures[0]

    def send_many(self, topic: str, values: Iterable[bytes | None] | np.ndarray,
                  partition: int | None = None) -> list[ProducerFuture]:
        """The bulk path: values (bytes, null keys) are cut straight into whole batches of up to
        a request's size, each batch to one partition (``partition``, or the sticky one, which
        moves on after every batch). ``values`` may also be a 2-D uint8 array, one fixed-size
        value per row: no Python work per record at all. Returns one future per batch; its
        RecordMetadata has the batch's first offset. Sync producers wait for every batch.
        Raises as :meth:`send`."""
        self._check_open()
        if self._txn is not None:
            self._txn.check_sendable()
        info = self.cluster.topic(topic, timeout=self.config["max.block.ms"] / 1000)
        n = len(info.leaders)
        if partition is not None and partition not in info.leaders:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} has no partition {partition} (it has {n})")
        futures = []
        if isinstance(values, np.ndarray):
            return self._send_rows(topic, values, partition, n)
        # a bulk send fills whole requests: batch.size (16 KiB by default) is for the record-at-a-
        # time path, where it bounds latency; here it would only multiply per-batch overhead
        limit = max(self.batch_size, self.max_request_size - 1024, 1)
        if not isinstance(values, (list, tuple)):
            values = list(values)
        cols = _Columns.of(values)
        if cols is not None:
            futures = [self._enqueue_bulk(topic, partition, n, part, size)
                       for part, size in cols.chunks(limit - BATCH_OVERHEAD)]
            if self.sync:
                for f in futures:
                    f.result()
            return futures
        chunk: list = []
        size = BATCH_OVERHEAD
        for v in values:
            if v is not None and not isinstance(v, bytes):
                v = bytes(v)
            rs = RECORD_OVERHEAD + (len(v) if v is not None else 0)
            if chunk and size + rs > limit:
                futures.append(self._enqueue_bulk(topic, partition, n, chunk, size))
                chunk, size = [], BATCH_OVERHEAD
            chunk.append(v)
            size += rs
        if chunk:
            futures.append(self._enqueue_bulk(topic, partition, n, chunk, size))
        if self.sync:
            for f in futures:
                f.result()
        return futures

    def flush(self, timeout: float | None = None) -> bool:
        """Send everything queued now and wait for every outstanding batch to complete.
        Returns False if ``timeout`` s passed first, or a thread of the producer failed.
        Errors are reported on the futures."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._flushing += 1
            self._cond.notify_all()
            try:
                while self._queued or self._outstanding:
                    if self._failed is not None:
                        return False  # nothing more will complete: the records failed
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return False
                    self._cond.wait(left if left is not None else 1.0)
                return True
            finally:
                self._flushing -= 1

    def partitions_for(self, topic: str) -> list[int]:
        """The topic's partition ids (asks the broker if not cached)."""
        return self.cluster.topic(topic, timeout=self.config["max.block.ms"] / 1000).partitions

    def close(self, timeout: float | None = None) -> None:
        """Flush (up to ``timeout`` s), stop the threads, close connections. Records still
        queued after the timeout fail with ClientClosedError. Idempotent."""
        if self._closed:
            return
        self.flush(timeout)
        with self._cond:
            self._closing = True
            with self._run_lock:
                for tp, run in list(self._runs.items()):
                    self._close_run(tp, run)
            self._cond.notify_all()
            self._room.notify_all()
        self._sender.join(5)
        with self._inflight_cond:
            self._inflight_cond.notify_all()
        self._completer.join(5)
        with self._cond:
            for q in self._queues.values():
                for it in q.items:
                    if it.future is not None:
                        it.future._complete(None, ClientClosedError("producer closed before the record was sent"))
                q.items.clear()
            self._closed = True
        self.transport.close()
        self.cluster.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ enqueue
    def _check_open(self) -> None:
        if self._failed is not None:
            raise self._failed
        if self._closing or self._closed:
            raise ClientClosedError("the producer is closed")

    def _normalize(self, record: Any) -> tuple[Any, Any, tuple, int | None, int | None]:
        if isinstance(record, (bytes, bytearray, memoryview, str)) or record is None:
            return None, record, (), None, None
        if isinstance(record, tuple):
            if len(record) == 2:
                return record[0], record[1], (), None, None
            if len(record) == 3:
                return record[0], record[1], tuple(record[2] or ()), None, None
            raise TypeError(f"a record tuple is (key, value) or (key, value, headers), not {len(record)} items")
        if hasattr(record, "value"):
            ts = getattr(record, "timestamp", None)
            if isinstance(record, Record) and ts is not None and ts < 0:
                ts = None
            return (getattr(record, "key", None), record.value, tuple(getattr(record, "headers", ()) or ()),
                    ts, getattr(record, "partition", None))
        return None, record, (), None, None  # an object for the value encoder

    def _choose_partition(self, topic: str, key: Any, n: int) -> int:
        """``key``: the encoded key, or for a partitioner that ``takes_key_object`` the key as
        given to send()."""
        p = self.partitioner
        if isinstance(p, DefaultPartitioner):
            return p.partition(key, n, topic)
        if self._key_objects:
            part = p.partition(key, n, topic)
        else:
            part = p.partition(key, n) if hasattr(p, "partition") else p(key, n)
        if not isinstance(part, int) or not 0 <= part < n:
            raise ValueError(f"partitioner returned {part!r} for a topic with {n} partitions")
        return part

    def _enqueue(self, topic: str, record: Any, partition: int | None) -> ProducerFuture:
        self._check_open()
        if self._txn is not None:
            self._txn.check_sendable()
        if type(record) is bytes and self._plain_values:
            # the common record, a bytes value: what _normalize and the default encoder give
            key, kb, vb, headers, ts, rec_partition = None, None, record, (), None, None
        else:
            key, value, headers, ts, rec_partition = self._normalize(record)
            kb = self.key_encoder.to_bytes(key) if key is not None else None
            vb = self.value_encoder.to_bytes(value) if value is not None else None
            for hk, hv in headers:
                if not isinstance(hk, str) or not (hv is None or isinstance(hv, (bytes, bytearray))):
                    raise TypeError(f"header ({hk!r}, {hv!r}): expected (str, bytes or None)")
        info = self.cluster.topic(topic, timeout=self._max_block_s)
        n = len(info.leaders)
        part = partition if partition is not None else rec_partition
        if part is None:
            part = self._choose_partition(topic, key if self._key_objects else kb, n)
        elif part not in info.leaders:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} has no partition {part} (it has {n})")
        size = RECORD_OVERHEAD + (len(kb) if kb else 0) + (len(vb) if vb else 0)
        if headers:
            size += sum(len(hk) + len(hv or b"") + 4 for hk, hv in headers)
        if size + BATCH_OVERHEAD > self.max_request_size:
            raise MessageTooLargeError(f"record of ~{size} bytes exceeds max.request.size={self.max_request_size}")
        if self._runs_on and kb is None and type(vb) is bytes and ts is None and not headers:
            return self._put_run(topic, part, vb, size, (topic, partition))
        fut = ProducerFuture()
        item = _Item(kb, vb, headers, int(time.time() * 1000) if ts is None else int(ts), fut, size)
        self._put(topic, part, item)
        if self.handler is not None:
            call_hook(self.handler, "on_enqueue", topic, part, kb, vb)
        return fut

    def _enqueue_bulk(self, topic: str, partition: int | None, n: int, values: list, size: int) -> ProducerFuture:
        if partition is None:
            partition = self._choose_partition(topic, None, n)
        fut = ProducerFuture()
        item = _Item(None, None, (), int(time.time() * 1000), fut, size, bulk=values)
        self._put(topic, partition, item, count=1)
        return fut

    def _close_run(self, tp: tuple[str, int | None], run: _Run) -> None:
        """No more records join ``run`` (full, cut, or another item follows it); the sender may
        take it (the caller wakes it); its unused queue slots go back. Under _run_lock."""
        run.cap = -1  # first: send()'s fast path appends no more
        run.open = False
        n = len(run.values)
        self._queued -= run.reserved - n
        run.reserved = n
        if self._runs.get(tp) is run:
            del self._runs[tp]
        for k in run.keys:
            if self._fast.get(k) is run:
                del self._fast[k]

    def _reclaim(self) -> None:
        """Give back every open run's unused queue slots (the queue is full). Under _run_lock."""
        for run in self._runs.values():
            run.cap = 0  # first: send()'s fast path appends no more
            n = len(run.values)
            self._queued -= run.reserved - n
            run.reserved = run.cap = n

    def _put_run(self, topic: str, part: int, value: bytes, size: int,
                 key: tuple[str, int | None]) -> RecordFuture:
        """send()'s slow path for a plain value: into the partition's open run (a new one if
        there is none or the value does not fit), taking more queue slots when the run has
        used its own; the run is then what send() with ``key`` finds."""
        tp = (topic, part)
        with self._cond_lock:
            self._wait_for_room()
            with self._run_lock:
                run = self._runs.get(tp)
                if run is not None:
                    run.cap = 0  # send()'s fast path waits here while this changes the run
                    if run.left < size:  # full: the sender may take it now
                        self._close_run(tp, run)
                        self._cond.notify_all()
                        run = None
                if run is None:
                    run = self._runs[tp] = _Run(self._run_room, RunFuture())
                    q = self._queues.get(tp)
                    if q is None:
                        q = self._queues[tp] = _Queue()
                    if not q.items:
                        q.first_at = time.monotonic()
                    q.items.append(_Item(None, None, (), 0, run.future, 0, bulk=run))
                    q.bulks += 1
                    if len(q.items) == 1:
                        self._cond.notify_all()  # a new linger deadline
                # (topic, None) only for the default partitioner: its sticky partition stays
                # until this run is cut; another partitioner must see every record
                if self._fast.get(key) is not run and (key[1] is not None or self._sticky is not None):
                    self._fast[key] = run
                    run.keys.append(key)
                if len(run.values) >= run.reserved:  # _wait_for_room made sure there is a free slot
                    k = min(self.max_queued - self._queued, RUN_RESERVE)
                    run.reserved += k
                    self._queued += k
                i = run.add(value, size)
                if run.left <= 0:  # one value larger than batch.size: a batch of its own
                    self._close_run(tp, run)
                    self._cond.notify_all()
                else:
                    run.cap = run.reserved  # the fast path may append again
            return RecordFuture(run.future, i)

    def _wait_for_room(self) -> None:
        """Block (per queue.enqueue.timeout.ms) while the queue holds max queued records. Under
        _cond_lock."""
        t = self.enqueue_timeout
        if self._queued >= self.max_queued:
            with self._run_lock:
                self._reclaim()
        if self._queued >= self.max_queued:
            if t == 0:
                raise QueueFull(f"producer queue full ({self.max_queued} records, "
                                "queue.enqueue.timeout.ms=0)")
            deadline = None if t < 0 else time.monotonic() + t / 1000
            while self._queued >= self.max_queued:
                self._check_open()
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise QueueFull(f"producer queue stayed full ({self.max_queued} records) for "
                                    f"queue.enqueue.timeout.ms={t}")
                self._room.wait(left if left is not None else 1.0)
                with self._run_lock:
                    self._reclaim()
        self._check_open()

    def _put(self, topic: str, part: int, item: _Item, count: int = 1) -> None:
        with self._cond_lock:
            run = self._runs.get((topic, part))
            if run is not None:  # records after it must not join it: they would go out before this one
                with self._run_lock:
                    self._close_run((topic, part), run)
            self._wait_for_room()
            q = self._queues.get((topic, part))
            if q is None:
                q = self._queues[(topic, part)] = _Queue()
            if not q.items:
                q.first_at = time.monotonic()
            q.items.append(item)
            q.nbytes += item.size
            if item.bulk is not None:
                q.bulks += 1
            with self._run_lock:
                self._queued += count
            if self.sync:
                q.urgent += 1
            # The sender sleeps until the earliest linger deadline it knows: a queue's first
            # record sets a new one, so wake it then too.
            if self.sync or len(q.items) == 1 or q.nbytes >= self.batch_size or item.bulk is not None:
                self._cond.notify_all()

    # ------------------------------------------------------------------ sender thread
    def _ready(self, now: float) -> tuple[list[tuple[str, int]], float | None]:
        ready, wake = [], None
        for tp, q in self._queues.items():
            if not q.items or q.in_flight >= self.max_in_flight:
                continue
            due = q.first_at + self.linger
            bulk = q.items[0].bulk
            if (q.urgent or self._flushing or self._closing or q.nbytes >= self.batch_size
                    or (self.batch_records is not None and len(q.items) >= self.batch_records)
                    or (bulk is not None and (type(bulk) is not _Run or not bulk.open)) or due <= now):
                ready.append(tp)
            else:
                wake = due if wake is None else min(wake, due)
        return ready, wake

    def _cut(self, tp: tuple[str, int]) -> list[_Item]:
        q = self._queues[tp]
        first = q.items[0]
        count = None
        if first.bulk is not None:
            taken = [q.items.popleft()]
            q.bulks -= 1
            if type(first.bulk) is _Run:
                with self._run_lock:
                    self._close_run(tp, first.bulk)
                    count = len(first.bulk.values)
        elif (not q.bulks and BATCH_OVERHEAD + q.nbytes <= min(self.batch_size, self.max_request_size)
              and (self.batch_records is None or len(q.items) <= self.batch_records)):
            # everything queued fits one batch: what the loop below would take, without a
            # Python step per record
            taken = list(q.items)
            q.items.clear()
        else:
            taken, size = [], BATCH_OVERHEAD
            while q.items and q.items[0].bulk is None and (not taken or size + q.items[0].size <= self.max_request_size):
                if taken and (size + q.items[0].size > self.batch_size
                              or self.batch_records is not None and len(taken) >= self.batch_records):
                    break
                it = q.items.popleft()
                taken.append(it)
                size += it.size
        q.nbytes -= sum(i.size for i in taken)
        if self.sync:
            q.urgent = max(0, q.urgent - len(taken))
        q.first_at = time.monotonic()
        q.in_flight += 1
        with self._run_lock:
            self._queued -= len(taken) if count is None else count
        self._outstanding += 1
        return taken

    def _send_loop(self) -> None:
        cuts: list = []
        try:
            self._send_rounds(cuts)
        except BaseException as e:  # a bug: fail what waits, so flush(), close() and futures return
            self._thread_failed("sender", e, [items for _, items in cuts])

    def _send_rounds(self, cuts: list) -> None:
        """The sender's loop; ``cuts`` holds the round's batches being built and sent, so a
        failure can fail their records."""
        while True:
            with self._cond:
                while True:
                    now = time.monotonic()
                    ready, wake = self._ready(now)
                    if ready:
                        break
                    if self._closing and not self._queued:
                        return
                    self._cond.wait(None if wake is None else max(0.0, wake - now) + 0.0005)
                cuts[:] = [(tp, self._cut(tp)) for tp in ready]
                if self._queued <= self._room_low:
                    self._room.notify_all()  # queue room freed
            batches = []
            for (topic, part), items in cuts:
                try:
                    batches.append(self._build(topic, part, items))
                except Exception as e:  # a record the batch builder refuses fails alone
                    self._finish(_Batch(topic, part, items, b"", len(items)), None, e)
            if batches and self._txn is not None:
                batches = self._admit(batches)
            if batches:
                self._transmit(batches)
                if self._failed is not None:  # the acknowledgement thread died meanwhile
                    raise self._failed
            cuts.clear()  # their arrays go back to the pool once acknowledged, not at the next wake
            del batches

    def _build(self, topic: str, part: int, items: list[_Item]) -> _Batch:
        codec = self._codec_for(topic)
        if type(items[0].bulk) is _Run:
            return self._build_run(topic, part, items, items[0].bulk)
        if items[0].bulk is not None:
            ts = items[0].timestamp
            values = items[0].bulk
            if isinstance(values, _Columns):
                if codec == Compression.NONE:
                    return self._build_columns(topic, part, items, values, ts)
                values = values.to_list()
            elif isinstance(values, np.ndarray):
                if codec == Compression.NONE:
                    return self._build_columns(topic, part, items, values, ts)
                values = [bytes(r) for r in values]
            if codec == Compression.NONE and None not in values:
                return self._build_columns(topic, part, items, values, ts)
            recs = [Record(i, ts, None, v) for i, v in enumerate(values)]
        else:
            if codec == Compression.NONE:
                data = self._records_columns(items)
                if data is not None:
                    seq = self._batch_ready(topic, part, len(items))
                    buf, offsets, ts, kw = data
                    data = self._columns_batch(len(items), len(kw.get("keys", ())), len(buf), True, buf, offsets,
                                               timestamp=ts, producer_id=self._producer_id,
                                               producer_epoch=self._epoch, is_transactional=self._transactional, base_sequence=seq, **kw)
                    return _Batch(topic, part, items, data, len(items), producer_id=self._producer_id,
                                  sequence=seq)
            recs = [Record(i, it.timestamp, it.key, it.value, it.headers) for i, it in enumerate(items)]
        seq = self._batch_ready(topic, part, len(recs))
        data = build_batch(recs, compression=codec, producer_id=self._producer_id,
                           producer_epoch=self._epoch, is_transactional=self._transactional, base_sequence=seq)
        return _Batch(topic, part, items, data, len(recs), producer_id=self._producer_id, sequence=seq)

    def _codec_for(self, topic: str) -> Compression:
        """compression.type, or NONE for a topic compressed.topics does not list (0.8.2)."""
        if self._compressed is None or topic in self._compressed:
            return self.codec
        return Compression.NONE

    def _build_run(self, topic: str, part: int, items: list[_Item], run: _Run) -> _Batch:
        """A run's values, in one batch; the records' timestamps go to its RunFuture."""
        # the futures keep the run: not its values. Stamps: int(time.time() * 1000) per record,
        # as _enqueue stamps an item; ends: the values' cumulative lengths (a leading 0)
        values, ends, stamps = run.take()
        codec = self._codec_for(topic)
        n = len(values)
        ts = np.frombuffer(stamps, np.int64)
        run.future.stamps = ts
        seq = self._batch_ready(topic, part, n)
        if codec == Compression.NONE:
            buf = np.frombuffer(b"".join(values), np.uint8)
            base = int(ts[0])
            data = self._columns_batch(n, 0, len(buf), True, buf, np.frombuffer(ends, np.int64), timestamp=base,
                                       timestamp_deltas=ts - base, producer_id=self._producer_id,
                                       producer_epoch=self._epoch, is_transactional=self._transactional, base_sequence=seq)
        else:
            stamps = ts.tolist()
            data = build_batch([Record(i, stamps[i], None, v) for i, v in enumerate(values)],
                               compression=codec, producer_id=self._producer_id,
                               producer_epoch=self._epoch, is_transactional=self._transactional, base_sequence=seq)
        return _Batch(topic, part, items, data, n, producer_id=self._producer_id, sequence=seq)

    def _batch_ready(self, topic: str, part: int, count: int) -> int:
        """A batch of ``count`` records was cut for (topic, part): move the sticky partition on,
        tell the handler, take the batch's base sequence (-1 without idempotence)."""
        if isinstance(self.partitioner, DefaultPartitioner):
            self.partitioner.on_new_batch(topic, part, self._num_partitions(topic))
        call_hook(self.handler, "on_batch_ready", topic, part, count)
        seq = -1
        if self.idempotent:
            seq = self._sequences.get((topic, part), 0)
            self._sequences[(topic, part)] = (seq + count) & 0x7FFFFFFF
        return seq

    @staticmethod
    def _records_columns(items: list[_Item]) -> tuple[np.ndarray, np.ndarray, int, dict] | None:
        """The columns for the numba builder of records queued one by one (keys, per-record
        timestamps), or None when one has headers or a null value (the Python builder's).

        Measured reason: building Record objects and encoding them in Python cost ~3 us per
        record in the sender thread, which shares the GIL with the thread calling send()."""
        values = [it.value for it in items]
        if None in values or any(it.headers for it in items):
            return None
        cols = _Columns.of(values)
        if cols is None:
            return None
        ts = np.fromiter([it.timestamp for it in items], np.int64, count=len(items))
        base = int(ts[0])
        kw: dict[str, Any] = {"timestamp_deltas": ts - base}
        keys = [it.key for it in items]
        if keys.count(None) != len(keys):
            kcols = _Columns.of([b"" if k is None else k for k in keys])
            if kcols is None:
                return None
            kw.update(keys=kcols.buf, key_offsets=kcols.offsets,
                      key_null=np.fromiter([k is None for k in keys], np.bool_, count=len(keys)))
        return cols.buf, cols.offsets, base, kw

    def _send_rows(self, topic: str, rows: np.ndarray, partition: int | None, n: int) -> list[ProducerFuture]:
        if rows.ndim != 2 or rows.dtype != np.uint8:
            raise TypeError("send_many: an array of values must be 2-D uint8 (one value per row)")
        width = rows.shape[1]
        per_batch = max(1, (self.max_request_size - 1024 - BATCH_OVERHEAD) // (RECORD_OVERHEAD + width))
        futures = [self._enqueue_bulk(topic, partition, n, rows[i:i + per_batch],
                                      BATCH_OVERHEAD + len(rows[i:i + per_batch]) * (RECORD_OVERHEAD + width))
                   for i in range(0, len(rows), per_batch)]
        if self.sync:
            for f in futures:
                f.result()
        return futures

    def _build_columns(self, topic: str, part: int, items: list[_Item],
                       values: list[bytes] | np.ndarray | _Columns,
                       ts: int) -> _Batch:
        """Bulk values into one uncompressed batch with the numba builder (native.batch_build):
        ~20 M records/s against ~0.3 M/s building Record objects in Python."""
        if isinstance(values, _Columns):  # cut by send_many
            buf, offsets = values.buf, values.offsets
        elif isinstance(values, np.ndarray):  # fixed-size rows
            rows, width = values.shape
            buf = np.ascontiguousarray(values).reshape(-1)
            offsets = np.arange(0, rows * width + 1, width, dtype=np.int64) if width else np.zeros(rows + 1, np.int64)
        else:
            lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
            offsets = np.zeros(len(values) + 1, np.int64)
            np.cumsum(lengths, out=offsets[1:])
            buf = np.frombuffer(b"".join(values), np.uint8) if offsets[-1] else np.zeros(0, np.uint8)
        seq = self._batch_ready(topic, part, len(values))
        data = self._columns_batch(len(values), 0, int(offsets[-1] - offsets[0]), False, buf, offsets,
                                   timestamp=ts, producer_id=self._producer_id, producer_epoch=self._epoch, is_transactional=self._transactional,
                                   base_sequence=seq)
        return _Batch(topic, part, items, data, len(values), producer_id=self._producer_id, sequence=seq)

    def _columns_batch(self, n: int, key_bytes: int, value_bytes: int, deltas: bool, buf: np.ndarray,
                       offsets: np.ndarray, **kw: Any) -> memoryview | _InPlace:
        """``build_batch_columns(buf, offsets, **kw)`` of ``n`` records into a reused array
        (sender thread only); or, when the transport builds batches in place (IPC), the build
        itself, for the transport to run in its request ring (:meth:`_send_one`)."""
        bound = max_batch_size(n, key_bytes, value_bytes, deltas)
        if self._send_built is not None:
            return _InPlace(bound, functools.partial(build_batch_columns, buf, offsets, **kw))
        return build_batch_columns(buf, offsets, out=self._out_pool.take("batch", bound, np.uint8), **kw)

    def _num_partitions(self, topic: str) -> int:
        try:
            return len(self.cluster.topic(topic).leaders)
        except KafkaError:
            return 1

    def _transmit(self, batches: list[_Batch]) -> None:
        if self._send_many_batches is not None:
            futs = self._send_many_batches([(b.topic, b.partition, b.data) for b in batches], acks=self.acks,
                                           timeout_ms=self.ack_timeout_ms)
        else:
            futs = []
            for b in batches:
                futs.append(self._send_one(b))
        with self._inflight_cond:
            for b, f in zip(batches, futs, strict=True):
                b.future = f
                b.attempts += 1
                self._inflight.append(b)
            self._inflight_cond.notify_all()
        for b in batches:
            call_hook(self.handler, "on_send", b.topic, b.partition, b.count, len(b.data))

    def _send_one(self, b: _Batch) -> Any:
        from appliance.client.transport import FailedFuture

        try:
            if type(b.data) is _InPlace:
                return self._send_built(b.topic, b.partition, b.data.bound, b.data, acks=self.acks,
                                        timeout_ms=self.ack_timeout_ms)
            return self.transport.send_batch(b.topic, b.partition, b.data, acks=self.acks,
                                             timeout_ms=self.ack_timeout_ms)
        except KafkaError as e:
            return FailedFuture(e)
        except ValueError as e:  # the builder refused the batch, built in place at send time: it fails alone
            return FailedFuture(e)

    # ------------------------------------------------------------------ completion thread
    def _complete_loop(self) -> None:
        awaiting: list = []
        try:
            self._complete_rounds(awaiting)
        except BaseException as e:  # as in _send_loop
            self._thread_failed("acknowledgement", e, [b.items for b in awaiting])

    def _complete_rounds(self, awaiting: list) -> None:
        """The acknowledgement thread's loop; ``awaiting`` holds the batch it waits for."""
        while True:
            with self._inflight_cond:
                while not self._inflight:
                    if (self._closing and not self._outstanding) or self._failed is not None:
                        return  # (a failed sender's cut batches never come: _outstanding stays)
                    self._inflight_cond.wait(0.2)
                b = self._inflight.popleft()
            awaiting[:] = [b]
            self._await(b)
            awaiting.clear()
            del b  # nor keep its array out of the pool while waiting for the next

    def _await(self, b: _Batch) -> None:
        while True:
            try:
                res = b.future.result(max(self.request_timeout_ms, self.ack_timeout_ms) / 1000 + 5)
                self._finish(b, res, None)
                return
            except DuplicateSequenceError:  # the broker already has it: delivered before
                self._finish(b, None, None)
                return
            except ValueError as e:  # an in-place build refused (see _send_one): not retriable
                self._finish(b, None, e)
                return
            except KafkaError as e:
                if not self._retriable(e) or b.attempts > self.retries or self._closed:
                    if self._txn is not None:
                        self._txn.fail(e)  # the transaction cannot commit; fenced: nothing can
                    elif self.idempotent:
                        self._reset_idempotence(b)
                    self._finish(b, None, e)
                    return
                log.info("retrying %s-%d after %s (attempt %d)", b.topic, b.partition, e, b.attempts)
                time.sleep(self.backoff)
                self.cluster.invalidate(b.topic)
                with self._cond:
                    closing = self._closing and self._closed
                if closing:
                    self._finish(b, None, e)
                    return
                # The same bytes go again: same producer id and sequence, so the broker drops a
                # copy it already wrote instead of appending it twice.
                b.future = self._send_one(b)
                b.attempts += 1
                call_hook(self.handler, "on_send", b.topic, b.partition, b.count, len(b.data))

    @staticmethod
    def _retriable(e: BaseException) -> bool:
        return isinstance(e, KafkaConnectionError) or getattr(e, "code", None) in RETRIABLE

    def _thread_failed(self, which: str, cause: BaseException, cut: list[list[_Item]]) -> None:
        """One of the producer's threads died of ``cause`` (a bug): every record not yet
        acknowledged fails with ClientClosedError naming it, flush() and close() return, and
        send() refuses from now on. Without this they waited for ever."""
        with self._cond:
            err = self._failed  # the first failure is the one to report
            if err is None:
                log.error("the producer's %s thread failed", which, exc_info=cause)
                err = ClientClosedError(f"the producer's {which} thread failed: {cause!r}")
                err.__cause__ = cause
                self._failed = err
            pending = [it for items in cut for it in items]
            with self._run_lock:
                for tp, run in list(self._runs.items()):
                    self._close_run(tp, run)
            for q in self._queues.values():
                pending += q.items
                q.items.clear()
            self._queued = 0
            self._cond.notify_all()
            self._room.notify_all()
        with self._inflight_cond:
            pending += [it for b in self._inflight for it in b.items]
            self._inflight_cond.notify_all()
        for it in pending:
            if it.future is not None:
                it.future._complete(None, err)  # a later acknowledgement is ignored: first wins

    def _finish(self, b: _Batch, res: Any, err: BaseException | None) -> None:
        if err is None:
            base = res.base_offset if res is not None else -1
            lat = res.log_append_time if res is not None else -1
            call_hook(self.handler, "on_ack", b.topic, b.partition, base, b.count)
            if b.items and type(b.items[0].bulk) is _Run:  # each record's timestamp is its own
                b.items[0].future._complete(RecordMetadata(b.topic, b.partition, base, lat), None)
            elif b.items and b.items[0].bulk is not None:
                it = b.items[0]
                it.future._complete(RecordMetadata(b.topic, b.partition, base, lat if lat >= 0 else it.timestamp), None)
            else:
                topic, part = b.topic, b.partition
                complete_many([it.future for it in b.items],
                              [RecordMetadata(topic, part, base + i if base >= 0 else -1,
                                              lat if lat >= 0 else it.timestamp)
                               for i, it in enumerate(b.items)])
        else:
            call_hook(self.handler, "on_error", b.topic, b.partition, b.count, err)
            for it in b.items:
                it.future._complete(None, err)
        with self._cond:
            q = self._queues.get((b.topic, b.partition))
            if q is not None:
                q.in_flight -= 1
            self._outstanding -= 1
            self._cond.notify_all()

    # ------------------------------------------------------------------ transactions
    def _transaction(self, action: str) -> TransactionManager:
        if self._txn is None:
            raise TransactionStateError(f"{action}: the producer has no transactional.id")
        self._check_open()
        return self._txn

    def _timeout(self, timeout: float | None) -> float:
        return self._max_block_s if timeout is None else timeout

    def init_transactions(self, timeout: float | None = None) -> None:
        """Register transactional.id with its coordinator and take its producer id and epoch;
        an earlier instance with the same id is fenced, its open transaction aborted. Once,
        before the first transaction. ``timeout`` (s, default max.block.ms). Raises
        TransactionStateError (not transactional, or called twice), the coordinator's error."""
        txn = self._transaction("init_transactions")
        txn.init(self._timeout(timeout))
        self._producer_id, self._epoch = txn.producer_id, txn.epoch
        self._sequences.clear()

    def begin_transaction(self) -> None:
        """Open a transaction: the records sent until commit or abort belong to it. Raises
        TransactionStateError before init_transactions or while one is open."""
        self._transaction("begin_transaction").begin()

    def send_offsets_to_transaction(self, offsets: Mapping[Any, int], group_metadata: Any,
                                    timeout: float | None = None) -> None:
        """Commit a consumer group's offsets ({TopicPartition: next offset to read}) with the
        transaction (KIP-447): ``group_metadata`` is the consumer's ``group_metadata()`` (a
        bare group id also works, unfenced). They become the group's committed offsets only if
        the transaction commits."""
        self._transaction("send_offsets_to_transaction").send_offsets(offsets, group_metadata,
                                                                      self._timeout(timeout))

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Send what is queued, then commit (EndTxn). Raises TransactionStateError without an
        open transaction, TransactionAbortableError when a record or request of it failed
        (abort_transaction() then), ProducerFencedError when a newer instance took over,
        RequestTimedOutError when the records are not acknowledged in ``timeout`` (s, default
        max.block.ms; the transaction stays open: commit or abort again)."""
        txn = self._transaction("commit_transaction")
        if txn.state not in (IN_TRANSACTION, ABORTABLE):
            txn.end(True, 0)  # raises the state error
        deadline = time.monotonic() + self._timeout(timeout)
        if not self.flush(self._timeout(timeout)):
            self._check_open()
            raise RequestTimedOutError("commit_transaction: the transaction's records were not acknowledged "
                                       f"within {self._timeout(timeout):g} s")
        txn.end(True, max(0.0, deadline - time.monotonic()))

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Abort the open transaction: its records are never seen by read_committed consumers,
        its offsets never committed. Works after a failed record or request (not once fenced).
        What is still queued is sent first (its outcome does not matter: it is aborted)."""
        txn = self._transaction("abort_transaction")
        if txn.state not in (IN_TRANSACTION, ABORTABLE):
            txn.end(False, 0)  # raises the state error
        deadline = time.monotonic() + self._timeout(timeout)
        self.flush(self._timeout(timeout))
        txn.end(False, max(0.0, deadline - time.monotonic()))
        if (txn.producer_id, txn.epoch) != (self._producer_id, self._epoch):  # bumped: sequences restart
            self._producer_id, self._epoch = txn.producer_id, txn.epoch
            self._sequences.clear()

    def _admit(self, batches: list[_Batch]) -> list[_Batch]:
        """Sender thread: add the batches' partitions to the transaction before they go out;
        when that fails, they fail (and the transaction with them)."""
        assert self._txn is not None
        try:
            self._txn.add_partitions({(b.topic, b.partition) for b in batches}, self.request_timeout_ms / 1000)
            return batches
        except KafkaError as e:
            self._txn.fail(e)
            err = self._txn.error or e
            for b in batches:
                self._finish(b, None, err)
            return []

    # ------------------------------------------------------------------ idempotence
    def _init_producer_id(self) -> None:
        conn = self.cluster.any_connection()
        self._producer_id, self._epoch = init_producer_id(
            lambda: conn.request(22, {"transactional_id": None, "transaction_timeout_ms": 60000}),
            self.request_timeout_ms / 1000)
        self._sequences.clear()

    def _reset_idempotence(self, b: _Batch) -> None:
        """A batch failed for good: its sequence numbers are gone, so later batches would be out
        of order. Start over under a new producer id (Kafka bumps the epoch the same way)."""
        try:
            self._init_producer_id()
        except KafkaError as e:
            log.warning("could not get a new producer id after a failed batch: %s", e)
