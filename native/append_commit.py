"""The whole planned append of a request in one kernel call: plan (native.append_plan), roll
check, the write itself, the index entries, the segment's new state.

Measured reason it exists (perf/bench_storage.py, one 16 KiB batch of 1 KiB records per call):
after the plan kernel, ~4 us of Python per call remained around a ~9 us write(): packing the
segment's index state into the plan, the writev pieces of a read-only request, the index
entries one method call each, the state copied back into attributes, the roll check. Here the
segment's append state lives in an int64 array (``st``, columns ``S_*``) that LogSegment's
attributes read, the indexes are written in their mmaps (``oi``, ``ti``: uint8 views), and the
caller packs four ints and reads four back.

Order of effects, as in Kafka's LogSegment.append: nothing is written unless every batch passed
(the plan) and every index entry will be accepted; then the log file; then the index entries;
then the state. A reader in another process never sees an index entry before the bytes it
points at. On a failed write nothing but the file changed (the caller cuts it back).

The results other than a batch count stop before anything is written, with the plan kept in
``work`` so the caller can continue: APPEND_PRODUCERS (idempotent batches: the caller checks
them against its producer state, then calls again with P_MODE = MODE_COMMIT), APPEND_ROLL (the
caller rolls, then plans again against the new segment). PLAN_SLOW and PLAN_MORE_ROWS are
native.append_plan's. The twin is the general path (PartitionLog.append with the planned path
off): tests/storage/test_append_planned.py appends the same requests both ways and compares the
files byte for byte.

``work`` (int64, :func:`new_work`) is the params (native.append_plan's ``P_*``/``O_*`` plus the
ones below: WORK_PARAMS_LEN), then ``cap`` rows of ``ROW_FIELDS``, then the writev scratch.
"""

from __future__ import annotations

import struct

import numpy as np
from numba import njit

from native.append_plan import (
    O_FIRST_OFFSET,
    O_IDEMPOTENT,
    O_INDEX_SINCE,
    O_LAST_OFFSET,
    O_MAX_TS,
    O_NEED_OFFSETS,
    O_RECORDS,
    O_SEG_MAX_TS,
    O_SEG_OFFSET_OF_MAX,
    P_INDEX_INTERVAL,
    P_INDEX_SINCE,
    P_MAX_BATCH,
    P_NOW,
    P_SEG_MAX_TS,
    P_SEG_OFFSET_OF_MAX,
    P_TS_DIFF_MAX,
    PARAMS_LEN,
    R_BASE,
    R_INDEXED,
    R_LAST,
    R_POS,
    R_RUN_MAX_TS,
    R_RUN_OFFSET_OF_MAX,
    R_SIZE,
    ROW_FIELDS,
    _plan_kernel,
)
from native.big_endian import be_i32, be_i64, put_be_i64, put_be_u32
from native.cpu import TABLE_FORCED
from native.index_layout import OFFSET_INDEX_ENTRY_SIZE, TIME_INDEX_ENTRY_SIZE
from native.intrinsics import array_is_writable, buffer_address
from native.libc_calls import (
    CLOCK_REALTIME,
    EINTR,
    IOV_MAX,
    LIBC_CLOCK_GETTIME,
    LIBC_ERRNO_LOCATION,
    LIBC_WRITE,
    LIBC_WRITEV,
    call_errno,
    call_write,
    store_be64,
)

__all__ = [
    "append_commit", "new_work", "work_views", "new_segment_state",
    "APPEND_PRODUCERS", "APPEND_ROLL", "APPEND_WRITE_FAILED", "MODE_PLAN", "MODE_COMMIT",
    "P_MODE", "P_PRODUCERS_CHECKED", "O_ERRNO", "O_BATCHES", "P_CAP",
    "APPEND_NO_FD", "NOW_FROM_CLOCK", "WORK_PARAMS_LEN", "P_FN_CLOCK",
    "O_APPENDED_FIRST", "O_APPENDED_LAST", "O_APPENDED_MAX_TS",
    "O_APPENDED_RECORDS",
    "CALL_IN", "CALL_IN_AT", "CALL_OUT", "CALL_OUT_AT",
    "SEGMENT_STATE_LEN", "NO_FIRST_APPEND", "S_SIZE", "S_NEXT_OFFSET", "S_SINCE", "S_MAX_TS",
    "S_OFFSET_OF_MAX", "S_FIRST_APPEND_MS", "S_BASE_OFFSET", "S_SEGMENT_BYTES", "S_SEGMENT_MS",
    "S_JITTER_MS", "S_INTERVAL", "S_FD", "S_OI_ENTRIES", "S_TI_ENTRIES",
]

