"""Loading a partition directory at open: leftovers, segments, recovery (Kafka's LogLoader).

:func:`load_segments` turns whatever a crash left in a ``<topic>-<partition>`` directory into an
ordered list of sound segments: leftover ``.deleted``/``.cleaned``/``.swap``/``.tmp`` files go
(an interrupted cleaner swap is first finished or dropped, see :mod:`appliance.storage.swap`),
every segment from the one holding the recovery point on is CRC-scanned and cut at the first
invalid batch (an unclean shutdown; later segments are deleted), missing or insane indexes are
rebuilt. :func:`replay_producer_state` rebuilds the idempotent producers' state (and their open
transactions) from a snapshot and the batches after it, and writes back the aborted-transaction
index entries a recovered segment lacks; for the segments just recovered it takes their producer
batches as recovery found them (:func:`producer_batches`, read while the segment was mapped):
walking and mapping them a second time was 38 of 160 ms of an unclean open of 1 GiB
(perf/README.md, "the recovery scan, regressed and mended").

Loading is all or nothing: on any error every segment opened so far is closed before the error
propagates (EMFILE gives :class:`~appliance.storage.segment.SegmentOpenError` naming the file).

Thread-safety: call while nobody else uses the directory (PartitionLog.open does).
"""

from __future__ import annotations

import bisect
import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from appliance.errors import KafkaError
from appliance.records.control import parse_marker
from appliance.storage import txn_index
from appliance.storage.producer_state import NUM_BATCHES_TO_RETAIN, ProducerStateManager
from appliance.storage.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogSegment,
    parse_segment_file_name,
)
from appliance.storage.swap import complete_interrupted_swaps
from native.batch_layout import (
    CONTROL_FLAG_MASK,
    CURRENT_MAGIC,
    HEADER_DTYPE,
    HEADER_SIZE,
    MAGIC_OFFSET,
    PRODUCER_ID_OFFSET,
    TRANSACTIONAL_FLAG_MASK,
)
from native.scan import SCAN_END

__all__ = ["remove_leftovers", "load_segments", "replay_producer_state", "recover_producers",
           "producer_batches", "STOP_NAMES"]

log = logging.getLogger(__name__)

#: Why a recovery scan stopped, by native.scan stop reason.
STOP_NAMES = {0: "end", 1: "partial batch", 2: "bad header (garbage or zero fill)",
              3: "CRC mismatch", 4: "offsets going backwards", 5: "limit"}


def remove_leftovers(path: str) -> list[int]:
    """Finish or drop an interrupted cleaner swap, delete files of unfinished operations and
    indexes without a log file. Returns the base offsets of the ``.log`` files, sorted.
    Raises OSError."""
    bases = set()
    complete_interrupted_swaps(path)
    names = os.listdir(path)
    for name in names:
        full = os.path.join(path, name)
        if name.endswith((DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX, ".tmp")):
            # .deleted were on their way out; swap.py has already dealt with .cleaned/.swap.
            log.info("%s: removing leftover %s", path, name)
            os.unlink(full)
            continue
        parsed = parse_segment_file_name(name)
        if parsed and parsed[1] == LOG_SUFFIX:
            bases.add(parsed[0])
    for name in names:
        parsed = parse_segment_file_name(name)
        if (parsed and parsed[1] in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
                and parsed[0] not in bases):
            log.info("%s: removing index %s without a log file", path, name)
            os.unlink(os.path.join(path, name))
    return sorted(bases)


