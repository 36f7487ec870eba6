"""Records of ``__consumer_offsets``, in Kafka's own key/value formats (declared once here).

Keys (int16 version first): version 0/1 = offset commit (group, topic, partition);
version 2 = group metadata (group). Values: OffsetCommitValue v3 (offset, leader epoch,
metadata, commit timestamp) and GroupMetadataValue v3. A null value is a tombstone.
Big-endian, Kafka's string = int16 length + UTF-8, bytes = int32 length.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = [
    "OffsetKey", "GroupKey", "OffsetValue", "GroupValue", "MemberValue",
    "encode_offset_key", "encode_group_key", "encode_offset_value", "encode_group_value",
    "decode_key", "decode_offset_value", "decode_group_value", "SchemaError",
]

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3

_h = struct.Struct(">h")
_i = struct.Struct(">i")
_q = struct.Struct(">q")


class SchemaError(ValueError):
    """A record of __consumer_offsets that does not parse (skipped on load, and logged)."""


class _Writer:
    def __init__(self) -> None:
        self.out = bytearray()

    def i16(self, v: int) -> _Writer:
        self.out += _h.pack(v)
        return self

    def i32(self, v: int) -> _Writer:
        self.out += _i.pack(v)
        return self

    def i64(self, v: int) -> _Writer:
        self.out += _q.pack(v)
        return self

    def string(self, s: str | None) -> _Writer:
        if s is None:
            return self.i16(-1)
        raw = s.encode()
        self.i16(len(raw))
        self.out += raw
        return self

    def bytes_(self, b: bytes | None) -> _Writer:
        if b is None:
            return self.i32(-1)
        self.i32(len(b))
        self.out += b
        return self


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, fmt: struct.Struct) -> int:
        if self.pos + fmt.size > len(self.data):
            raise SchemaError("record ends early")
        v = fmt.unpack_from(self.data, self.pos)[0]
        self.pos += fmt.size
        return v

    def i16(self) -> int:
        return self._take(_h)

    def i32(self) -> int:
        return self._take(_i)

    def i64(self) -> int:
        return self._take(_q)

    def string(self) -> str | None:
        n = self.i16()
        if n < 0:
            return None
        if self.pos + n > len(self.data):
            raise SchemaError("string runs past the record")
        s = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return s

    def bytes_(self) -> bytes | None:
        n = self.i32()
        if n < 0:
            return None
        if self.pos + n > len(self.data):
            raise SchemaError("bytes run past the record")
        b = bytes(self.data[self.pos:self.pos + n])
        self.pos += n
        return b


@dataclass(frozen=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupKey:
    group: str


@dataclass(frozen=True)
class OffsetValue:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int


@dataclass(frozen=True)
class MemberValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    state_timestamp: int
    members: tuple[MemberValue, ...]


def encode_offset_key(k: OffsetKey) -> bytes:
    return bytes(_Writer().i16(OFFSET_KEY_VERSION).string(k.group).string(k.topic).i32(k.partition).out)


def encode_group_key(k: GroupKey) -> bytes:
    return bytes(_Writer().i16(GROUP_KEY_VERSION).string(k.group).out)


def encode_offset_value(v: OffsetValue) -> bytes:
    return bytes(_Writer().i16(OFFSET_VALUE_VERSION).i64(v.offset).i32(v.leader_epoch)
                 .string(v.metadata).i64(v.commit_timestamp).out)


def encode_group_value(v: GroupValue) -> bytes:
    w = _Writer().i16(GROUP_VALUE_VERSION).string(v.protocol_type).i32(v.generation)
    w.string(v.protocol).string(v.leader).i64(v.state_timestamp).i32(len(v.members))
    for m in v.members:
        w.string(m.member_id).string(m.group_instance_id).string(m.client_id).string(m.client_host)
        w.i32(m.rebalance_timeout).i32(m.session_timeout).bytes_(m.subscription).bytes_(m.assignment)
    return bytes(w.out)


def decode_key(data: bytes) -> OffsetKey | GroupKey:
    r = _Reader(data)
    version = r.i16()
    if version in (0, 1):
        return OffsetKey(r.string() or "", r.string() or "", r.i32())
    if version == 2:
        return GroupKey(r.string() or "")
    raise SchemaError(f"unknown key version {version}")


def decode_offset_value(data: bytes) -> OffsetValue:
    r = _Reader(data)
    version = r.i16()
    offset = r.i64()
    epoch = r.i32() if version >= 3 else -1
    metadata = r.string() or ""
    ts = r.i64()
    if version not in (0, 1, 2, 3):
        raise SchemaError(f"unknown offset value version {version}")
    return OffsetValue(offset, epoch, metadata, ts)


def decode_group_value(data: bytes) -> GroupValue:
    r = _Reader(data)
    version = r.i16()
    if version not in (0, 1, 2, 3):
        raise SchemaError(f"unknown group value version {version}")
    ptype = r.string() or ""
    gen = r.i32()
    proto = r.string()
    leader = r.string()
    ts = r.i64() if version >= 2 else -1
    members = []
    for _ in range(r.i32()):
        mid = r.string() or ""
        inst = r.string() if version >= 3 else None
        cid = r.string() or ""
        host = r.string() or ""
        rto = r.i32() if version >= 1 else -1
        sto = r.i32()
        members.append(MemberValue(mid, inst, cid, host, rto, sto, r.bytes_() or b"", r.bytes_() or b""))
    return GroupValue(ptype, gen, proto, leader, ts, tuple(members))
