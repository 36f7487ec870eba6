"""The "consumer" embedded protocol's subscription bytes (ConsumerProtocolSubscription), and the
StickyAssignor's user data, as Kafka's clients write them.

Subscription: int16 version, array<string> topics, nullable bytes user_data; v1+ adds
owned_partitions array<(string topic, array<int32>)>; v2+ int32 generation_id; v3+ nullable
string rack_id. We write v1 and read v0-v3 (later versions only append fields).

StickyAssignorUserData v1 (Kafka's StickyAssignor, before owned_partitions existed): array
<(string topic, array<int32> partitions)> previous_assignment, int32 generation.

Assignments use :mod:`appliance.coordinator.consumer_protocol`.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

__all__ = ["Subscription", "encode_subscription", "decode_subscription", "encode_sticky_user_data",
           "decode_sticky_user_data"]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

Owned = list[tuple[str, list[int]]]


class Subscription(NamedTuple):
    version: int
    topics: list[str]
    user_data: bytes | None
    owned_partitions: Owned
    generation_id: int = -1


def _string(out: bytearray, s: str) -> None:
    raw = s.encode()
    out += _I16.pack(len(raw)) + raw


def _topic_partitions(out: bytearray, items: Owned) -> None:
    out += _I32.pack(len(items))
    for topic, parts in items:
        _string(out, topic)
        out += _I32.pack(len(parts)) + struct.pack(f">{len(parts)}i", *parts)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def at_end(self) -> bool:
        return self.pos >= len(self.data)

    def i16(self) -> int:
        (v,) = _I16.unpack_from(self.data, self.pos)
        self.pos += 2
        return v

    def i32(self) -> int:
        (v,) = _I32.unpack_from(self.data, self.pos)
        self.pos += 4
        return v

    def count(self, unit: int) -> int:
        n = self.i32()
        if n < -1 or n * unit > len(self.data) - self.pos:
            raise ValueError(f"array of {n} at byte {self.pos - 4} runs past the end")
        return n

    def string(self, nullable: bool = False) -> str | None:
        n = self.i16()
        if n < 0:
            if nullable:
                return None
            raise ValueError(f"null string at byte {self.pos - 2}")
        if n > len(self.data) - self.pos:
            raise ValueError(f"string of {n} bytes at byte {self.pos - 2} runs past the end")
        s = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return s

    def nbytes(self) -> bytes | None:
        n = self.count(1)
        if n < 0:
            return None
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return bytes(b)

    def topic_partitions(self) -> Owned:
        out: Owned = []
        for _ in range(max(self.count(6), 0)):
            topic = self.string()
            n = max(self.count(4), 0)
            parts = list(struct.unpack_from(f">{n}i", self.data, self.pos))
            self.pos += 4 * n
            out.append((topic, parts))  # type: ignore[arg-type]
        return out


def encode_subscription(topics: list[str], user_data: bytes | None = None, owned_partitions: Owned | None = None,
                        version: int = 1) -> bytes:
    """Subscription bytes (version 0 or 1)."""
    if version not in (0, 1):
        raise ValueError(f"we write subscription versions 0 and 1, not {version}")
    out = bytearray(_I16.pack(version))
    out += _I32.pack(len(topics))
    for t in topics:
        _string(out, t)
    if user_data is None:
        out += _I32.pack(-1)
    else:
        out += _I32.pack(len(user_data)) + user_data
    if version >= 1:
        _topic_partitions(out, owned_partitions or [])
    return bytes(out)


def decode_subscription(data: bytes) -> Subscription:
    """Raises ValueError for bytes that are not a consumer subscription."""
    r = _Reader(bytes(data))
    try:
        version = r.i16()
        if version < 0:
            raise ValueError(f"negative version {version}")
        topics = [r.string() for _ in range(max(r.count(2), 0))]
        user_data = r.nbytes()
        owned: Owned = []
        generation = -1
        if version >= 1 and not r.at_end():
            owned = r.topic_partitions()
        if version >= 2 and not r.at_end():
            generation = r.i32()
        return Subscription(version, topics, user_data, owned, generation)  # type: ignore[arg-type]
    except (struct.error, UnicodeDecodeError) as e:
        raise ValueError(f"not a consumer subscription: {e}") from e


def encode_sticky_user_data(assignment: Owned, generation: int) -> bytes:
    out = bytearray()
    _topic_partitions(out, assignment)
    out += _I32.pack(generation)
    return bytes(out)


def decode_sticky_user_data(data: bytes | None) -> tuple[Owned, int]:
    """(previous assignment, generation; -1 for v0 data without one). Raises ValueError."""
    if not data:
        return [], -1
    r = _Reader(bytes(data))
    try:
        owned = r.topic_partitions()
        generation = r.i32() if not r.at_end() else -1
        return owned, generation
    except (struct.error, UnicodeDecodeError) as e:
        raise ValueError(f"not StickyAssignor user data: {e}") from e
