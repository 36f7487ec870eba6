"""Pure-Python twins of :mod:`native.entry_runs` and :mod:`native.legacy_decode`, for reading.

Same arguments, same results and the same first error as the kernels; they share nothing with
them beyond the declared layout, the status codes and the result types. One message at a time
with ``struct``; slow: tests only.
"""

from __future__ import annotations

import struct
import zlib

import numpy as np

from native import legacy_layout as L
from native.buffers import u8_range
from native.decode import DecodeOutput
from native.legacy_decode import (
    LEGACY_OK,
    LEGACY_PARTIAL,
    LEGACY_V2,
    MIN_MESSAGE,
    TS_TYPE_NONE,
    LegacyScan,
)

__all__ = ["entry_runs_twin", "scan_legacy_twin", "decode_legacy_twin"]

_PREFIX = struct.Struct(">qi")  # offset, messageSize
_LEN = struct.Struct(">i")
# The kernels' status codes, by meaning (LEGACY_ERRORS holds the words).
_BAD_HEADER, _BAD_CRC, _BACKWARDS, _BAD_LENGTH, _BAD_FILL = 2, 3, 4, 5, 6
_BAD_CODEC, _BAD_WRAPPER, _NESTED, _INNER_CUT = 7, 8, 9, 11


def _i64(v: int) -> int:
    """Wrap to 64 bits as the kernel's integer arithmetic does (hostile timestamps, offsets)."""
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >= 1 << 63 else v


class _Stop(Exception):
    def __init__(self, status: int) -> None:
        self.status = status


def entry_runs_twin(buf: object, start: int = 0, end: int = -1) -> list[tuple[int, int, bool]]:
    """Same contract as :func:`native.entry_runs.entry_runs`."""
    a, s, e = u8_range(buf, start, end)
    data = a.tobytes()
    runs: list[list] = []  # [start, legacy]
    pos = s
    while pos < e:
        readable = e - pos > L.MAGIC_OFFSET
        if readable:
            legacy = data[pos + L.MAGIC_OFFSET] <= 1
        else:
            legacy = runs[-1][1] if runs else False
        if not runs or runs[-1][1] != legacy:
            runs.append([pos, legacy])
        if not readable:
            break
        _, size = _PREFIX.unpack_from(data, pos)
        if size < 0 or size > e - pos - L.LOG_OVERHEAD:
            break
        pos += L.LOG_OVERHEAD + size
    bounds = [r[0] for r in runs] + [e]
    return [(bounds[i], bounds[i + 1], runs[i][1]) for i in range(len(runs))]


def _message(data: bytes, pos: int, end: int, verify: bool) -> tuple:
    """(end, offset, magic, attributes, timestamp, key, value) of the message at ``pos``;
    raises _Stop with the kernel's status."""
    if end - pos < L.LOG_OVERHEAD:
        raise _Stop(LEGACY_PARTIAL)
    offset, size = _PREFIX.unpack_from(data, pos)
    if size < MIN_MESSAGE - L.LOG_OVERHEAD:
        raise _Stop(_BAD_HEADER)
    magic = 0
    if end - pos > L.MAGIC_OFFSET:
        magic = data[pos + L.MAGIC_OFFSET]
        if magic == 2:
            raise _Stop(LEGACY_V2)
        if magic > 2:
            raise _Stop(_BAD_HEADER)
    if size > end - pos - L.LOG_OVERHEAD:
        raise _Stop(LEGACY_PARTIAL)
    mend = pos + L.LOG_OVERHEAD + size
    header = L.HEADER_V1 if magic else L.HEADER_V0
    if size < header.size + 2 * L.LENGTH_SIZE - L.LOG_OVERHEAD:
        raise _Stop(_BAD_HEADER)
    fields = header.unpack_from(data, pos)
    if verify and zlib.crc32(data[pos + L.MAGIC_OFFSET:mend]) != fields[2]:
        raise _Stop(_BAD_CRC)
    attributes = fields[4] & 0xFF
    timestamp = fields[5] if magic else L.NO_TIMESTAMP
    p = pos + header.size
    (klen,) = _LEN.unpack_from(data, p)
    p += 4
    if klen < -1 or klen > mend - p - 4:
        raise _Stop(_BAD_LENGTH)
    key = None if klen < 0 else data[p:p + klen]
    p += max(klen, 0)
    (vlen,) = _LEN.unpack_from(data, p)
    p += 4
    if vlen < -1 or vlen > mend - p:
        raise _Stop(_BAD_LENGTH)
    value = None if vlen < 0 else data[p:p + vlen]
    p += max(vlen, 0)
    if p != mend:
        raise _Stop(_BAD_FILL)
    return mend, offset, magic, attributes, timestamp, key, value, p - max(vlen, 0)


