"""The transaction coordinator of every transactional id whose ``__transaction_state`` partition
this disk worker holds (Kafka's TransactionCoordinator and TransactionStateManager, KIP-98).

Sans-I/O, driven by its host's loop, single-threaded:

- ``handle(api_key, version, body, spare_producer_id)`` answers InitProducerId (with a
  transactional id), AddPartitionsToTxn, AddOffsetsToTxn and EndTxn with a response dict.
  ``spare_producer_id`` is an id the network worker took from the broker's block before it
  forwarded an InitProducerId: used when the id is new or its epoch is exhausted.
- every state change is appended to the id's partition (``append(partition, batch)``, which
  raises KafkaError) before the answer, and only then made in memory;
- a decided transaction (PrepareCommit / PrepareAbort) goes to ``send_markers(MarkerJob)``;
  the host calls :meth:`markers_written` when every partition has its marker, which writes
  CompleteCommit / CompleteAbort;
- ``poll()`` aborts transactions past their timeout and removes ids idle past
  transactional.id.expiration.ms, every transaction.abort.timed.out.transaction.cleanup.interval.ms;
- ``load`` / ``begin_load`` / ``load_records`` / ``finish_load`` / ``unload``, as the group
  coordinator: a loaded PrepareCommit / PrepareAbort resumes its markers;
- ``describe(id)`` and ``list_transactions(...)`` (KIP-664) read the state, writing nothing.

The states and their moves are the table of :mod:`.txn_state`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from appliance.coordinator import txn_log_schema as schema
from appliance.coordinator.routing import OFFSETS_TOPIC, offsets_partition_for, txn_partition_for
from appliance.coordinator.txn_state import (
    COMPLETE,
    PREPARE,
    STATE_OF_BYTE,
    STATUS_BYTE,
    TxnState,
    check_transition,
)
from appliance.errors import ErrorCode, KafkaError
from appliance.records.batch import build_batch

__all__ = ["TransactionCoordinator", "TxnMetadata", "MarkerJob", "TXN_APIS", "API_INIT_PRODUCER_ID",
           "API_ADD_PARTITIONS", "API_ADD_OFFSETS", "API_END_TXN", "MAX_EPOCH", "STATE_NAMES"]

log = logging.getLogger("appliance.coordinator.txn")

E = ErrorCode
S = TxnState
API_INIT_PRODUCER_ID, API_ADD_PARTITIONS, API_ADD_OFFSETS, API_END_TXN = 22, 24, 25, 26
TXN_APIS = frozenset({API_INIT_PRODUCER_ID, API_ADD_PARTITIONS, API_ADD_OFFSETS, API_END_TXN})
# Kafka bumps to a new producer id once the epoch reaches Short.MaxValue - 1 (the last epoch is
# kept free for the coordinator's own fencing bump)
MAX_EPOCH = 32767 - 1
# the first version of each API whose clients know PRODUCER_FENCED (KIP-588); older ones get
# INVALID_PRODUCER_EPOCH, as Kafka's KafkaApis maps it
_FENCED_FROM = {API_INIT_PRODUCER_ID: 4, API_ADD_PARTITIONS: 2, API_ADD_OFFSETS: 2, API_END_TXN: 2}
# the names ListTransactions' state filter knows (Kafka's TransactionState.name)
STATE_NAMES = frozenset(v for k, v in vars(TxnState).items() if not k.startswith("_"))


@dataclass
class TxnMetadata:
    """One transactional id as the coordinator holds it."""

    transactional_id: str
    producer_id: int
    epoch: int
    timeout_ms: int
    state: str
    partitions: set[tuple[str, int]] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    last_epoch: int = -1  # before the last bump: a KIP-360 retry of that bump is recognised

    def value(self) -> schema.TxnValue:
        parts: dict[str, list[int]] = {}
        for t, p in sorted(self.partitions):
            parts.setdefault(t, []).append(p)
        return schema.TxnValue(self.producer_id, self.epoch, self.timeout_ms, STATUS_BYTE[self.state],
                               tuple((t, tuple(ps)) for t, ps in parts.items()),
                               self.last_update_ms, self.start_ms)


@dataclass(frozen=True)
class MarkerJob:
    """The markers one decided transaction needs: one per partition, with the epoch decided."""

    transactional_id: str
    producer_id: int
    epoch: int
    commit: bool
    partitions: tuple[tuple[str, int], ...]
    coordinator_epoch: int


class _Refused(Exception):
    """An answer of one error code, no state changed."""

    def __init__(self, code: int) -> None:
        self.code = code


class TransactionCoordinator:
    def __init__(self, config: Any, partitions: int,
                 append: Callable[[int, bytes], None],
                 send_markers: Callable[[MarkerJob], None],
                 partition_exists: Callable[[str, int], bool],
                 now_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self.num_partitions = partitions
        self.offsets_partitions = int(config["offsets.topic.num.partitions"])
        self.max_timeout_ms = int(config["transaction.max.timeout.ms"])
        self.expiration_ms = int(config["transactional.id.expiration.ms"])
        self.cleanup_interval_ms = int(config["transaction.abort.timed.out.transaction.cleanup.interval.ms"])
        self.owned: set[int] = set()
        self.loading: set[int] = set()
        self.coordinator_epochs: dict[int, int] = {}  # partition -> leader epoch (0 standalone)
        self.txns: dict[str, TxnMetadata] = {}
        self._append = append
        self._send_markers = send_markers
        self._partition_exists = partition_exists
        self._now = now_ms
        self._next_cleanup = 0

    # -- ownership and loading ------------------------------------------------------------
    def partition_for(self, transactional_id: str) -> int:
        return txn_partition_for(transactional_id, self.num_partitions)

    def not_owned_error(self, transactional_id: str) -> int:
        return E.COORDINATOR_LOAD_IN_PROGRESS if self.partition_for(transactional_id) in self.loading \
            else E.NOT_COORDINATOR

    def load(self, partition: int, records: Iterable[Any], coordinator_epoch: int = 0) -> None:
        self.begin_load(partition)
        self.load_records(partition, records)
        self.finish_load(partition, coordinator_epoch)

    def begin_load(self, partition: int) -> None:
        self.owned.discard(partition)
        self.loading.add(partition)

    def load_records(self, partition: int, records: Iterable[Any]) -> None:
        """Apply the next records of a partition being loaded, in offset order (the last value of
        an id wins; a tombstone removes it)."""
        for rec in records:
            if rec.key is None:
                continue
            try:
                tid = schema.decode_txn_key(rec.key).transactional_id
                if rec.value is None:
                    self.txns.pop(tid, None)
                    continue
                v = schema.decode_txn_value(rec.value)
                state = STATE_OF_BYTE.get(v.status)
                if state is None:
                    raise schema.SchemaError(f"unknown transaction status {v.status}")
                self.txns[tid] = TxnMetadata(
                    tid, v.producer_id, v.producer_epoch, v.timeout_ms, state,
                    {(t, p) for t, ps in (v.partitions or ()) for p in ps}, v.start_ms, v.last_update_ms)
            except (schema.SchemaError, UnicodeDecodeError) as e:
                log.warning("skipping unreadable __transaction_state record at offset %s: %s",
                            getattr(rec, "offset", "?"), e)

    def finish_load(self, partition: int, coordinator_epoch: int = 0) -> None:
        """Serve the partition's ids; resume the markers of the transactions decided but not
        completed (the decision is in the log, so it holds whoever decided it)."""
        self.loading.discard(partition)
        self.owned.add(partition)
        self.coordinator_epochs[partition] = coordinator_epoch
        mine = [m for tid, m in self.txns.items() if self.partition_for(tid) == partition]
        for m in mine:
            if m.state in PREPARE:
                self._send_markers(self._job(m))
        log.log(logging.INFO if mine else logging.DEBUG, "loaded __transaction_state-%d: %d transactional ids",
                partition, len(mine))

    def unload(self, partition: int) -> None:
        self.owned.discard(partition)
        self.loading.discard(partition)
        self.coordinator_epochs.pop(partition, None)
        for tid in [tid for tid in self.txns if self.partition_for(tid) == partition]:
            del self.txns[tid]

    # -- dispatch -------------------------------------------------------------------------
    def handle(self, api_key: int, version: int, body: Any, spare_producer_id: int = -1) -> dict:
        handler = {API_INIT_PRODUCER_ID: self._init_producer_id, API_ADD_PARTITIONS: self._add_partitions,
                   API_ADD_OFFSETS: self._add_offsets, API_END_TXN: self._end_txn}[api_key]
        return handler(body, version, spare_producer_id)

    def _fenced(self, api_key: int, version: int) -> int:
        return E.PRODUCER_FENCED if version >= _FENCED_FROM[api_key] else E.INVALID_PRODUCER_EPOCH

    def _current(self, api_key: int, version: int, body: Any) -> TxnMetadata:
        """The id's metadata for a request of its producer: checked for owner, id and epoch."""
        tid = body.transactional_id
        if not tid:
            raise _Refused(E.INVALID_REQUEST)
        if self.partition_for(tid) not in self.owned:
            raise _Refused(self.not_owned_error(tid))
        m = self.txns.get(tid)
        if m is None or m.producer_id != body.producer_id:
            raise _Refused(E.INVALID_PRODUCER_ID_MAPPING)
        if body.producer_epoch != m.epoch:
            raise _Refused(self._fenced(api_key, version))
        return m

    # -- writes ---------------------------------------------------------------------------
    def _write(self, m: TxnMetadata, **change: Any) -> TxnMetadata:
        """Append ``m`` with ``change`` applied to the log, then make it current. Raises
        KafkaError (nothing changed in memory)."""
        new = TxnMetadata(**{**m.__dict__, "partitions": set(m.partitions)})
        for k, v in change.items():
            setattr(new, k, v)
        check_transition(m.state, new.state)
        new.last_update_ms = self._now()
        record = (schema.encode_txn_key(schema.TxnKey(m.transactional_id)),
                  schema.encode_txn_value(new.value()))
        self._append(self.partition_for(m.transactional_id), build_batch([record]))
        self.txns[m.transactional_id] = new
        return new

    def _job(self, m: TxnMetadata) -> MarkerJob:
        return MarkerJob(m.transactional_id, m.producer_id, m.epoch, m.state == S.PREPARE_COMMIT,
                         tuple(sorted(m.partitions)),
                         self.coordinator_epochs.get(self.partition_for(m.transactional_id), 0))

    def _fence_and_abort(self, m: TxnMetadata) -> None:
        """Abort ``m``'s ongoing transaction with the epoch bumped (PrepareEpochFence), fencing
        the instance that opened it; on a failed write the transaction stays ongoing."""
        check_transition(m.state, S.PREPARE_EPOCH_FENCE)
        m.state = S.PREPARE_EPOCH_FENCE
        try:
            self._decide(m, commit=False, epoch=min(m.epoch + 1, MAX_EPOCH + 1))
        except KafkaError:
            m.state = S.ONGOING
            raise

    def _decide(self, m: TxnMetadata, commit: bool, epoch: int | None = None) -> TxnMetadata:
        """Write PrepareCommit / PrepareAbort, then hand the markers to the sender."""
        state = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
        m = self._write(m, state=state, **({} if epoch is None else {"epoch": epoch, "last_epoch": m.epoch}))
        if m.partitions:
            self._send_markers(self._job(m))
        else:  # nothing was written: complete at once
            self.markers_written(m.transactional_id, m.producer_id, m.epoch)
        return m

    def markers_written(self, transactional_id: str, producer_id: int, epoch: int) -> None:
        """Every partition of the decided transaction has its marker: write CompleteCommit /
        CompleteAbort. A transaction that changed meanwhile (unloaded, or fenced) is left."""
        m = self.txns.get(transactional_id)
        if m is None or m.producer_id != producer_id or m.epoch != epoch or m.state not in PREPARE:
            return
        if self.partition_for(transactional_id) not in self.owned:
            return
        done = S.COMPLETE_COMMIT if m.state == S.PREPARE_COMMIT else S.COMPLETE_ABORT
        try:
            self._write(m, state=done, partitions=set())
        except KafkaError as e:  # the next load (or a retry of the sender) completes it
            log.warning("cannot complete the transaction of %r: %s; resending its markers", transactional_id, e)
            self._send_markers(self._job(m))

    # -- InitProducerId -------------------------------------------------------------------
    def _init_producer_id(self, body: Any, version: int, spare: int) -> dict:
        def answer(code: int, pid: int = -1, epoch: int = -1) -> dict:
            return {"throttle_time_ms": 0, "error_code": code, "producer_id": pid, "producer_epoch": epoch}

        tid = body.transactional_id
        if not tid:
            return answer(E.INVALID_REQUEST)
        if not 0 < body.transaction_timeout_ms <= self.max_timeout_ms:
            return answer(E.INVALID_TRANSACTION_TIMEOUT)
        if self.partition_for(tid) not in self.owned:
            return answer(self.not_owned_error(tid))
        expected = (getattr(body, "producer_id", -1), getattr(body, "producer_epoch", -1))
        m = self.txns.get(tid)
        try:
            if m is None:
                if expected[0] != -1:  # KIP-360 retry for an id this coordinator never saw
                    return answer(E.INVALID_PRODUCER_ID_MAPPING)
                if spare < 0:
                    return answer(E.COORDINATOR_LOAD_IN_PROGRESS)
                fresh = TxnMetadata(tid, spare, -1, body.transaction_timeout_ms, S.EMPTY)
                m = self._write(fresh, epoch=0, start_ms=-1)
                return answer(0, m.producer_id, m.epoch)
            if expected[0] != -1 and expected != (m.producer_id, m.epoch):
                if expected == (m.producer_id, m.last_epoch) and m.state in COMPLETE:
                    return answer(0, m.producer_id, m.epoch)  # the answer to a bump was lost
                return answer(self._fenced(API_INIT_PRODUCER_ID, version))
            if m.state in PREPARE:
                return answer(E.CONCURRENT_TRANSACTIONS)  # its markers are being written
            if m.state == S.ONGOING:
                # a new instance (or the producer itself, KIP-360) takes over: the open transaction
                # is aborted with a bumped epoch, which fences the old instance's writes
                self._fence_and_abort(m)
                return answer(E.CONCURRENT_TRANSACTIONS)
            if m.state == S.DEAD:
                return answer(E.CONCURRENT_TRANSACTIONS)
            if m.epoch >= MAX_EPOCH:
                if spare < 0:
                    return answer(E.COORDINATOR_LOAD_IN_PROGRESS)
                m = self._write(m, producer_id=spare, epoch=0, last_epoch=-1, state=S.EMPTY,
                                timeout_ms=body.transaction_timeout_ms, partitions=set(), start_ms=-1)
            else:
                m = self._write(m, epoch=m.epoch + 1, last_epoch=m.epoch, state=S.EMPTY,
                                timeout_ms=body.transaction_timeout_ms, partitions=set(), start_ms=-1)
            return answer(0, m.producer_id, m.epoch)
        except KafkaError as e:
            return answer(e.code)

    # -- AddPartitionsToTxn / AddOffsetsToTxn ---------------------------------------------
    def _add(self, m: TxnMetadata, wanted: set[tuple[str, int]]) -> None:
        """Put ``wanted`` into the transaction (Ongoing). Raises _Refused, KafkaError."""
        if m.state in PREPARE or m.state in (S.DEAD, S.PREPARE_EPOCH_FENCE):
            raise _Refused(E.CONCURRENT_TRANSACTIONS)
        if m.state == S.ONGOING and wanted <= m.partitions:
            return  # a retry: nothing new to write
        start = m.start_ms if m.state == S.ONGOING else self._now()
        self._write(m, state=S.ONGOING, partitions=m.partitions | wanted, start_ms=start)

    def _add_partitions(self, body: Any, version: int, spare: int) -> dict:
        def answer(codes: dict[tuple[str, int], int]) -> dict:
            topics: dict[str, list] = {}
            for (t, p), code in codes.items():
                topics.setdefault(t, []).append({"partition_index": p, "partition_error_code": code})
            return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": [
                {"name": t, "results_by_partition": ps} for t, ps in topics.items()]}

        wanted = [(t.name, p) for t in body.topics for p in t.partitions]
        unknown = {tp for tp in wanted if not self._partition_exists(*tp)}
        if unknown:  # Kafka: the unknown ones named, the others not attempted; nothing added
            return answer({tp: E.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else E.OPERATION_NOT_ATTEMPTED
                           for tp in wanted})
        try:
            self._add(self._current(API_ADD_PARTITIONS, version, body), set(wanted))
            code = 0
        except _Refused as r:
            code = r.code
        except KafkaError as e:
            code = e.code
        return answer({tp: code for tp in wanted})

    def _add_offsets(self, body: Any, version: int, spare: int) -> dict:
        try:
            m = self._current(API_ADD_OFFSETS, version, body)
            if not body.group_id:
                raise _Refused(E.INVALID_GROUP_ID)
            self._add(m, {(OFFSETS_TOPIC, offsets_partition_for(body.group_id, self.offsets_partitions))})
            code = 0
        except _Refused as r:
            code = r.code
        except KafkaError as e:
            code = e.code
        return {"throttle_time_ms": 0, "error_code": code}

    # -- EndTxn ---------------------------------------------------------------------------
    def _end_txn(self, body: Any, version: int, spare: int) -> dict:
        commit = bool(body.committed)
        try:
            m = self._current(API_END_TXN, version, body)
            code = 0
            if m.state == S.ONGOING:
                self._decide(m, commit)
            elif m.state == (S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT):
                code = 0  # a retry of an EndTxn that completed
            elif m.state == (S.PREPARE_COMMIT if commit else S.PREPARE_ABORT):
                code = E.CONCURRENT_TRANSACTIONS  # a retry while its markers are written
            else:  # Empty, or the other decision
                code = E.INVALID_TXN_STATE
        except _Refused as r:
            code = r.code
        except KafkaError as e:
            code = e.code
        return {"throttle_time_ms": 0, "error_code": code}

    # -- queries (KIP-664) -----------------------------------------------------------------
    def describe(self, transactional_id: str) -> dict:
        """DescribeTransactions' entry for one id: NOT_COORDINATOR where its partition is not
        served here, COORDINATOR_LOAD_IN_PROGRESS while it loads, TRANSACTIONAL_ID_NOT_FOUND
        for an id unknown (or Dead: being expired), as Kafka's."""
        out: dict[str, Any] = {"error_code": 0, "transactional_id": transactional_id, "transaction_state": "",
                               "transaction_timeout_ms": 0, "transaction_start_time_ms": -1,
                               "producer_id": -1, "producer_epoch": -1, "topics": []}
        if not transactional_id:
            out["error_code"] = E.INVALID_REQUEST
            return out
        if self.partition_for(transactional_id) not in self.owned:
            out["error_code"] = self.not_owned_error(transactional_id)
            return out
        m = self.txns.get(transactional_id)
        if m is None or m.state == S.DEAD:
            out["error_code"] = E.TRANSACTIONAL_ID_NOT_FOUND
            return out
        topics: dict[str, list[int]] = {}
        for t, p in sorted(m.partitions):
            topics.setdefault(t, []).append(p)
        out.update(transaction_state=m.state, transaction_timeout_ms=m.timeout_ms,
                   transaction_start_time_ms=m.start_ms, producer_id=m.producer_id, producer_epoch=m.epoch,
                   topics=[{"topic": t, "partitions": ps} for t, ps in topics.items()])
        return out

    def list_transactions(self, states: Iterable[str] = (), producer_ids: Iterable[int] = (),
                          duration_ms: int = -1) -> dict:
        """ListTransactions' answer for the ids of the partitions served here (Kafka's
        TransactionStateManager.listTransactionStates): a state name Kafka does not know is
        returned in ``unknown_state_filters`` (and matches nothing); Dead ids are left out;
        ``duration_ms`` >= 0 keeps the transactions open longer than it. Any partition still
        loading: COORDINATOR_LOAD_IN_PROGRESS, nothing listed."""
        states, producer_ids = set(states), set(producer_ids)
        if self.loading:
            return {"throttle_time_ms": 0, "error_code": E.COORDINATOR_LOAD_IN_PROGRESS,
                    "unknown_state_filters": [], "transaction_states": []}
        now = self._now()
        found = []
        for tid, m in self.txns.items():
            if self.partition_for(tid) not in self.owned or m.state == S.DEAD:
                continue
            if producer_ids and m.producer_id not in producer_ids:
                continue
            if states and m.state not in states:
                continue
            if duration_ms >= 0 and now - m.start_ms <= duration_ms:
                continue
            found.append({"transactional_id": tid, "producer_id": m.producer_id, "transaction_state": m.state})
        return {"throttle_time_ms": 0, "error_code": 0,
                "unknown_state_filters": sorted(states - STATE_NAMES), "transaction_states": found}

    # -- timers ---------------------------------------------------------------------------
    def poll(self) -> int:
        """Abort transactions past their timeout, expire idle ids; when to run next (epoch ms)."""
        now = self._now()
        if now < self._next_cleanup:
            return self._next_cleanup
        self._next_cleanup = now + self.cleanup_interval_ms
        for tid, m in list(self.txns.items()):
            if self.partition_for(tid) not in self.owned:
                continue
            try:
                if m.state == S.ONGOING and now > m.start_ms + m.timeout_ms:
                    log.info("aborting the transaction of %r: past its %d ms timeout", tid, m.timeout_ms)
                    self._fence_and_abort(m)  # Kafka bumps the epoch: the producer that let it time out is fenced
                elif m.state in COMPLETE and now - m.last_update_ms > self.expiration_ms:
                    self._expire(m)
            except KafkaError as e:
                log.warning("transaction timer for %r failed: %s (next pass retries)", tid, e)
        return self._next_cleanup

    def _expire(self, m: TxnMetadata) -> None:
        """transactional.id.expiration.ms passed with no transaction: Dead, then the tombstone."""
        check_transition(m.state, S.DEAD)
        key = schema.encode_txn_key(schema.TxnKey(m.transactional_id))
        self._append(self.partition_for(m.transactional_id), build_batch([(key, None)]))
        del self.txns[m.transactional_id]
        log.info("transactional id %r expired", m.transactional_id)
