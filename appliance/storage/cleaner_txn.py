"""What the log cleaner does with transactions (Kafka's ``CleanedTransactionMetadata``).

One :class:`CleanedTxns` follows one walk of the cleaner over a range of batches, in offset
order, given the aborted transactions overlapping that range (from the ``.txnindex`` files):

- a transactional batch whose producer has an aborted transaction started at or below it (and
  not yet ended by its ABORT marker) belongs to that aborted transaction: the cleaner removes it
  and keeps its keys out of the offset map (an aborted record must not shadow a committed one);
- a marker may go once no batch of its transaction was met in the walk (a previous pass removed
  them) -- and, as tombstones, only past ``delete.retention.ms`` (the caller's rule). So an ABORT
  marker outlives its data by at least one pass: a read_committed consumer that fetched the
  aborted batches before they went still finds the marker after them;
- every ABORT marker kept gets its index entry back in the cleaned segment's ``.txnindex``
  (the cleaner writes the entry :meth:`CleanedTxns.on_marker` returns), so a read_committed reader of the cleaned log still skips
  whatever of that transaction is left (Kafka writes one only when batches of it were met; one
  per kept marker is a superset, and an entry over no records costs a reader nothing).

Unlike Kafka's, which lives for one group of segments, one instance lives for a whole cleaning
pass: the cleaner keeps a producer's last batch whole (Kafka keeps it empty), so an aborted
batch may stay in an earlier group, and its marker in a later group must then stay too.

Thread-safety: none; one cleaning pass owns it.
"""

from __future__ import annotations

from collections import deque

from appliance.storage.txn_index import AbortedTxn

__all__ = ["CleanedTxns"]


class CleanedTxns:
    """Aborted-batch and marker decisions over one cleaner walk (see the module docstring)."""

    def __init__(self, aborted: list[AbortedTxn]) -> None:
        self._pending = deque(sorted(aborted, key=lambda t: t.first_offset))
        # producer id -> [its aborted transaction now under way, a batch of it was met]
        self._aborted: dict[int, list] = {}
        self._committed: set[int] = set()  # producers with a batch met of a transaction not aborted

    def _start_up_to(self, offset: int) -> None:
        pending = self._pending
        while pending and pending[0].first_offset <= offset:
            t = pending.popleft()
            self._aborted.setdefault(t.producer_id, [t, False])

    def on_batch(self, producer_id: int, last_offset: int, transactional: bool) -> bool:
        """A data batch met in the walk: True if it belongs to an aborted transaction."""
        self._start_up_to(last_offset)
        if not transactional:
            return False
        a = self._aborted.get(producer_id)
        if a is not None:
            a[1] = True
            return True
        self._committed.add(producer_id)
        return False

    def on_marker(self, producer_id: int, offset: int,
                  commit: bool | None) -> tuple[bool, AbortedTxn | None]:
        """A marker met at ``offset`` (``commit`` None: a control record of another type, which
        always stays). Returns (no batch of its transaction was met: it may go, the index entry
        of the aborted transaction an ABORT marker ends: None if the index has none)."""
        self._start_up_to(offset)
        if commit is None:
            return False, None
        if commit:
            if producer_id in self._committed:
                self._committed.discard(producer_id)
                return False, None
            return True, None
        a = self._aborted.pop(producer_id, None)
        if a is None:
            return True, None
        return not a[1], a[0]
