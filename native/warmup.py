"""Compile (or load from numba's on-disk cache) every kernel once, e.g. at install time.

The first call of a kernel in a process costs its compilation (seconds) unless the cache holds
it; calling this once after install makes broker start-up and the first test fast.
"""

from __future__ import annotations

import numpy as np

__all__ = ["warmup"]


def warmup() -> None:
    from native import crc32, crc32c, offset_index_floor, scan_batches, time_index_floor

    buf = np.zeros(64, dtype=np.uint8)
    crc32c(buf)
    crc32(buf)
    scan_batches(buf)
    offset_index_floor(buf, 0, 0)
    time_index_floor(buf, 0, 0)
    from native.batch_build import build_batch_columns
    from native.records_walk import walk_records
    batch = build_batch_columns(np.zeros(4, np.uint8), np.array([0, 2, 4], np.int64), timestamp=0)
    walk_records(batch, 61, len(batch), 2)
    from native.validate import validate_plain_batches
    validate_plain_batches(batch, 1 << 20)
    from native.batch_layout import HEADER_SIZE
    from native.down_convert import convert_batches, convert_records, records_bound
    out = np.empty(records_bound(len(batch)), np.uint8)
    for magic in (0, 1):
        convert_batches(np.frombuffer(batch, np.uint8), 0, magic, True, out, 0)
        convert_records(batch[HEADER_SIZE:], 2, 0, 0, 0, False, 1, magic, magic == 1, out)
    # The readers' kernels, on read-only buffers as they get them (a read-only mmap, bytes):
    # numba compiles read-only arrays separately.
    from native.entry_runs import entry_runs
    from native.legacy_decode import decode_legacy, scan_legacy
    ro = np.frombuffer(bytes(64), np.uint8)
    entry_runs(ro)
    scan_legacy(ro)
    no64, no8 = np.zeros(0, np.int64), np.zeros(0, np.uint8)
    decode_legacy(ro, no64, no64, no8, no64, no64, no64, no8, 0, 1, False)
    from native.fence import memory_fence
    memory_fence()
    # The append kernel, for the request buffers the broker hands it: the ring's memoryview,
    # bytearray (replication), bytes (clients in-process). Each compiles separately (~4-8 s
    # cold); rarer kinds (a read-only memoryview, a numpy array) compile on first use.
    from native.append_commit import append_commit, new_segment_state, new_work
    from native.append_plan import NO_LIMIT
    work, st, idx = new_work(1, 1 << 20, NO_LIMIT), new_segment_state(), np.zeros(0, np.uint8)
    for req in (memoryview(bytearray(64)), bytearray(64), bytes(64)):
        append_commit(req, work, st, idx, idx)


if __name__ == "__main__":
    warmup()
