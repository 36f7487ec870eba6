"""A transactional producer's side of KIP-98 / KIP-447: its state, and the requests to its
transaction coordinator (and, for offsets, to the group's coordinator).

States, as Kafka's TransactionManager::

    UNINITIALIZED ─init─▶ READY ─begin─▶ IN_TRANSACTION ─commit/abort─▶ READY
                                          │ a failed send or request
                                          ▼
                                       ABORTABLE ─abort─▶ READY     (any) ─fenced─▶ FATAL

- :meth:`init` finds the coordinator (FindCoordinator key_type 1) and gets the producer id and
  epoch (InitProducerId with the transactional id; a new instance bumps the epoch and so fences
  the old one).
- :meth:`add_partitions` (the producer's sender thread, before the first batch of each
  partition in a transaction) sends AddPartitionsToTxn.
- :meth:`send_offsets`: AddOffsetsToTxn to the transaction coordinator, then TxnOffsetCommit to
  the group coordinator with the consumer's generation and member id (KIP-447's fencing).
- :meth:`end`: EndTxn (commit or abort).

"Not now" answers (CONCURRENT_TRANSACTIONS while the last transaction's markers are written, a
coordinator loading, moving or not found) are retried with backoff until the call's deadline;
NOT_COORDINATOR finds the coordinator again. PRODUCER_FENCED / INVALID_PRODUCER_EPOCH make the
producer FATAL (:class:`ProducerFencedError`): only close() is left. Any other failure inside a
transaction makes it ABORTABLE: commit raises :class:`TransactionAbortableError`, abort works.
After an abort of a transaction with a failed batch the epoch is bumped (InitProducerId with
the current id and epoch, KIP-360), so the sequence numbers restart cleanly.

Thread-safety: the state is under a lock; the producer calls :meth:`add_partitions` from its
sender thread, everything else from the application's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from appliance.client.cluster import RETRIABLE, check_error
from appliance.client.connection import KafkaConnectionError
from appliance.client.coordinator_lookup import (
    KEY_TYPE_GROUP,
    find_coordinator,
    find_txn_coordinator,
)
from appliance.errors import ErrorCode, KafkaError, error_for_code

__all__ = ["TransactionManager", "ConsumerGroupMetadata", "ProducerFencedError", "TransactionStateError",
           "TransactionAbortableError"]

INIT_PRODUCER_ID, ADD_PARTITIONS, ADD_OFFSETS, END_TXN, TXN_OFFSET_COMMIT = 22, 24, 25, 26, 28
UNINITIALIZED, READY, IN_TRANSACTION, ABORTABLE, FATAL = "Uninitialized", "Ready", "InTransaction", \
    "AbortableError", "FatalError"
_FENCED = frozenset({ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH})
# answers after which the same request may succeed: the coordinator busy, loading or moving
_AGAIN = RETRIABLE | {ErrorCode.CONCURRENT_TRANSACTIONS}
_COORDINATOR_MOVED = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE})

ProducerFencedError = error_for_code(ErrorCode.PRODUCER_FENCED)


class TransactionStateError(KafkaError):
    """A transactional call out of order (begin twice, commit without begin, send before
    init_transactions), or on a producer without transactional.id: Kafka's
    IllegalStateException. Nothing was sent."""

    code = ErrorCode.INVALID_TXN_STATE


class TransactionAbortableError(KafkaError):
    """The transaction failed (a batch, a request) and cannot commit: abort_transaction(), then
    begin again. The cause is ``__cause__``."""

    code = ErrorCode.INVALID_TXN_STATE


class ConsumerGroupMetadata(NamedTuple):
    """What a consumer's ``group_metadata()`` gives send_offsets_to_transaction (KIP-447): the
    group coordinator fences offsets of a member whose generation has passed."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


