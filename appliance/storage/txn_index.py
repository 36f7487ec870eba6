"""The aborted-transaction index (``.txnindex``, Kafka's TransactionIndex): one per segment,
an entry per transaction whose ABORT marker is in that segment.

Entry (Kafka's format, 34 bytes, big-endian): version int16, producer id int64, first offset
int64 (the transaction's first batch), last offset int64 (its ABORT marker), last stable offset
int64 (the partition's LSO once that transaction ended: no transaction still open at the time
started below it). Entries are in marker order, so their last offsets increase.

A read_committed fetch from ``fetch_offset`` up to ``upper_bound`` needs the aborted
transactions that overlap that range (:func:`collect_aborted`): the segments from the one
holding ``fetch_offset`` on are read in order until an entry's last stable offset reaches
``upper_bound`` (no later entry can start below it). The files are small and read whole with
one ``pread``: the network worker reads them as it reads the offset index, while the disk
worker appends.

The file exists only once an entry was written; a segment without one has no aborted
transaction. Plain functions over paths: the writer (the partition's disk worker) appends with
``O_APPEND`` and each write is one entry, so a reader sees whole entries (a torn tail from a
crash is cut when read).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from typing import NamedTuple

__all__ = [
    "AbortedTxn", "TXN_INDEX_SUFFIX", "ENTRY", "append_entry", "read_entries", "truncate_to",
    "collect_aborted", "entries_in",
]

TXN_INDEX_SUFFIX = ".txnindex"
#: One entry: version, producer id, first offset, last offset, last stable offset.
ENTRY = struct.Struct(">hqqqq")
_VERSION = 0


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def entries_in(data: bytes) -> list[AbortedTxn]:
    """The whole entries of a ``.txnindex`` file's bytes (a partial tail is ignored)."""
    n = len(data) // ENTRY.size
    return [AbortedTxn(*ENTRY.unpack_from(data, i * ENTRY.size)[1:]) for i in range(n)]


def read_entries(path: str) -> list[AbortedTxn]:
    """Every entry of the file at ``path`` ([] when it does not exist). Raises OSError."""
    try:
        with open(path, "rb") as f:
            return entries_in(f.read())
    except FileNotFoundError:
        return []


def append_entry(path: str, txn: AbortedTxn, *, sync: bool = False) -> bool:
    """Append ``txn`` unless the last entry is at or after its last offset (a recovery
    replaying markers the file already holds); True if written. Only the last whole entry is
    read. Raises OSError."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        size = os.fstat(fd).st_size
        whole = size - size % ENTRY.size
        if whole:
            last = AbortedTxn(*ENTRY.unpack(os.pread(fd, ENTRY.size, whole - ENTRY.size))[1:])
            if last.last_offset >= txn.last_offset:
                return False
        if whole != size:  # a torn entry from a crash: cut before appending after it
            os.ftruncate(fd, whole)
        os.write(fd, ENTRY.pack(_VERSION, *txn))
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    return True


def truncate_to(path: str, offset: int) -> None:
    """Drop the entries whose marker is at or after ``offset`` (Kafka's truncateTo); the file
    goes when none is left. Raises OSError."""
    entries = read_entries(path)
    keep = [e for e in entries if e.last_offset < offset]
    if len(keep) == len(entries) and (not entries or os.path.getsize(path) % ENTRY.size == 0):
        return
    if not keep:
        os.unlink(path)
        return
    with open(path, "r+b") as f:
        f.truncate(len(keep) * ENTRY.size)


def collect_aborted(paths: Iterable[str], fetch_offset: int,
                    upper_bound: int) -> list[AbortedTxn]:
    """The aborted transactions overlapping [fetch_offset, upper_bound), read from the
    ``.txnindex`` files ``paths`` (the segments from the one holding ``fetch_offset`` on, in
    order; missing files are skipped), stopping at the first entry whose last stable offset is
    at or past ``upper_bound`` (Kafka's collectAbortedTxns / isComplete). Raises OSError."""
    out: list[AbortedTxn] = []
    for path in paths:
        for e in read_entries(path):
            if e.last_offset >= fetch_offset and e.first_offset < upper_bound:
                out.append(e)
            if e.last_stable_offset >= upper_bound:
                return out
    return out