def load_segments(path: str, config: Any, recovery_point: int, log_start_offset: int,
                  clean: bool, new_segment: Callable[[int], LogSegment],
                  recovered: dict[int, np.ndarray] | None = None) -> list[LogSegment]:
    """The recovered segments of the directory ``path``, oldest first; ``new_segment(base)``
    makes the first one of an empty directory.

    Recovered: every segment from the one holding ``recovery_point`` on (unless ``clean``) and
    any segment whose indexes are missing or insane; a segment cut short ends the log (the
    segments after it are deleted); an empty segment that is not the last is dropped. The
    segments are visited one at a time and every one but the last is finished (final time-index
    entry, trimmed indexes) and released before the next opens, so loading holds the
    descriptors of two segments at most, however many there are; the last one's indexes are
    preallocated again for appends. ``recovered`` (when given) receives, by base offset, the
    :func:`producer_batches` of every segment recovered. Raises OSError and KafkaStorageError
    (SegmentOpenError when a file cannot be opened), with nothing left open."""
    bases = remove_leftovers(path)
    first_unflushed = max(0, bisect.bisect_right(bases, recovery_point) - 1)
    segs: list[LogSegment] = []
    try:
        for i, base in enumerate(bases):
            seg = LogSegment.open(path, base, config, create=False)
            segs.append(seg)
            problem = seg.index_problem
            cut = False
            if (not clean and i >= first_unflushed) or problem is not None:
                why = problem or f"unclean shutdown, recovery point {recovery_point}"
                res = seg.recover()
                if recovered is not None:
                    recovered[base] = producer_batches(seg.data(res.valid_bytes), res.positions)
                if res.truncated_bytes:
                    log.warning("%s: cut %d bytes at position %d: %s (recovering after %s)",
                                seg.log_path, res.truncated_bytes, res.valid_bytes,
                                STOP_NAMES.get(res.stop_reason, res.stop_reason), why)
                if problem is not None:
                    log.warning("%s: rebuilt the indexes (%s)", seg.log_path, problem)
                cut = res.stop_reason != SCAN_END
            if cut and i + 1 < len(bases):
                for later in bases[i + 1:]:
                    dead = LogSegment(path, later, config, writable=True)
                    log.warning("%s: deleting segment after the corruption in %s",
                                dead.log_path, os.path.basename(seg.log_path))
                    dead.delete_files()
                break
            if i + 1 < len(bases):
                if seg.size == 0:  # would break offset ordering
                    seg.delete_files()
                    segs.pop()
                    continue
                seg.on_become_inactive()
                seg.release()
        if not segs:
            segs.append(new_segment(log_start_offset))
        segs[-1].resize_indexes(int(config.segment_index_bytes))
    except BaseException:
        for seg in segs:
            seg.close(trim=False)
        raise
    return segs


def replay_producer_state(producers: ProducerStateManager, path: str,
                          segments: tuple[LogSegment, ...] | list[LogSegment],
                          log_start_offset: int, log_end_offset: int,
                          recovered: dict[int, np.ndarray] | None = None) -> None:
    """Rebuild ``producers`` from the newest snapshot at or below the log end offset and the
    idempotent and transactional batches after it (from the log start offset without a
    snapshot). ``recovered``: :func:`producer_batches` already read, by segment base offset
    (those are not walked); the ABORT markers replayed in them are written back to their
    ``.txnindex`` when missing (recovery cut it with the log). Raises OSError."""
    producers.clear()
    start = producers.load_snapshot(path, log_end_offset)
    if start is None:
        start = log_start_offset
    last = segments[-1]
    for seg in segments:
        if seg.next_offset <= start or seg.size == 0:
            continue
        rows = recovered.get(seg.base_offset) if recovered else None
        if rows is None:
            _replay(producers, _segment_producer_batches(seg, start, last), start)
        else:
            _replay(producers, rows, start,
                    lambda t, p=seg.txn_index_path: txn_index.append_entry(p, t))


def recover_producers(producers: ProducerStateManager, segments: Sequence[LogSegment],
                      pids: set[int], log_start_offset: int) -> None:
    """After a truncation cut every batch the state retained of ``pids``
    (:meth:`ProducerStateManager.truncate_after`): their state from their last batches left in
    the log, read from the newest segment back until each is found or the log start is reached
    (Kafka rebuilds its state from a snapshot and the log after it; a truncation is rare, a
    leader change)."""
    wanted = set(pids)
    last = segments[-1]
    for seg in reversed(segments):
        if not wanted or seg.next_offset <= log_start_offset:
            return
        if seg.size == 0:
            continue
        start = max(seg.base_offset, log_start_offset)
        rows = _segment_producer_batches(seg, start, last)
        rows = rows[np.isin(rows["producer_id"], np.fromiter(wanted, np.int64, len(wanted)))]
        _replay(producers, rows, start)
        wanted.difference_update(rows["producer_id"].tolist())


def _segment_producer_batches(seg: LogSegment, start: int, last: LogSegment) -> np.ndarray:
    """:func:`producer_batches` of ``seg``'s batches from offset ``start`` on."""
    was_open = seg.files_open
    try:
        loc = seg.translate_offset(start)
        if loc is None:
            return np.empty(0, HEADER_DTYPE)
        r = seg.batches_from(loc.position)
        if not r.count:
            return np.empty(0, HEADER_DTYPE)
        return producer_batches(seg.data(seg.size), r.positions[:r.count])
    finally:
        if not was_open and seg is not last:
            seg.release()  # one segment's descriptors at a time, however long the walk