class TransactionManager:
    def __init__(self, cluster: Any, transactional_id: str, timeout_ms: int, backoff_s: float) -> None:
        self.cluster = cluster
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        self.backoff = backoff_s
        self.state = UNINITIALIZED
        self.producer_id, self.epoch = -1, -1
        self.partitions: set[tuple[str, int]] = set()  # added to the open transaction
        self.error: BaseException | None = None  # what made it ABORTABLE or FATAL
        self.batch_failed = False  # a batch of this transaction failed: its sequences are gone
        self.registered = False  # the coordinator holds this transaction (partitions or offsets added)
        self._coordinator: tuple[str, int] | None = None
        self._lock = threading.Lock()

    # -- state -----------------------------------------------------------------------------
    def _require(self, *states: str, action: str) -> None:
        if self.state == FATAL:
            raise self._fatal_error()
        if self.state not in states:
            raise TransactionStateError(f"{action}: the producer's transaction state is {self.state}")

    def _fatal_error(self) -> KafkaError:
        err = self.error
        return err if isinstance(err, KafkaError) else ProducerFencedError("the producer was fenced")

    def fail(self, err: BaseException) -> None:
        """A send of the transaction failed for good: FATAL if fenced, else ABORTABLE."""
        with self._lock:
            self.batch_failed = True
            if self.state == FATAL:
                return
            if getattr(err, "code", None) in _FENCED:
                self.state, self.error = FATAL, ProducerFencedError(
                    f"transactional id {self.transactional_id!r}: a newer instance took over ({err})")
            elif self.state == IN_TRANSACTION:
                self.state, self.error = ABORTABLE, err

    def check_sendable(self) -> None:
        """send() is allowed only inside a transaction (Kafka's IllegalStateException)."""
        if self.state != IN_TRANSACTION:
            if self.state == ABORTABLE:
                raise TransactionAbortableError("the transaction failed: abort_transaction() first") from self.error
            self._require(IN_TRANSACTION, action="send")

    # -- requests --------------------------------------------------------------------------
    def _request(self, api_key: int, body: dict, deadline: float, codes: Any) -> Any:
        """``body`` to the transaction coordinator, again while ``codes(resp)`` holds a "not
        now" code and the deadline allows; the last answer."""
        delay = self.backoff or 0.05
        while True:
            try:
                if self._coordinator is None:
                    _, host, port = find_txn_coordinator(self.cluster, self.transactional_id,
                                                         max(0.1, deadline - time.monotonic()))
                    self._coordinator = (host, port)
                resp = self.cluster.connection(*self._coordinator, purpose="txn").request(api_key, body)
            except KafkaConnectionError:
                self._coordinator = None
                if time.monotonic() + delay > deadline:
                    raise
                time.sleep(delay)
                continue
            found = [c for c in codes(resp) if c]
            again = found and all(c in _AGAIN for c in found)
            if not again or time.monotonic() + delay > deadline:
                return resp
            if any(c in _COORDINATOR_MOVED for c in found):
                self._coordinator = None
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def _check(self, code: int, what: str) -> None:
        """Raise for ``code``: fenced -> FATAL, anything else -> ABORTABLE inside a transaction."""
        if not code:
            return
        try:
            check_error(code, what)
        except KafkaError as e:
            with self._lock:
                if code in _FENCED:
                    self.state, self.error = FATAL, ProducerFencedError(
                        f"{what}: transactional id {self.transactional_id!r} has a newer instance ({e})")
                    raise self.error from e
                if self.state == IN_TRANSACTION:
                    self.state, self.error = ABORTABLE, e
            raise

    def init(self, timeout_s: float) -> None:
        """InitProducerId for the transactional id (init_transactions)."""
        self._require(UNINITIALIZED, action="init_transactions")
        self._init_pid(time.monotonic() + timeout_s, -1, -1)
        self.state = READY

    def _init_pid(self, deadline: float, pid: int, epoch: int) -> None:
        body = {"transactional_id": self.transactional_id, "transaction_timeout_ms": self.timeout_ms,
                "producer_id": pid, "producer_epoch": epoch}
        resp = self._request(INIT_PRODUCER_ID, body, deadline, lambda r: [r.error_code])
        self._check(resp.error_code, f"InitProducerId of {self.transactional_id!r}")
        self.producer_id, self.epoch = resp.producer_id, resp.producer_epoch

    def begin(self) -> None:
        self._require(READY, action="begin_transaction")
        with self._lock:
            self.state, self.partitions, self.batch_failed, self.error = IN_TRANSACTION, set(), False, None
            self.registered = False

    def add_partitions(self, wanted: Iterable[tuple[str, int]], timeout_s: float) -> None:
        """AddPartitionsToTxn for those of ``wanted`` not in the transaction yet. Raises (and
        moves to ABORTABLE or FATAL) when the coordinator refuses."""
        new = sorted(set(wanted) - self.partitions)
        if not new:
            return
        if self.state != IN_TRANSACTION:
            raise TransactionAbortableError(f"the transaction is {self.state}: its batches are not sent") \
                from self.error
        topics: dict[str, list[int]] = {}
        for t, p in new:
            topics.setdefault(t, []).append(p)
        body = {"transactional_id": self.transactional_id, "producer_id": self.producer_id,
                "producer_epoch": self.epoch, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}

        def codes(r: Any) -> list[int]:
            return [p.partition_error_code for t in r.results_by_topic_v3_and_below for p in t.results_by_partition]

        resp = self._request(ADD_PARTITIONS, body, time.monotonic() + timeout_s, codes)
        for t in resp.results_by_topic_v3_and_below:
            for p in t.results_by_partition:
                self._check(p.partition_error_code, f"adding {t.name}-{p.partition_index} to the transaction")
        self.partitions.update(new)
        self.registered = True

    def send_offsets(self, offsets: Mapping[Any, int], group: ConsumerGroupMetadata, timeout_s: float) -> None:
        """The consumer's offsets into the transaction: committed with it, dropped with an abort."""
        self._require(IN_TRANSACTION, action="send_offsets_to_transaction")
        if not isinstance(group, ConsumerGroupMetadata):
            group = ConsumerGroupMetadata(str(group))  # a bare group id, as Kafka's deprecated form
        deadline = time.monotonic() + timeout_s
        resp = self._request(ADD_OFFSETS, {"transactional_id": self.transactional_id, "producer_id": self.producer_id,
                                           "producer_epoch": self.epoch, "group_id": group.group_id},
                             deadline, lambda r: [r.error_code])
        self._check(resp.error_code, f"adding group {group.group_id!r}'s offsets to the transaction")
        self.registered = True
        topics: dict[str, list[dict]] = {}
        for tp, off in offsets.items():
            topic, partition = tp
            topics.setdefault(topic, []).append({"partition_index": partition, "committed_offset": off,
                                                 "committed_leader_epoch": -1, "committed_metadata": ""})
        body = {"transactional_id": self.transactional_id, "group_id": group.group_id,
                "producer_id": self.producer_id, "producer_epoch": self.epoch,
                "generation_id": group.generation_id, "member_id": group.member_id,
                "group_instance_id": group.group_instance_id,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
        delay = self.backoff or 0.05
        while True:
            _, host, port = find_coordinator(self.cluster, group.group_id, KEY_TYPE_GROUP,
                                             max(0.1, deadline - time.monotonic()))
            resp = self.cluster.connection(host, port, purpose="txn").request(TXN_OFFSET_COMMIT, body)
            found = [p.error_code for t in resp.topics for p in t.partitions if p.error_code]
            if not (found and all(c in _AGAIN for c in found)) or time.monotonic() + delay > deadline:
                break
            time.sleep(delay)
            delay = min(delay * 2, 1.0)
        for t in resp.topics:
            for p in t.partitions:
                self._check(p.error_code, f"committing {t.name}-{p.partition_index} in the transaction")

    def end(self, commit: bool, timeout_s: float) -> None:
        """EndTxn; READY after. An abort of a transaction whose batch failed bumps the epoch."""
        action = "commit_transaction" if commit else "abort_transaction"
        if commit and self.state == ABORTABLE:
            raise TransactionAbortableError("the transaction failed: abort_transaction(), not commit") \
                from self.error
        self._require(IN_TRANSACTION, *(() if commit else (ABORTABLE,)), action=action)
        deadline = time.monotonic() + timeout_s
        if self.registered:  # nothing added: the coordinator has no transaction to end
            resp = self._request(END_TXN, {"transactional_id": self.transactional_id, "producer_id": self.producer_id,
                                           "producer_epoch": self.epoch, "committed": commit},
                                 deadline, lambda r: [r.error_code])
            self._check(resp.error_code, f"{action} of {self.transactional_id!r}")
        if not commit and self.batch_failed:
            self._init_pid(deadline, self.producer_id, self.epoch)
        with self._lock:
            self.state, self.partitions, self.error, self.registered = READY, set(), None, False
