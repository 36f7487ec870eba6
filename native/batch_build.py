"""Build a RecordBatch v2 from many keys/values at once: the bulk producer's hot loop.

Input is columnar: one buffer of all values plus offsets (n+1), optionally the same for keys
with a mask of null keys, optionally a timestamp delta per record (else every record gets the
batch's timestamp). offsetDelta i, no headers; the output is byte-identical to :func:`appliance.records.build_batch` for the same
records (its twin, which the tests compare against).

Measured reason it exists: building records in Python costs ~3 µs each (~300 k records/s),
far below what the IPC path can append.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from native import batch_layout as L
from native.big_endian import put_be_u32
from native.cpu import TABLE_FORCED
from native.crc import crc32c_raw
from native.intrinsics import copy_bytes
from native.varint import varint_size as _varint_size
from native.varint import write_varint as _put_varint

__all__ = ["build_batch_columns", "max_batch_size"]


#: The kernel CRCs what it built every this many bytes, while those bytes are still in the CPU
#: cache: a second pass over a ~1 MB batch read it back from memory (with the per-batch offset
#: check it replaced, `perf/bench_native.py` "batch build" 41 -> 24 ns per 100-byte record;
#: perf/README.md, "the producer's batch build"). Three of the CRC's 8 KiB blocks, so each run
#: takes its three-stream loop once.
_CRC_RUN = 24 * 1024

#: _build's results other than the batch's end: offsets that are not non-decreasing ranges
#: inside their buffer (checked per record, before its bytes are copied).
_BAD_VALUE_OFFSETS = -1
_BAD_KEY_OFFSETS = -2
_BAD_VALUES = "value_offsets must be n+1 non-decreasing offsets into values, n >= 1"
_BAD_KEYS = "key_offsets must be n+1 non-decreasing offsets into keys"


@nb.njit(nogil=True, cache=not TABLE_FORCED)
def _build(values, voff, keys, koff, knull, has_keys, tsd, has_ts, out):
    """The records after the header already in ``out``, then the two header fields that depend
    on them (batchLength, the CRC over header and records); returns the batch's end, or
    _BAD_*_OFFSETS (``out`` then holds a partial batch)."""
    n = voff.shape[0] - 1
    vend = voff[n]
    kend = koff[koff.shape[0] - 1]
    p = L.RECORDS_OFFSET
    c = crc32c_raw(0xFFFFFFFF, out, L.CRC_START, p)
    done = p
    for i in range(n):
        # every range inside [voff[0], voff[n]] and in order: what the caller sized ``out``
        # for (its bound counts voff[n] - voff[0] value bytes), checked before any copy
        vs = voff[i]
        ve = voff[i + 1]
        if ve < vs or ve > vend:
            return _BAD_VALUE_OFFSETS
        vlen = ve - vs
        klen = -1
        if has_keys:
            ks = koff[i]
            ke = koff[i + 1]
            if ke < ks or ke > kend:
                return _BAD_KEY_OFFSETS
            klen = -1 if knull[i] else ke - ks
        d = tsd[i] if has_ts else 0
        # body: attributes(1) + tsDelta + offsetDelta + key + value + headers(1)
        body = 1 + _varint_size(d) + _varint_size(i) + _varint_size(klen) + max(klen, 0) + _varint_size(vlen) + vlen + 1
        p = _put_varint(out, p, body)
        out[p] = 0          # attributes
        p = _put_varint(out, p + 1, d)
        p = _put_varint(out, p, i)
        p = _put_varint(out, p, klen)
        if klen > 0:
            copy_bytes(out, p, keys, ks, klen)
            p += klen
        p = _put_varint(out, p, vlen)
        # a memcpy: numba's slice assignment is a generic element loop (~33 ns per 100
        # bytes against ~3-8)
        copy_bytes(out, p, values, vs, vlen)
        p += vlen
        out[p] = 0          # no headers
        p += 1
        if p - done >= _CRC_RUN:
            c = crc32c_raw(c, out, done, p)
            done = p
    put_be_u32(out, L.LENGTH_OFFSET, p - L.LOG_OVERHEAD)  # before CRC_START: not covered
    put_be_u32(out, L.CRC_OFFSET, crc32c_raw(c, out, done, p) ^ 0xFFFFFFFF)
    return p


def max_batch_size(n: int, total_key_bytes: int, total_value_bytes: int,
                   timestamp_deltas: bool = False) -> int:
    """An upper bound of the built batch's size (for preallocating ``out``)."""
    ts = 10 if timestamp_deltas else 1
    return L.RECORDS_OFFSET + n * (5 + 1 + ts + 5 + 5 + 5 + 1) + total_key_bytes + total_value_bytes


