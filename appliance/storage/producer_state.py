"""Idempotent-producer state of one partition (a subset of Kafka's ProducerStateManager).

For each producer id: its epoch and the metadata of its last five batches (Kafka keeps five
because a producer has at most five requests in flight). An append is checked against it:

- a batch equal to a cached one (same epoch, first and last sequence) is a duplicate: the append
  is skipped and the cached offsets are returned (Kafka answers a retried batch this way);
- an older epoch is refused (InvalidProducerEpochError);
- a new epoch must start at sequence 0 (OutOfOrderSequenceError otherwise);
- an unknown producer id must start at sequence 0 (UNKNOWN_PRODUCER_ID otherwise);
- otherwise the first sequence must follow the last one (wrapping after 2**31 - 1), else
  OutOfOrderSequenceError.

Transactions (KIP-98): a transactional batch opens a transaction for its producer at its first
offset when none is open (``current_txn_first_offset``); a marker (control batch) ends it
(:meth:`ProducerStateManager.complete_txn`). The open transactions are kept ordered by first
offset (``ongoing``), and a transaction just ended stays "unreplicated" until the high watermark
passes its marker (Kafka's unreplicatedTxns), so the last stable offset never moves back when a
leader fails before its marker is replicated: :meth:`ProducerStateManager.first_unstable_offset`.

The state is rebuilt from batch headers when a log opens (from a snapshot written at clean close,
then the log after it), so dedupe and open transactions survive restarts. Snapshots are JSON (``<offset>.snapshot`` in
the partition dir); Kafka's are binary with a CRC — ours are our own format, rebuilt from the
log when missing or unreadable.

Thread-safety: none; owned by the partition's writer.
"""

from __future__ import annotations

import json
import os
from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple

from appliance.errors import (
    ErrorCode,
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    error_for_code,
)
from appliance.records.batch_layout import CONTROL_BIT, TRANSACTIONAL_BIT
from appliance.storage.txn_index import AbortedTxn

__all__ = [
    "BatchMetadata", "ProducerEntry", "ProducerStateManager", "ProducerAppend",
    "UnknownProducerIdError", "SNAPSHOT_SUFFIX", "NUM_BATCHES_TO_RETAIN", "NO_TXN",
    "TransactionCoordinatorFencedError", "InvalidTxnStateError", "read_open_txns",
]

NUM_BATCHES_TO_RETAIN = 5
SNAPSHOT_SUFFIX = ".snapshot"
INT32_MAX = 0x7FFFFFFF
UnknownProducerIdError = error_for_code(int(ErrorCode.UNKNOWN_PRODUCER_ID))
TransactionCoordinatorFencedError = error_for_code(int(ErrorCode.TRANSACTION_COORDINATOR_FENCED))
InvalidTxnStateError = error_for_code(int(ErrorCode.INVALID_TXN_STATE))
NO_TXN = -1  # current_txn_first_offset of a producer with no open transaction


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


@dataclass
class ProducerEntry:
    producer_id: int
    epoch: int
    batches: deque = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    current_txn_first_offset: int = NO_TXN
    coordinator_epoch: int = -1  # of the last marker: an older coordinator's is fenced

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.epoch:
            return None
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None


def _last_seq(base_sequence: int, last_offset_delta: int) -> int:
    # Sequences wrap from Int.MAX to 0 (Kafka's DefaultRecordBatch.incrementSequence).
    s = base_sequence + last_offset_delta
    return s - INT32_MAX - 1 if s > INT32_MAX else s


def _in_sequence(last_seq: int, first_seq: int) -> bool:
    return first_seq == last_seq + 1 or (first_seq == 0 and last_seq == INT32_MAX)