def producer_batches(buf: Any, positions: np.ndarray, chunk: int = 1 << 16) -> np.ndarray:
    """The headers (rows of HEADER_DTYPE, copied out of ``buf``, in log order) of the last
    NUM_BATCHES_TO_RETAIN batches of each idempotent producer among the batches at
    ``positions``: v2, producer id and base sequence >= 0. A producer's replayed state is made
    of those alone (its epoch is its last batch's), so however many batches a segment holds the
    rows stay few. Transactions add the batches that open or end one (:func:`_txn_rows`); in a
    marker's row (a copy) the ``crc`` field carries the marker's control type, read from its
    record (recovery has checked the CRC, and the replay needs the type). Read with numpy
    gathers ``chunk`` batches at a time (the gather's index arrays are 8 bytes per byte read):
    the magic and the producer id's sign first, so every other batch costs two bytes read."""
    a = np.frombuffer(buf, dtype=np.uint8)
    parts, txn_parts = [], []
    try:
        for i in range(0, len(positions), chunk):
            pos = positions[i:i + chunk]
            # legacy (magic 0/1) entries have no producer fields and may be shorter than a header
            pos = pos[a[pos + MAGIC_OFFSET] == CURRENT_MAGIC]
            # big-endian: a negative producer id (-1, no producer) has its first byte's top bit set
            pos = pos[a[pos + PRODUCER_ID_OFFSET] < 0x80]
            rows = a[pos[:, None] + np.arange(HEADER_SIZE)].view(HEADER_DTYPE)[:, 0]
            parts.append(_last_per_producer(rows[rows["base_sequence"] >= 0]))
            txn = (rows["attributes"] & _TXN_BITS) != 0
            if txn.any():
                trows, tpos = rows[txn], pos[txn]
                for j in np.flatnonzero(trows["attributes"] & CONTROL_FLAG_MASK).tolist():
                    trows["crc"][j] = _control_type(buf, int(tpos[j]))
                txn_parts.append(_txn_rows(trows))
    finally:
        del a  # the buffer's export, released before the segment unmaps it
    if not parts:
        return np.empty(0, HEADER_DTYPE)
    out = _last_per_producer(np.concatenate(parts)) if len(parts) > 1 else parts[0]
    if txn_parts:
        both = np.concatenate([out, _txn_rows(np.concatenate(txn_parts))])
        _, first = np.unique(both["base_offset"], return_index=True)  # log order, once each
        out = both[first]
    return out


_TXN_BITS = TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK
_NO_CONTROL_TYPE = 0xFFFF  # a control batch whose type could not be read: the replay skips it


def _control_type(buf: Any, pos: int) -> int:
    try:
        marker = parse_marker(memoryview(buf), pos)
    except KafkaError:
        return _NO_CONTROL_TYPE
    return _NO_CONTROL_TYPE if marker is None else int(marker.commit)


def _txn_rows(rows: np.ndarray) -> np.ndarray:
    """Of transactional and control ``rows`` (log order), those the replay of transactions
    needs: every marker, and each producer's first transactional batch after a marker (or its
    first): the one that opens a transaction. The others only continue one."""
    if len(rows) <= 1:
        return rows
    order = np.argsort(rows["producer_id"], kind="stable")
    pid = rows["producer_id"][order]
    control = (rows["attributes"][order] & CONTROL_FLAG_MASK) != 0
    keep = control.copy()
    keep[0] = True
    keep[1:] |= (pid[1:] != pid[:-1]) | control[:-1]
    return rows[np.sort(order[keep])]


def _last_per_producer(rows: np.ndarray) -> np.ndarray:
    """The last NUM_BATCHES_TO_RETAIN of ``rows`` (in log order) of each producer id, in order."""
    if len(rows) <= NUM_BATCHES_TO_RETAIN:
        return rows
    order = np.argsort(rows["producer_id"], kind="stable")  # by producer, log order within
    pid = rows["producer_id"][order]
    last = np.flatnonzero(np.append(pid[1:] != pid[:-1], True))  # each producer's last row
    group_last = np.repeat(last, np.diff(np.insert(last, 0, -1)))
    keep = order[group_last - np.arange(len(pid)) < NUM_BATCHES_TO_RETAIN]
    return rows[np.sort(keep)]


def _replay(producers: ProducerStateManager, rows: np.ndarray, start: int,
            on_abort: Callable[[txn_index.AbortedTxn], Any] | None = None) -> None:
    """Feed the batches of ``rows`` whose last offset is at or past ``start``, in log order;
    ``on_abort`` gets each transaction an ABORT marker ends."""
    rows = rows[rows["base_offset"] + rows["last_offset_delta"] >= start]
    for pid, epoch, seq, delta, base, attrs, crc in zip(
            rows["producer_id"].tolist(), rows["producer_epoch"].tolist(),
            rows["base_sequence"].tolist(), rows["last_offset_delta"].tolist(),
            rows["base_offset"].tolist(), rows["attributes"].tolist(), rows["crc"].tolist(),
            strict=True):
        if attrs & CONTROL_FLAG_MASK:
            aborted = producers.load_batch(pid, epoch, seq, delta, base, attrs,
                                           -1 if crc == _NO_CONTROL_TYPE else crc)
            if aborted is not None and on_abort is not None:
                on_abort(aborted)
        else:
            producers.load_batch(pid, epoch, seq, delta, base, attrs)
