"""Pure-Python twin of :func:`native.decode.decode_records`: one record at a time, for reading.

Same arguments, same result (:class:`native.decode.DecodeOutput`, status, bad batch index) and
the same first error for malformed data; it shares nothing with the kernel beyond the status
codes and the result type. Integer arithmetic wraps to 64 bits where the kernel's does, so the
two agree on hostile varints too. Slow: tests only.
"""

from __future__ import annotations

import numpy as np

from native.decode import DECODE_OK, DecodeOutput

__all__ = ["decode_records_twin"]

_U64 = (1 << 64) - 1


def _i64(v: int) -> int:
    v &= _U64
    return v - (1 << 64) if v >= 1 << 63 else v


def _varint(data: bytes, p: int, end: int) -> tuple[int, int]:
    """(zigzag value, next position), next position -1 when the varint runs past ``end``."""
    result = 0
    shift = 0
    while True:
        if p >= end or shift > 63:
            return 0, -1
        b = data[p]
        p += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
    r = _i64(result)
    return (r >> 1) ^ -(r & 1), p


class _Malformed(Exception):
    def __init__(self, status: int) -> None:
        self.status = status


def _take(data: bytes, p: int, end: int) -> tuple[int, int]:
    v, p = _varint(data, p, end)
    if p < 0:
        raise _Malformed(2)
    return v, p


def _record(data: bytes, p: int, end: int, prev: int):
    """One record at ``p``: (next p, offsetDelta, tsDelta, key, value, headers)."""
    length, p = _take(data, p, end)
    if length < 6 or length > end - p:
        raise _Malformed(3)
    rec_end = p + length
    p += 1  # attributes
    ts_delta, p = _take(data, p, rec_end)
    od, p = _take(data, p, rec_end)
    if od <= prev:
        raise _Malformed(8)
    fields = []
    for _ in range(2):  # key, value
        n, p = _take(data, p, rec_end)
        if n < -1 or n > rec_end - p:
            raise _Malformed(4)
        fields.append(None if n < 0 else data[p:p + n])
        p += max(n, 0)
    hc, p = _take(data, p, rec_end)
    if hc < 0:
        raise _Malformed(7)
    headers = []
    for _ in range(hc):
        kn, p = _take(data, p, rec_end)
        if kn < 0 or kn > rec_end - p:
            raise _Malformed(7)
        hk = data[p:p + kn]
        p += kn
        vn, p = _take(data, p, rec_end)
        if vn < -1 or vn > rec_end - p:
            raise _Malformed(4)
        headers.append((hk, None if vn < 0 else data[p:p + vn]))
        p += max(vn, 0)
    if p != rec_end:
        raise _Malformed(5)
    return p, od, ts_delta, fields[0], fields[1], headers


def _binary_column(items: list[bytes | None]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    offsets = [0]
    for x in items:
        offsets.append(offsets[-1] + (len(x) if x is not None else 0))
    data = b"".join(x for x in items if x is not None)
    return (np.array(offsets, np.int32), np.array([x is not None for x in items], np.uint8),
            np.frombuffer(data, np.uint8).copy())


def decode_records_twin(buf: object, sec_start: np.ndarray, sec_end: np.ndarray,
                        base_offsets: np.ndarray, base_timestamps: np.ndarray,
                        max_timestamps: np.ndarray, log_append: np.ndarray, counts: np.ndarray,
                        lo: int, hi: int, want_headers: bool
                        ) -> tuple[DecodeOutput | None, int, int]:
    """Same contract as :func:`native.decode.decode_records`."""
    data = bytes(np.asarray(buf, np.uint8)) if not isinstance(buf, bytes) else buf
    rows = []  # (offset, ts_us, ts_type, key, value, headers)
    for b in range(len(sec_start)):
        p, end, prev = int(sec_start[b]), int(sec_end[b]), -1
        try:
            for _ in range(int(counts[b])):
                p, od, ts_delta, key, value, headers = _record(data, p, end, prev)
                prev = od
                offset = _i64(int(base_offsets[b]) + od)
                if not lo <= offset < hi:
                    continue
                if log_append[b]:
                    ts, tt = _i64(int(max_timestamps[b]) * 1000), 1
                else:
                    ts, tt = _i64((int(base_timestamps[b]) + ts_delta) * 1000), 0
                rows.append((offset, ts, tt, key, value, headers))
        except _Malformed as e:
            return None, e.status, b
        if p != end:
            return None, 6, b
    key_offs, key_valid, key_data = _binary_column([r[3] for r in rows])
    val_offs, val_valid, val_data = _binary_column([r[4] for r in rows])
    out = DecodeOutput(
        rows=len(rows), offsets=np.array([r[0] for r in rows], np.int64),
        timestamps_us=np.array([r[1] for r in rows], np.int64),
        timestamp_types=np.array([r[2] for r in rows], np.int32),
        key_offsets=key_offs, key_valid=key_valid, key_data=key_data,
        value_offsets=val_offs, value_valid=val_valid, value_data=val_data,
        header_offsets=None, hkey_offsets=None, hkey_data=None, hvalue_offsets=None,
        hvalue_valid=None, hvalue_data=None)
    if want_headers:
        counts_per_row = [len(r[5]) for r in rows]
        out.header_offsets = np.cumsum([0, *counts_per_row]).astype(np.int32)
        flat = [h for r in rows for h in r[5]]
        out.hkey_offsets, _, out.hkey_data = _binary_column([k for k, _ in flat])
        out.hvalue_offsets, out.hvalue_valid, out.hvalue_data = _binary_column(
            [v for _, v in flat])
    return out, DECODE_OK, -1
