"""The aborted transactions a read_committed read skips, as a per-batch mask.

A read_committed consumer drops the batches of aborted transactions: a transactional batch of
producer P is aborted when P has an aborted transaction (an ``.txnindex`` entry in place, an
``aborted_transactions`` item of a Fetch answer) with first offset <= the batch's base offset
<= its ABORT marker's offset. A producer has at most one transaction open at a time, so that
range test is exact (Kafka's consumer walks the same ranges batch by batch). A Fetch answer
names only the producer and the first offset (:data:`OPEN_END`): such a transaction ends at
the producer's first control batch at or after its first offset in the same chunk, and covers
the rest of the chunk when there is none (the broker names it again in the next answer).

The mask is numpy over the batch headers the native scan already found: a few vector compares
per aborted transaction overlapping the chunk, nothing per record, so the decode kernel's hot
loop is unchanged (it gets fewer batches).

Thread-safety: :class:`AbortedRanges` is immutable once built.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from appliance.records import batch_layout as L

__all__ = ["AbortedRanges", "OPEN_END"]

_I64 = np.dtype(">i8")
OPEN_END = (1 << 63) - 1  # last offset unknown: up to the producer's next control batch


class AbortedRanges:
    """(producer id, first offset, last offset) of aborted transactions, sorted by first offset."""

    def __init__(self, entries: Iterable[tuple[int, int, int]]) -> None:
        rows = sorted(((int(p), int(f), int(t)) for p, f, t in entries), key=lambda r: r[1])
        a = np.array(rows, np.int64).reshape(-1, 3)
        self.pids, self.firsts, self.lasts = a[:, 0].copy(), a[:, 1].copy(), a[:, 2].copy()

    def __len__(self) -> int:
        return len(self.pids)

    def mask(self, buf: np.ndarray, positions: np.ndarray, base_offsets: np.ndarray,
             last_offsets: np.ndarray, attrs: np.ndarray) -> np.ndarray | None:
        """True for the batches (at ``positions`` in ``buf``) of aborted transactions; None
        when there is none among them."""
        if not len(self) or not len(positions):
            return None
        lo, hi = int(base_offsets[0]), int(last_offsets[-1])
        near = np.flatnonzero((self.firsts <= hi) & (self.lasts >= lo))
        if not near.size:
            return None
        txn = (attrs & L.TRANSACTIONAL_BIT) != 0
        if not txn.any():
            return None
        pids = buf[(positions + L.PRODUCER_ID_OFFSET)[:, None] + np.arange(8)].view(_I64).ravel()
        ctrl = (attrs & L.CONTROL_BIT) != 0
        out = np.zeros(len(positions), bool)
        for i in near:
            mine = (pids == self.pids[i]) & (base_offsets >= self.firsts[i])
            last = int(self.lasts[i])
            if last == OPEN_END:
                ends = np.flatnonzero(mine & ctrl)
                if ends.size:
                    last = int(base_offsets[ends[0]])
            out |= mine & (base_offsets <= last)
        out &= txn & ~ctrl
        return out if out.any() else None