class ProducerAppend:
    """Pending updates of one append: checks batches in order, applied by :meth:`commit`."""

    def __init__(self, mgr: ProducerStateManager) -> None:
        self._mgr = mgr
        self._pending: dict[int, ProducerEntry] = {}
        # pid, epoch, first_seq, last_seq, transactional
        self._updates: list[tuple[int, int, int, int, bool]] = []

    def _entry(self, pid: int) -> ProducerEntry | None:
        if pid in self._pending:
            return self._pending[pid]
        return self._mgr.producers.get(pid)

    def check(self, pid: int, epoch: int, base_seq: int, last_offset_delta: int,
              validate: bool = True, transactional: bool = False) -> BatchMetadata | None:
        """Check one batch; returns the cached batch if it is a duplicate, else None.
        ``validate`` False: a follower's append of its leader's batches (Kafka's origin
        REPLICATION), which only records them: the leader checked them, and a follower that
        started at the leader's log start has not seen the producer's earlier batches.

        A non-transactional batch from a producer with a transaction open is refused (Kafka's
        INVALID_TXN_STATE: it must go through the transaction).

        Raises InvalidProducerEpochError, OutOfOrderSequenceError, UnknownProducerIdError,
        InvalidTxnStateError.
        """
        first_seq = base_seq
        last_seq = _last_seq(base_seq, last_offset_delta)
        entry = self._entry(pid)
        if validate and not transactional:
            current = self._mgr.producers.get(pid)
            if current is not None and current.current_txn_first_offset != NO_TXN:
                raise InvalidTxnStateError(
                    f"producer {pid} has a transaction open at offset "
                    f"{current.current_txn_first_offset}: a non-transactional batch is refused")
        if not validate:
            pass
        elif entry is not None:
            dup = entry.find_duplicate(epoch, first_seq, last_seq)
            if dup is not None:
                return dup
            if epoch < entry.epoch:
                raise InvalidProducerEpochError(
                    f"producer {pid}: epoch {epoch} is older than the current epoch {entry.epoch}")
            if epoch > entry.epoch:
                if first_seq != 0:
                    raise OutOfOrderSequenceError(
                        f"producer {pid}: new epoch {epoch} must start at sequence 0, got {first_seq}")
            elif not _in_sequence(entry.last_seq, first_seq):
                raise OutOfOrderSequenceError(
                    f"producer {pid} epoch {epoch}: sequence {first_seq} does not follow "
                    f"{entry.last_seq}")
        elif first_seq != 0:
            raise UnknownProducerIdError(
                f"producer {pid} is unknown to this partition and its first sequence is "
                f"{first_seq}, not 0")
        new = ProducerEntry(pid, epoch)
        if entry is not None and entry.epoch == epoch:
            new.batches.extend(entry.batches)
        new.batches.append(BatchMetadata(first_seq, last_seq, -1, -1))
        self._pending[pid] = new
        self._updates.append((pid, epoch, first_seq, last_seq, transactional))
        return None

    def commit(self, offsets: list[tuple[int, int]]) -> None:
        """Apply the checked batches; ``offsets`` are their (first, last) offsets in order. A
        transactional batch opens its producer's transaction if none is open."""
        mgr = self._mgr
        for (pid, epoch, fs, ls, txn), (fo, lo) in zip(self._updates, offsets, strict=True):
            mgr.update(pid, epoch, fs, ls, fo, lo)
            if txn:
                mgr.open_txn(pid, fo)