def build_batch_columns(values: np.ndarray, value_offsets: np.ndarray, *, timestamp: int,
                        keys: np.ndarray | None = None, key_offsets: np.ndarray | None = None,
                        key_null: np.ndarray | None = None,
                        timestamp_deltas: np.ndarray | None = None, base_offset: int = 0,
                        producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                        is_transactional: bool = False,
                        out: np.ndarray | None = None) -> bytes | memoryview:
    """One uncompressed v2 batch of ``len(value_offsets) - 1`` records.

    ``values``/``keys``: 1-D uint8; ``*_offsets``: int64, n+1 entries, record i is
    ``buf[off[i]:off[i+1]]``; ``key_null[i]`` True makes key i null (its run should be empty).
    ``timestamp_deltas`` (int64, n): record i's timestamp is ``timestamp + timestamp_deltas[i]``
    (``timestamp`` is the batch's base timestamp; the max timestamp follows the deltas).
    With ``out`` (a uint8 array of at least :func:`max_batch_size` bytes, reused across calls)
    the batch is built there and a memoryview of it is returned: no allocation, no copy.
    ``is_transactional``: the batch belongs to its producer's open transaction (attributes bit 4).
    Raises ValueError on inconsistent offsets or a too small ``out``.
    """
    values = np.ascontiguousarray(values, dtype=np.uint8)
    voff = np.ascontiguousarray(value_offsets, dtype=np.int64)
    n = voff.shape[0] - 1
    # (the ranges between the ends are checked by the kernel, record by record)
    if n <= 0 or voff[0] < 0 or voff[-1] > values.shape[0] or voff[-1] < voff[0]:
        raise ValueError(_BAD_VALUES)
    has_keys = keys is not None
    if has_keys:
        keys = np.ascontiguousarray(keys, dtype=np.uint8)
        koff = np.ascontiguousarray(key_offsets, dtype=np.int64)
        if koff.shape[0] != n + 1 or koff[0] < 0 or koff[-1] > keys.shape[0] or koff[-1] < koff[0]:
            raise ValueError(_BAD_KEYS)
        knull = (np.zeros(n, np.bool_) if key_null is None
                 else np.ascontiguousarray(key_null, dtype=np.bool_))
        if knull.shape[0] != n:
            raise ValueError("key_null must have one entry per record")
        total_keys = int(keys.shape[0])
    else:
        keys = np.zeros(0, np.uint8)
        koff = np.zeros(1, np.int64)
        knull = np.zeros(0, np.bool_)
        total_keys = 0
    has_ts = timestamp_deltas is not None
    max_ts = timestamp
    if has_ts:
        tsd = np.ascontiguousarray(timestamp_deltas, dtype=np.int64)
        if tsd.shape[0] != n:
            raise ValueError("timestamp_deltas must have one entry per record")
        max_ts = timestamp + int(tsd.max())
    else:
        tsd = np.zeros(0, np.int64)
    need = max_batch_size(n, total_keys, int(voff[-1] - voff[0]), has_ts)
    given = out is not None
    if out is None:
        out = np.empty(need, dtype=np.uint8)
    elif (out.dtype != np.uint8 or out.ndim != 1 or out.shape[0] < need
          or not out.flags.c_contiguous):
        raise ValueError(f"out must be a contiguous 1-D uint8 array of at least {need} bytes")
    # the header first, batchLength and the CRC left for the kernel (its CRC covers the header
    # from CRC_START)
    attributes = L.TRANSACTIONAL_FLAG_MASK if is_transactional else 0
    L.HEADER_STRUCT.pack_into(out, 0, base_offset, 0, -1, L.CURRENT_MAGIC, 0, attributes, n - 1, timestamp,
                              max_ts, producer_id, producer_epoch, base_sequence, n)
    end = _build(values, voff, keys, koff, knull, has_keys, tsd, has_ts, out)
    if end == _BAD_VALUE_OFFSETS:
        raise ValueError(_BAD_VALUES)
    if end == _BAD_KEY_OFFSETS:
        raise ValueError(_BAD_KEYS)
    return memoryview(out)[:end] if given else out[:end].tobytes()
