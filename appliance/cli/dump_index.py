"""`appliance dump-log --files X.index,Y.timeindex`: index files as Kafka's DumpLogSegments prints
them, each entry checked against the segment's ``.log`` beside it.

- ``.index``: ``offset: N position: P`` per entry; an entry whose position does not start a
  batch whose last offset is N is a mismatch, listed after the file as ``Mismatches in :F`` /
  ``  Index offset: N, log offset: M`` (M = -1: no batch starts at P).
- ``.timeindex``: ``timestamp: T offset: N`` per entry; checked that a batch ends at N, that its
  largest timestamp is T and that T grows from entry to entry.
- ``--verify-index-only``: the checks without the entry lines. ``--index-sanity-check``: only
  the checks the broker runs on open (:meth:`AbstractIndex.sanity_check`).

Entries are read through the storage index classes (read-only; layouts from
``native.index_layout``), the log through the batch scanner. Problems go to stderr, as Kafka's.
"""

from __future__ import annotations

import mmap
import os
import sys
from collections.abc import Callable

import numpy as np

from appliance.storage.offset_index import OffsetIndex
from appliance.storage.time_index import TimeIndex

__all__ = ["INDEX_SUFFIXES", "dump_index"]

INDEX_SUFFIXES = (".index", ".timeindex")


class _Log:
    """The segment's batches: where each starts, its last offset and largest timestamp."""

    def __init__(self, path: str) -> None:
        from native.scan import scan_batches

        self.positions = np.zeros(0, np.int64)
        self.last_offsets = np.zeros(0, np.int64)
        self.max_timestamps = np.zeros(0, np.int64)
        self.size = os.path.getsize(path) if os.path.isfile(path) else 0
        if not self.size:
            return
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            scan = scan_batches(mm, 0, self.size, verify_crc=False, legacy=True)
            n = scan.count
            self.positions = np.array(scan.positions[:n], np.int64)
            self.last_offsets = np.array(scan.last_offsets[:n], np.int64)
            self.max_timestamps = np.array(scan.max_timestamps[:n], np.int64)

    def last_offset_at(self, position: int) -> int:
        """The last offset of the batch starting at ``position``, -1 if none does."""
        i = int(np.searchsorted(self.positions, position))
        return int(self.last_offsets[i]) if i < len(self.positions) and self.positions[i] == position else -1

    def batch_ending_from(self, offset: int) -> int:
        """Index of the first batch whose last offset is >= ``offset``, -1 if none."""
        i = int(np.searchsorted(self.last_offsets, offset))
        return i if i < len(self.last_offsets) else -1


def dump_index(path: str, verify_only: bool, sanity_only: bool,
               out: Callable[[str], None] = print) -> int:
    """Print one index file; returns 1 when a check failed, else 0. Raises OSError."""
    base = int(os.path.basename(path).split(".")[0])
    log_path = path[: path.rindex(".")] + ".log"
    time_index = path.endswith(".timeindex")
    index = (TimeIndex if time_index else OffsetIndex)(path, base, writable=False)
    try:
        if index.entries == 0:
            out(f"{path} is empty.")
            return 0
        log = _Log(log_path)
        if sanity_only:
            why = index.sanity_check(log.size)
            if why:
                _err(f"{path} failed sanity check: {why}")
                return 1
            out(f"{path} passed sanity check.")
            return 0
        return (_time_entries if time_index else _offset_entries)(index, path, log, verify_only, out)
    finally:
        index.close(trim=False)


def _offset_entries(index: OffsetIndex, path: str, log: _Log, verify_only: bool,
                    out: Callable[[str], None]) -> int:
    mismatches = []
    for i in range(index.entries):
        rel, position = index.entry(i)
        offset = index.base_offset + rel
        found = log.last_offset_at(position)
        if found != offset:
            mismatches.append((offset, found))
        if not verify_only:
            out(f"offset: {offset} position: {position}")
    if mismatches:
        _err(f"Mismatches in :{path}")
        for offset, found in mismatches:
            _err(f"  Index offset: {offset}, log offset: {found}")
    return 1 if mismatches else 0


def _time_entries(index: TimeIndex, path: str, log: _Log, verify_only: bool,
                  out: Callable[[str], None]) -> int:
    not_found, wrong_ts, out_of_order = [], [], []
    prev = None
    for i in range(index.entries):
        ts, rel = index.entry(i)
        offset = index.base_offset + rel
        b = log.batch_ending_from(offset)
        if b < 0 or int(log.last_offsets[b]) != offset:
            not_found.append((offset, -1 if b < 0 else int(log.last_offsets[b])))
        else:
            if int(log.max_timestamps[b]) != ts:
                wrong_ts.append((ts, int(log.max_timestamps[b])))
            if prev is not None and prev >= ts:
                out_of_order.append((ts, prev))
        if not verify_only:
            out(f"timestamp: {ts} offset: {offset}")
        prev = ts
    for ts, found in wrong_ts:
        _err(f"Found timestamp mismatch in :{path}")
        _err(f"  Index timestamp: {ts}, log timestamp: {found}")
    for ts, before in out_of_order:
        _err(f"Found out of order timestamp in :{path}")
        _err(f"  Index timestamp: {ts}, Previously indexed timestamp: {before}")
    if not_found:
        _err("The following indexed offsets are not found in the log.")
        for offset, found in not_found:
            _err(f"Indexed offset: {offset}, found log offset: {found}")
    return 1 if not_found or wrong_ts or out_of_order else 0


def _err(line: str) -> None:
    print(line, file=sys.stderr)