#: Results besides a batch count (and append_plan's PLAN_SLOW, PLAN_MORE_ROWS).
APPEND_PRODUCERS = -3
APPEND_ROLL = -4
APPEND_WRITE_FAILED = -5  # O_ERRNO says why; the file may hold part of the data
APPEND_NO_FD = -6  # the log file is not open (the caller opens it and calls again)

# params beyond native.append_plan's (which uses 0..9 and 16..25)
P_MODE = 11
P_PRODUCERS_CHECKED = 12  # 1: idempotent batches were checked, do not stop for them
P_FN_WRITE = 13  # libc addresses (native.libc_calls), set by new_work
P_FN_WRITEV = 14
P_FN_ERRNO = 15
P_CAP = 10  # rows the work array holds (set by new_work)
P_FN_CLOCK = 32  # clock_gettime
#: P_NOW as the caller passes it when the kernel is to read the wall clock itself (measured:
#: ~0.2 us of a ~12 us append for Python's int(time.time() * 1000)); the kernel then writes the
#: time it used into P_NOW.
NOW_FROM_CLOCK = -(2**63)
# outputs for the caller, next to each other for one unpack (CALL_OUT)
O_APPENDED_FIRST = 26
O_APPENDED_LAST = 27
O_APPENDED_MAX_TS = 28
O_APPENDED_RECORDS = 29
O_ERRNO = 30
O_BATCHES = 31  # the plan's batch count (MODE_COMMIT continues from it)
_NOW_SCRATCH = 33  # two words: the timespec clock_gettime fills
#: params of the work array: native.append_plan's PARAMS_LEN, then the slots above
WORK_PARAMS_LEN = 40
# the slots above sit in the plan's gaps (10..15, 26..31) and past its PARAMS_LEN
assert PARAMS_LEN <= P_FN_CLOCK < _NOW_SCRATCH + 2 <= WORK_PARAMS_LEN
MODE_PLAN = 0  # plan, then commit
MODE_COMMIT = 1  # commit the plan already in work (after APPEND_PRODUCERS)

#: What the caller packs per call (at byte CALL_IN_AT): P_VALIDATE, P_ASSIGN, P_NEXT_OFFSET,
#: P_NOW (P_MODE and P_PRODUCERS_CHECKED stay 0 but on the rare paths). Measured: one
#: pack_into of the four costs ~0.3 us, numpy item assignment ~0.15 us per value.
CALL_IN = struct.Struct("=4q")
CALL_IN_AT = 8
#: What it reads back (at byte CALL_OUT_AT): the first and last offsets, max timestamp and
#: record count of what was appended.
CALL_OUT = struct.Struct("=4q")
CALL_OUT_AT = O_APPENDED_FIRST * 8

# The segment's append state (LogSegment keeps it; its attributes read these columns).
S_SIZE = 0
S_NEXT_OFFSET = 1
S_SINCE = 2  # bytes since the last offset-index entry
S_MAX_TS = 3
S_OFFSET_OF_MAX = 4
S_FIRST_APPEND_MS = 5  # NO_FIRST_APPEND until the first append (the roll clock)
S_BASE_OFFSET = 6
S_SEGMENT_BYTES = 7
S_SEGMENT_MS = 8
S_JITTER_MS = 9
S_INTERVAL = 10  # index.interval.bytes
S_FD = 11  # the log file's descriptor, -1 when closed
S_OI_ENTRIES = 12
S_TI_ENTRIES = 13
SEGMENT_STATE_LEN = 16
NO_FIRST_APPEND = -(2**63)

_INT32_MAX = 0x7FFFFFFF
_EIO = 5
_OI = OFFSET_INDEX_ENTRY_SIZE
_TI = TIME_INDEX_ENTRY_SIZE
_GROUP = IOV_MAX // 2  # batches per writev: two pieces each


@njit(nogil=True, cache=True)
def _index_entries(rows, nb, start, base, oi, oi_n, ti, ti_n, store):
    """The index entries of the planned rows (LogSegment._index_batches' rule and checks): with
    ``store`` 0 only checks that every entry is acceptable; returns (ok, entries of oi, of ti)."""
    oi_slots = oi.shape[0] // _OI
    ti_slots = ti.shape[0] // _TI
    last_rel = be_i32(oi, (oi_n - 1) * _OI) if oi_n > 0 else -1
    last_ts = np.int64(-1)
    last_trel = -1
    if ti_n > 0:
        last_ts = be_i64(ti, (ti_n - 1) * _TI)
        last_trel = be_i32(ti, (ti_n - 1) * _TI + 8)
    for i in range(nb):
        if rows[i, R_INDEXED] == 0:
            continue
        if oi_n < oi_slots:
            rel = rows[i, R_LAST] - base
            pos = start + rows[i, R_POS]
            if rel < 0 or rel > _INT32_MAX or rel <= last_rel or pos > _INT32_MAX:
                return False, oi_n, ti_n
            if store:
                put_be_u32(oi, oi_n * _OI, rel)
                put_be_u32(oi, oi_n * _OI + 4, pos)
            oi_n += 1
            last_rel = rel
        ts = rows[i, R_RUN_MAX_TS]
        if ts >= 0 and ti_n < ti_slots - 1:  # the last slot is kept for the roll (Kafka)
            trel = rows[i, R_RUN_OFFSET_OF_MAX] - base
            if trel < 0 or trel > _INT32_MAX:
                return False, oi_n, ti_n
            if ti_n > 0:
                if trel < last_trel or ts < last_ts:
                    return False, oi_n, ti_n
                if ts == last_ts:
                    continue
            if store:
                put_be_i64(ti, ti_n * _TI, ts)
                put_be_u32(ti, ti_n * _TI + 8, trel)
            ti_n += 1
            last_ts = ts
            last_trel = trel
    return True, oi_n, ti_n