def scan_legacy_twin(buf: object, start: int = 0, end: int = -1) -> LegacyScan:
    """Same contract as :func:`native.legacy_decode.scan_legacy`."""
    a, s, e = u8_range(buf, start, end)
    data = a.tobytes()
    rows = []
    pos, prev, status = s, -1, LEGACY_OK
    while pos < e:
        try:
            mend, offset, magic, attrs, ts, _key, value, vstart = _message(data, pos, e, True)
        except _Stop as stop:
            status = stop.status
            break
        codec = attrs & L.CODEC_MASK
        if offset <= prev:
            status = _BACKWARDS
        elif codec > 3:
            status = _BAD_CODEC
        elif codec and value is None:
            status = _BAD_WRAPPER
        if status != LEGACY_OK:
            break
        rows.append((pos, mend - pos, offset, magic, attrs, ts, vstart,
                     -1 if value is None else len(value)))
        prev = offset
        pos = mend
    cols = list(zip(*rows, strict=True)) or [()] * 8
    types = (np.int64, np.int64, np.int64, np.uint8, np.uint8, np.int64, np.int64, np.int64)
    return LegacyScan(*(np.array(c, t) for c, t in zip(cols, types, strict=True)),
                      count=len(rows), stop_position=pos, status=status)


def _binary_column(items: list[bytes | None]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    offsets = [0]
    for x in items:
        offsets.append(offsets[-1] + (len(x) if x is not None else 0))
    return (np.array(offsets, np.int32), np.array([x is not None for x in items], np.uint8),
            np.frombuffer(b"".join(x for x in items if x is not None), np.uint8).copy())


def _section_rows(data: bytes, start: int, end: int, inner: bool, w_offset: int, w_magic: int,
                  w_ts: int, w_lat: bool) -> list[tuple]:
    msgs = []
    p = start
    while p < end:
        try:
            m = _message(data, p, end, inner)
        except _Stop as stop:
            if inner and stop.status == LEGACY_PARTIAL:
                raise _Stop(_INNER_CUT) from None
            if inner and stop.status == LEGACY_V2:
                raise _Stop(_NESTED) from None
            raise
        mend, offset, magic, attrs, ts, key, value, _ = m
        if inner:
            if magic != w_magic or attrs & L.CODEC_MASK:
                raise _Stop(_NESTED)
            if offset <= (msgs[-1][0] if msgs else -1):  # increasing, from 0 up
                raise _Stop(_BACKWARDS)
        msgs.append((offset, magic, attrs, ts, key, value))
        p = mend
    if inner and not msgs:
        raise _Stop(_BAD_WRAPPER)
    shift = w_offset - msgs[-1][0] if inner and w_magic == 1 else 0
    rows = []
    for offset, magic, attrs, ts, key, value in msgs:
        if magic == 0:
            ts, ts_type = L.NO_TIMESTAMP, TS_TYPE_NONE
        elif inner and w_lat:
            ts, ts_type = w_ts, 1
        elif not inner and attrs & L.TIMESTAMP_TYPE_BIT:
            ts_type = 1
        else:
            ts_type = 0
        rows.append((_i64(offset + shift), _i64(ts * 1000), ts_type, key, value))
    return rows


def decode_legacy_twin(buf: object, sec_start: np.ndarray, sec_end: np.ndarray,
                       sec_inner: np.ndarray, sec_offset: np.ndarray, sec_magic: np.ndarray,
                       sec_ts: np.ndarray, sec_lat: np.ndarray, lo: int, hi: int,
                       want_headers: bool) -> tuple[DecodeOutput | None, int, int]:
    """Same contract as :func:`native.legacy_decode.decode_legacy`."""
    data = np.asarray(buf, np.uint8).tobytes() if not isinstance(buf, bytes) else buf
    rows = []
    for s in range(len(sec_start)):
        try:
            got = _section_rows(data, int(sec_start[s]), int(sec_end[s]), bool(sec_inner[s]),
                                int(sec_offset[s]), int(sec_magic[s]), int(sec_ts[s]),
                                bool(sec_lat[s]))
        except _Stop as stop:
            return None, stop.status, s
        rows += [r for r in got if lo <= r[0] < hi]
    key_offs, key_valid, key_data = _binary_column([r[3] for r in rows])
    val_offs, val_valid, val_data = _binary_column([r[4] for r in rows])
    n = len(rows)
    return DecodeOutput(
        rows=n, offsets=np.array([r[0] for r in rows], np.int64),
        timestamps_us=np.array([r[1] for r in rows], np.int64),
        timestamp_types=np.array([r[2] for r in rows], np.int32),
        key_offsets=key_offs, key_valid=key_valid, key_data=key_data,
        value_offsets=val_offs, value_valid=val_valid, value_data=val_data,
        header_offsets=np.zeros(n + 1, np.int32) if want_headers else None,
        hkey_offsets=np.zeros(1, np.int32) if want_headers else None,
        hkey_data=np.empty(0, np.uint8) if want_headers else None,
        hvalue_offsets=np.zeros(1, np.int32) if want_headers else None,
        hvalue_valid=np.empty(0, np.uint8) if want_headers else None,
        hvalue_data=np.empty(0, np.uint8) if want_headers else None,
    ), LEGACY_OK, -1