class ProducerStateManager:
    """producer id -> ProducerEntry of one partition."""

    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        # first offset -> producer id of every open transaction, in first-offset order (appends
        # come in offset order; a snapshot's are sorted when loaded)
        self.ongoing: dict[int, int] = {}
        # (first offset, marker offset) of transactions ended whose marker the high watermark
        # has not passed yet
        self.unreplicated: list[tuple[int, int]] = []
        # set once a transactional batch or marker was seen: a truncation then rebuilds the
        # whole state from the log (a cut marker reopens its transaction)
        self.transactional = False

    def begin(self) -> ProducerAppend:
        return ProducerAppend(self)

    def update(self, pid: int, epoch: int, first_seq: int, last_seq: int,
               first_offset: int, last_offset: int) -> None:
        """Record a batch that is now in the log (from an append or a log scan)."""
        entry = self.producers.get(pid)
        if entry is None or epoch != entry.epoch:
            new = ProducerEntry(pid, epoch)
            if entry is not None:  # a new epoch keeps the transaction it has open
                new.current_txn_first_offset = entry.current_txn_first_offset
                new.coordinator_epoch = entry.coordinator_epoch
            entry = self.producers[pid] = new
        entry.batches.append(BatchMetadata(first_seq, last_seq, first_offset, last_offset))

    def load_batch(self, pid: int, epoch: int, base_seq: int, last_offset_delta: int,
                   base_offset: int, attributes: int = 0,
                   control_type: int = -1) -> AbortedTxn | None:
        """Replay one batch header found in the log (no checks: the log is the truth).
        ``control_type`` is a marker's (0 ABORT, 1 COMMIT; -1: not a marker). Returns the
        transaction an ABORT marker ended (for the recovery's index rebuild)."""
        if pid < 0:
            return None
        if attributes & CONTROL_BIT:
            if control_type < 0:
                return None
            return self.complete_txn(pid, epoch, control_type == 1, -1,
                                     base_offset + last_offset_delta, check=False)
        if base_seq >= 0:
            self.update(pid, epoch, base_seq, _last_seq(base_seq, last_offset_delta),
                        base_offset, base_offset + last_offset_delta)
        if attributes & TRANSACTIONAL_BIT:
            self.open_txn(pid, base_offset, epoch)
        return None

    def clear(self) -> None:
        self.producers.clear()
        self.ongoing.clear()
        self.unreplicated.clear()

    # -- transactions -----------------------------------------------------------------------

    def open_txn(self, pid: int, first_offset: int, epoch: int | None = None) -> None:
        """A transactional batch at ``first_offset``: it opens ``pid``'s transaction unless
        one is open already."""
        self.transactional = True
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerEntry(pid, -1 if epoch is None else epoch)
        if entry.current_txn_first_offset == NO_TXN:
            entry.current_txn_first_offset = first_offset
            self.ongoing[first_offset] = pid

    def check_marker(self, pid: int, epoch: int, coordinator_epoch: int) -> None:
        """A marker about to be written for ``pid``: Kafka refuses one with an epoch older than
        the producer's (INVALID_PRODUCER_EPOCH) or from an older coordinator
        (TRANSACTION_COORDINATOR_FENCED). A producer unknown here passes (the marker is
        written and changes nothing)."""
        entry = self.producers.get(pid)
        if entry is None:
            return
        if epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {pid}: marker epoch {epoch} is older than the current epoch {entry.epoch}")
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"producer {pid}: coordinator epoch {coordinator_epoch} is older than "
                f"{entry.coordinator_epoch}")

    def complete_txn(self, pid: int, epoch: int, commit: bool, coordinator_epoch: int,
                     marker_offset: int, check: bool = True) -> AbortedTxn | None:
        """A marker for ``pid`` is in the log at ``marker_offset``: its open transaction (if
        any) ends. Returns the aborted transaction to index (ABORT of an open one), with the
        last stable offset once it ended; None otherwise. ``check``: :meth:`check_marker`
        first (the leader's append; not a replay)."""
        if check:
            self.check_marker(pid, epoch, coordinator_epoch)
        self.transactional = True
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerEntry(pid, epoch)
        if epoch > entry.epoch:  # a fencing abort comes with the bumped epoch
            entry.epoch = epoch
            entry.batches.clear()
        if coordinator_epoch >= 0:
            entry.coordinator_epoch = coordinator_epoch
        first = entry.current_txn_first_offset
        if first == NO_TXN:
            return None
        entry.current_txn_first_offset = NO_TXN
        self.ongoing.pop(first, None)
        self.unreplicated.append((first, marker_offset))
        if commit:
            return None
        lso = next(iter(self.ongoing), marker_offset + 1)
        return AbortedTxn(pid, first, marker_offset, min(lso, marker_offset + 1))

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset of the earliest transaction not yet decided for consumers: open,
        or ended by a marker the high watermark has not passed. None when there is none."""
        if not self.ongoing and not self.unreplicated:
            return None
        if self.unreplicated:
            self.unreplicated = [t for t in self.unreplicated if t[1] >= high_watermark]
        first = next(iter(self.ongoing), None)
        for f, _ in self.unreplicated:
            if first is None or f < first:
                first = f
        return first

    # -- snapshots --------------------------------------------------------------------------

    def write_snapshot(self, dir_: str, offset: int) -> str:
        """Write ``<offset>.snapshot`` (state up to ``offset``), remove older ones; returns path."""
        data = {"offset": offset, "producers": [
            {"pid": e.producer_id, "epoch": e.epoch, "batches": [list(b) for b in e.batches],
             "txn_first_offset": e.current_txn_first_offset,
             "coordinator_epoch": e.coordinator_epoch}
            for e in self.producers.values()],
            "unreplicated": [list(t) for t in self.unreplicated]}
        path = os.path.join(dir_, f"{offset:020d}{SNAPSHOT_SUFFIX}")
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(data, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        for name in os.listdir(dir_):
            if name.endswith(SNAPSHOT_SUFFIX) and os.path.join(dir_, name) != path:
                os.unlink(os.path.join(dir_, name))
        return path

    def load_snapshot(self, dir_: str, max_offset: int) -> int | None:
        """Load the newest snapshot at or below ``max_offset``; returns its offset or None.

        Unreadable or too new snapshots are deleted (the log is scanned instead).
        """
        snaps = []
        for name in os.listdir(dir_):
            if name.endswith(SNAPSHOT_SUFFIX) and name[:20].isdigit():
                snaps.append((int(name[:20]), os.path.join(dir_, name)))
        for off, path in sorted(snaps, reverse=True):
            if off > max_offset:
                os.unlink(path)
                continue
            try:
                with open(path) as f:
                    data = json.load(f)
                producers = {}
                for p in data["producers"]:
                    e = ProducerEntry(int(p["pid"]), int(p["epoch"]))
                    e.batches.extend(BatchMetadata(*map(int, b)) for b in p["batches"])
                    # snapshots of before transactions have neither key
                    e.current_txn_first_offset = int(p.get("txn_first_offset", NO_TXN))
                    e.coordinator_epoch = int(p.get("coordinator_epoch", -1))
                    producers[e.producer_id] = e
                unreplicated = [(int(f), int(m)) for f, m in data.get("unreplicated", [])]
            except (OSError, ValueError, KeyError, TypeError):
                os.unlink(path)
                continue
            self.producers = producers
            self.ongoing = {e.current_txn_first_offset: e.producer_id
                            for e in sorted(producers.values(),
                                            key=lambda e: e.current_txn_first_offset)
                            if e.current_txn_first_offset != NO_TXN}
            self.unreplicated = unreplicated
            self.transactional = bool(self.ongoing or unreplicated) or any(
                e.coordinator_epoch >= 0 for e in producers.values())
            return off
        return None

    def truncate_after(self, offset: int) -> set[int]:
        """Forget batches at or after ``offset``. Producers left without batches are dropped;
        returns those of them whose oldest batch dropped did not start its epoch (sequence 0):
        their earlier batches are below ``offset`` in the log, and the caller reads their state
        back from there (:func:`appliance.storage.loader.recover_producers`). A producer that
        started its epoch above ``offset`` is new again, as it was before that batch."""
        earlier: set[int] = set()
        for pid in list(self.producers):
            e = self.producers[pid]
            kept = [b for b in e.batches if b.last_offset < offset]
            if not kept:
                del self.producers[pid]
                if e.batches and e.batches[0].first_seq != 0:
                    earlier.add(pid)
            else:
                e.batches = deque(kept, maxlen=NUM_BATCHES_TO_RETAIN)
        return earlier


def read_open_txns(dir_: str, max_offset: int) -> tuple[int, dict[int, int]] | None:
    """(offset, producer id -> first offset of its open transaction) from the newest snapshot
    in ``dir_`` at or below ``max_offset``, read only (nothing is deleted: the caller is a
    reader beside the broker, e.g. the Spark source with no broker running). None when there is
    no readable one."""
    snaps = []
    try:
        names = os.listdir(dir_)
    except OSError:
        return None
    for name in names:
        if name.endswith(SNAPSHOT_SUFFIX) and name[:20].isdigit() and int(name[:20]) <= max_offset:
            snaps.append((int(name[:20]), os.path.join(dir_, name)))
    for off, path in sorted(snaps, reverse=True):
        try:
            with open(path) as f:
                data = json.load(f)
            return off, {int(p["pid"]): int(p.get("txn_first_offset", NO_TXN))
                         for p in data["producers"]
                         if int(p.get("txn_first_offset", NO_TXN)) != NO_TXN}
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return None
