"""Crash recovery for the cleaner's segment swap (Kafka's ``.cleaned`` / ``.swap`` rules).

The cleaner (:mod:`appliance.storage.cleaner`) replaces a group of segments G = [S1..Sn] by one
cleaned segment C whose base offset is S1's, in this order:

1. C is written as ``<base>.log.cleaned`` (+ ``.index.cleaned``, ``.timeindex.cleaned``) and
   fsynced;
2. C's files are renamed ``.cleaned`` -> ``.swap``, the indexes first, the log last (so a
   ``.log.swap`` file means the cleaned data is complete and durable); the directory is fsynced;
3. every Si is renamed ``.deleted``;
4. C's files are renamed ``.swap`` -> final names (the log last); the directory is fsynced.

A crash at any point leaves a directory that :func:`complete_interrupted_swaps` turns back into a
valid log when the partition opens:

- ``*.cleaned`` files: the swap never started; the originals are complete -> delete them;
- a ``<b>.log.swap``: the cleaned data is complete -> delete every ``.log`` segment whose base
  offset lies in (b, next offset of the swap) — they are old members of the group whose surviving
  records are in the swap (a member past the swap's last offset lost every record, so keeping it
  only keeps redundant records) — delete ``<b>``'s final-name indexes unless a ``.swap`` index
  replaces them (they may belong to the old S1; the log recovery rebuilds missing indexes), then
  rename the swap files to their final names (this replaces the old ``<b>.log``);
- ``.index.swap`` / ``.timeindex.swap`` without a ``.log.swap``: step 2 was interrupted before
  its last rename (step 4 renames the indexes before the log, so it leaves none behind): the log
  is still ``.cleaned``, the swap never happened -> delete them;
- ``.deleted`` files are deleted by the log's usual leftover rule.

Thread-safety: call only while the partition is closed (PartitionLog.open does, before loading).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence

from appliance.errors import KafkaStorageError
from appliance.storage.checkpoint import fsync_dir
from appliance.storage.segment import (
    CLEANED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogSegment,
    parse_segment_file_name,
    segment_file_name,
)
from native.scan import scan_batches

__all__ = ["complete_interrupted_swaps", "next_offset_of_log_file", "swap_in"]

log = logging.getLogger(__name__)


def swap_in(dir_: str, old: Sequence[LogSegment], new: LogSegment | None,
            hook: Callable[[str], None] | None = None) -> None:
    """Steps 2-4 above on disk: ``new`` (complete, fsynced ``.cleaned`` files, or None when
    every record of ``old`` was redundant) replaces ``old``, whose files end up ``.deleted``
    (still open). ``hook(step)`` runs after the steps "swap", "deleted" and "swapped" (crash
    tests kill the process there). Raises KafkaStorageError on I/O failure."""
    try:
        if new is not None:
            new.change_suffix(SWAP_SUFFIX)
            fsync_dir(dir_)
        if hook:
            hook("swap")
        for s in old:
            s.rename_to_deleted()
        if hook:
            hook("deleted")
        if new is not None:
            new.change_suffix("")
        fsync_dir(dir_)
    except OSError as e:
        raise KafkaStorageError(f"{dir_}: segment swap failed: {e}") from e
    if hook:
        hook("swapped")


def next_offset_of_log_file(path: str, base_offset: int) -> int:
    """Last offset + 1 of the valid batches at the start of the log file ``path`` (base offset
    when none). The file was fsynced before it was renamed, so a partial tail only means a
    damaged disk; the valid prefix is what counts."""
    with open(path, "rb") as f:
        data = f.read()
    r = scan_batches(data, 0, len(data), verify_crc=False, legacy=True)
    return int(r.last_offsets[r.count - 1]) + 1 if r.count else base_offset


def complete_interrupted_swaps(dir_: str) -> int:
    """Apply the recovery rules above to the partition directory ``dir_``. Returns the number
    of swaps completed. Raises OSError."""
    names = os.listdir(dir_)
    swap_logs: list[int] = []
    changed = False
    for name in names:
        parsed = parse_segment_file_name(name)
        if name.endswith(CLEANED_SUFFIX):
            log.info("%s: removing unfinished cleaner output %s", dir_, name)
            os.unlink(os.path.join(dir_, name))
            changed = True
        elif parsed and parsed[1] == LOG_SUFFIX + SWAP_SUFFIX:
            swap_logs.append(parsed[0])
    for name in names:
        parsed = parse_segment_file_name(name)
        if (parsed and parsed[1] in (INDEX_SUFFIX + SWAP_SUFFIX, TIME_INDEX_SUFFIX + SWAP_SUFFIX,
                                     TXN_INDEX_SUFFIX + SWAP_SUFFIX)
                and parsed[0] not in swap_logs):
            log.info("%s: removing swap index %s without its log", dir_, name)
            os.unlink(os.path.join(dir_, name))
            changed = True
    for base in sorted(swap_logs):
        swap_path = os.path.join(dir_, segment_file_name(base, LOG_SUFFIX) + SWAP_SUFFIX)
        end = next_offset_of_log_file(swap_path, base)
        for name in os.listdir(dir_):
            parsed = parse_segment_file_name(name)
            if parsed and parsed[1] in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX) \
                    and base < parsed[0] < end:
                log.info("%s: removing %s, replaced by the cleaned segment %d", dir_, name, base)
                os.unlink(os.path.join(dir_, name))
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, LOG_SUFFIX):  # the log last
            final = os.path.join(dir_, segment_file_name(base, suffix))
            swap = final + SWAP_SUFFIX
            if os.path.exists(swap):
                os.replace(swap, final)
            elif os.path.exists(final):
                os.unlink(final)  # maybe the old segment's index: the log recovery rebuilds it
        log.info("%s: completed the interrupted swap of cleaned segment %d", dir_, base)
        changed = True
    if changed:
        fsync_dir(dir_)
    return len(swap_logs)