@njit(nogil=True, cache=True)
def _write_all(fn, efn, fd, addr, n):
    """write() until all ``n`` bytes at ``addr`` are written; 0 or the errno."""
    done = 0
    while done < n:
        r = call_write(fn, fd, addr + done, n - done)
        if r < 0:
            e = call_errno(efn)
            if e == EINTR:
                continue
            return e
        if r == 0:  # a regular file never does this, but a loop on it would never end
            return _EIO
        done += r
    return 0


@njit(nogil=True, cache=True)
def _writev_all(fn, efn, fd, iov, cnt):
    """writev() the ``cnt`` iovecs (int64 pairs: address, length) in ``iov``, resuming after
    a short write; 0 or the errno."""
    first = 0
    while first < cnt:
        r = call_write(fn, fd, iov.ctypes.data + 16 * first, cnt - first)
        if r < 0:
            e = call_errno(efn)
            if e == EINTR:
                continue
            return e
        if r == 0:
            return _EIO
        while r > 0:
            length = iov[2 * first + 1]
            if r >= length:
                r -= length
                first += 1
            else:
                iov[2 * first] += r
                iov[2 * first + 1] = length - r
                r = 0
    return 0


@njit(nogil=True, cache=True)
def _writev_new_bases(params, fd, addr, rows, nb, scratch, group):
    """Write read-only batches with their planned baseOffsets: per batch two iovecs (the new
    big-endian base from ``scratch``, the rest of the batch from the caller's buffer), at most
    ``group`` batches per writev. Measured for a MiB of 64 batches: 13 us against 59 us for
    copying it to rewrite it in place. Returns 0 or the errno."""
    iov = scratch[:4 * group]
    bases_addr = scratch.ctypes.data + 8 * 4 * group
    i = 0
    while i < nb:
        g = min(group, nb - i)
        for k in range(g):
            r = i + k
            store_be64(bases_addr + 8 * k, rows[r, R_BASE])
            iov[4 * k] = bases_addr + 8 * k
            iov[4 * k + 1] = 8
            iov[4 * k + 2] = addr + rows[r, R_POS] + 8
            iov[4 * k + 3] = rows[r, R_SIZE] - 8
        e = _writev_all(params[P_FN_WRITEV], params[P_FN_ERRNO], fd, iov, 2 * g)
        if e:
            return e
        i += g
    return 0


