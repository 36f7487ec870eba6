"""Records of ``__transaction_state``, in Kafka's own key/value formats (declared once here).

Key (int16 version 0, then TransactionLogKey v0): the transactional id. Value (int16 version 0,
then TransactionLogValue v0): producer id, epoch, timeout, status, the partitions of the
transaction (nullable), last update and start timestamps. We write v0 (not flexible); a v1
value (flexible, with tagged fields) is read too, its tags skipped. A null value is a
tombstone (the id expired). Big-endian; Kafka's string = int16 length + UTF-8.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from appliance.coordinator.offsets_schema import SchemaError, _Reader, _Writer

__all__ = ["TxnKey", "TxnValue", "encode_txn_key", "encode_txn_value", "decode_txn_key",
           "decode_txn_value", "SchemaError", "KEY_VERSION", "VALUE_VERSION"]

KEY_VERSION = 0
VALUE_VERSION = 0
_b = struct.Struct(">b")


@dataclass(frozen=True)
class TxnKey:
    transactional_id: str


@dataclass(frozen=True)
class TxnValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: int  # a TxnState's byte (txn_state.STATUS_BYTE)
    partitions: tuple[tuple[str, tuple[int, ...]], ...] | None  # (topic, partition ids)
    last_update_ms: int
    start_ms: int


def encode_txn_key(k: TxnKey) -> bytes:
    return bytes(_Writer().i16(KEY_VERSION).string(k.transactional_id).out)


def encode_txn_value(v: TxnValue) -> bytes:
    w = _Writer().i16(VALUE_VERSION).i64(v.producer_id).i16(v.producer_epoch).i32(v.timeout_ms)
    w.out += _b.pack(v.status)
    if v.partitions is None:
        w.i32(-1)
    else:
        w.i32(len(v.partitions))
        for topic, ids in v.partitions:
            w.string(topic).i32(len(ids))
            for p in ids:
                w.i32(p)
    return bytes(w.i64(v.last_update_ms).i64(v.start_ms).out)


def decode_txn_key(data: bytes) -> TxnKey:
    r = _Reader(data)
    version = r.i16()
    if version != KEY_VERSION:
        raise SchemaError(f"unknown transaction log key version {version}")
    return TxnKey(r.string() or "")


def decode_txn_value(data: bytes) -> TxnValue:
    r = _Reader(data)
    version = r.i16()
    if version not in (0, 1):
        raise SchemaError(f"unknown transaction log value version {version}")
    flexible = version >= 1
    pid, epoch, timeout = r.i64(), r.i16(), r.i32()
    if r.pos + 1 > len(r.data):
        raise SchemaError("record ends early")
    status = _b.unpack_from(r.data, r.pos)[0]
    r.pos += 1
    n = _uvarint(r) - 1 if flexible else r.i32()
    parts: list[tuple[str, tuple[int, ...]]] | None = None
    if n >= 0:
        parts = []
        for _ in range(n):
            topic = (_compact_string(r) if flexible else r.string()) or ""
            count = _uvarint(r) - 1 if flexible else r.i32()
            parts.append((topic, tuple(r.i32() for _ in range(max(count, 0)))))
            if flexible:
                _skip_tags(r)
    last, start = r.i64(), r.i64()
    return TxnValue(pid, epoch, timeout, status, None if parts is None else tuple(parts), last, start)


def _uvarint(r: _Reader) -> int:
    shift = value = 0
    while True:
        if r.pos >= len(r.data) or shift > 28:
            raise SchemaError("bad varint")
        b = r.data[r.pos]
        r.pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value
        shift += 7


def _compact_string(r: _Reader) -> str | None:
    n = _uvarint(r) - 1
    if n < 0:
        return None
    if r.pos + n > len(r.data):
        raise SchemaError("string runs past the record")
    s = bytes(r.data[r.pos:r.pos + n]).decode()
    r.pos += n
    return s


def _skip_tags(r: _Reader) -> None:
    for _ in range(_uvarint(r)):
        _uvarint(r)
        r.pos += _uvarint(r)