@njit(nogil=True, cache=not TABLE_FORCED)
def _append_kernel(a, work, st, oi, ti):
    """See the module docstring. Returns the batch count appended or a negative result."""
    n = len(a)
    cap = work[P_CAP]
    params = work[:WORK_PARAMS_LEN]
    rows = work[WORK_PARAMS_LEN:WORK_PARAMS_LEN + cap * ROW_FIELDS].reshape((cap, ROW_FIELDS))
    scratch = work[WORK_PARAMS_LEN + cap * ROW_FIELDS:]
    if params[P_NOW] == NOW_FROM_CLOCK:
        ts = params.ctypes.data + 8 * _NOW_SCRATCH
        call_write(params[P_FN_CLOCK], CLOCK_REALTIME, ts, 0)
        params[P_NOW] = params[_NOW_SCRATCH] * 1000 + params[_NOW_SCRATCH + 1] // 1_000_000
    if params[P_MODE] == MODE_PLAN:
        params[P_INDEX_SINCE] = st[S_SINCE]
        params[P_INDEX_INTERVAL] = st[S_INTERVAL]
        params[P_SEG_MAX_TS] = st[S_MAX_TS]
        params[P_SEG_OFFSET_OF_MAX] = st[S_OFFSET_OF_MAX]
        nb = _plan_kernel(a, n, params, rows)
        if nb < 0:
            return nb
        params[O_BATCHES] = nb
        if params[O_IDEMPOTENT] != 0 and params[P_PRODUCERS_CHECKED] == 0:
            return APPEND_PRODUCERS
    else:
        nb = params[O_BATCHES]
    last = params[O_LAST_OFFSET]
    start = st[S_SIZE]
    base = st[S_BASE_OFFSET]
    oi_n = st[S_OI_ENTRIES]
    ti_n = st[S_TI_ENTRIES]
    # LogSegment.should_roll, in its order
    if start != 0:
        if start > st[S_SEGMENT_BYTES] - n:
            return APPEND_ROLL
        first = st[S_FIRST_APPEND_MS]
        if first != NO_FIRST_APPEND and params[P_NOW] - first > st[S_SEGMENT_MS] - st[S_JITTER_MS]:
            return APPEND_ROLL
        if oi_n >= oi.shape[0] // _OI or ti_n >= ti.shape[0] // _TI - 1:
            return APPEND_ROLL
        if last - base > _INT32_MAX:
            return APPEND_ROLL
    fd = st[S_FD]
    if fd < 0:
        return APPEND_NO_FD
    ok, _, _ = _index_entries(rows, nb, start, base, oi, oi_n, ti, ti_n, False)
    if not ok:
        return -1  # the general path raises the index's own error
    addr = buffer_address(a)
    # a writable buffer (the broker's ring) gets its baseOffsets in place and one write
    if params[O_NEED_OFFSETS] != 0 and not array_is_writable(a):
        e = _writev_new_bases(params, fd, addr, rows, nb, scratch, min(cap, _GROUP))
    else:
        if params[O_NEED_OFFSETS] != 0:
            for i in range(nb):  # outside the CRC: the batches stay valid
                store_be64(addr + rows[i, R_POS], rows[i, R_BASE])
        e = _write_all(params[P_FN_WRITE], params[P_FN_ERRNO], fd, addr, n)
    if e:
        params[O_ERRNO] = e
        return APPEND_WRITE_FAILED
    _, oi_n, ti_n = _index_entries(rows, nb, start, base, oi, oi_n, ti, ti_n, True)
    st[S_SIZE] = start + n
    if start == 0 and st[S_FIRST_APPEND_MS] == NO_FIRST_APPEND:
        st[S_FIRST_APPEND_MS] = params[P_NOW]
    st[S_SINCE] = params[O_INDEX_SINCE]
    st[S_MAX_TS] = params[O_SEG_MAX_TS]
    st[S_OFFSET_OF_MAX] = params[O_SEG_OFFSET_OF_MAX]
    st[S_NEXT_OFFSET] = last + 1
    st[S_OI_ENTRIES] = oi_n
    st[S_TI_ENTRIES] = ti_n
    params[O_APPENDED_FIRST] = params[O_FIRST_OFFSET]
    params[O_APPENDED_LAST] = last
    params[O_APPENDED_MAX_TS] = params[O_MAX_TS]
    params[O_APPENDED_RECORDS] = params[O_RECORDS]
    return nb


#: The kernel: (a, work, st, oi, ti) with ``a`` the request (bytes, bytearray, a C-contiguous
#: memoryview of format "B", or a 1-D uint8 array: each compiles separately), ``st`` the
#: active segment's state, ``oi``/``ti`` uint8 views of its index mappings. (Every argument
#: costs the call ~0.1 us of numba's type dispatch: what the kernel can find, it finds.)
append_commit = _append_kernel


def new_work(capacity: int, max_batch: int, ts_diff_max: int) -> np.ndarray:
    """A work array for ``capacity`` batches (reuse it: one per log), with the limits and the
    libc addresses set."""
    w = np.zeros(WORK_PARAMS_LEN + capacity * ROW_FIELDS + 5 * min(capacity, _GROUP), np.int64)
    w[P_CAP] = capacity
    w[P_MAX_BATCH] = max_batch
    w[P_TS_DIFF_MAX] = ts_diff_max
    w[P_FN_WRITE] = LIBC_WRITE
    w[P_FN_WRITEV] = LIBC_WRITEV
    w[P_FN_ERRNO] = LIBC_ERRNO_LOCATION
    w[P_FN_CLOCK] = LIBC_CLOCK_GETTIME
    return w


def work_views(work: np.ndarray, capacity: int) -> tuple[np.ndarray, np.ndarray]:
    """(params, rows) views of a work array made by :func:`new_work`."""
    return (work[:WORK_PARAMS_LEN],
            work[WORK_PARAMS_LEN:WORK_PARAMS_LEN + capacity * ROW_FIELDS].reshape(capacity, ROW_FIELDS))


def new_segment_state() -> np.ndarray:
    """A segment's state array (all zero, the roll clock not started, no descriptor)."""
    st = np.zeros(SEGMENT_STATE_LEN, np.int64)
    st[S_FIRST_APPEND_MS] = NO_FIRST_APPEND
    st[S_FD] = -1
    return st
