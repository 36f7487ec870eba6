"""The common Produce request read straight from its bytes, and its success answer written from
a template: one topic, one partition, one records field, versions 3-9.

Why: a one-record produce spent more of its network-worker Python in the generic decoder and
encoder (schema walk, a Request object, the body's generated classes, a response body built of
three nested objects) than in anything else it does (issue 15). This module reads the one shape
nearly every producer sends (librdkafka, the Java client and kafka-python send one topic and
one partition per request when a single record is waiting) and answers it with one struct pack
between two precomputed byte strings.

Anything else is :data:`None` here and goes to the generic path (``connection.py``), which gives
every malformed request its error: this module never raises on bad bytes and decides nothing
beyond "this is exactly that shape". The answers are byte-for-byte what the generic encoder
writes for the same values (``tests/protocol/test_produce_shape.py`` checks every version).

Pure functions and immutable tables: thread-safe; no I/O.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from appliance.protocol.errors import ProtocolDecodeError
from appliance.protocol.types import encode_uvarint, uvarint_at

__all__ = ["ProduceShape", "parse_produce", "ProduceAnswer", "answer_template", "MIN_VERSION",
           "MAX_VERSION", "FLEXIBLE_FROM"]

MIN_VERSION = 3  # the first version with a transactional_id (v0-2 are rare and differ)
MAX_VERSION = 9  # Produce.MAX_VERSION; kept equal by the protocol tests
FLEXIBLE_FROM = 9  # Produce.FLEXIBLE = "9+": compact strings/arrays and tagged fields

_HEAD = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client_id length
_H = struct.Struct(">h")
_ACKS_TIMEOUT = struct.Struct(">hi")
_I = struct.Struct(">i")
_II = struct.Struct(">ii")


class ProduceShape(NamedTuple):
    """The fields of a Produce request of the common shape; ``records`` is a view of the frame."""

    api_version: int
    correlation_id: int
    acks: int
    timeout_ms: int
    topic: bytes  # the name's UTF-8 bytes (the caller decodes and caches)
    partition: int
    records: memoryview


def _uvarint(frame: bytes, pos: int) -> tuple[int, int]:
    """uvarint_at, with (-1, pos) for a varint that is truncated or too long: not this shape."""
    try:
        return uvarint_at(frame, pos)
    except (IndexError, ProtocolDecodeError):
        return -1, pos


def parse_produce(frame: bytes) -> ProduceShape | None:
    """``frame`` (one whole request, its 4 size bytes excluded) read as a Produce v3-9 of one
    topic and one partition with a non-null records field and no tagged fields, or None when it
    is anything else (other API, version or shape; truncated or trailing bytes)."""
    end = len(frame)
    if end < 10:
        return None
    api_key, version, correlation_id, client_len = _HEAD.unpack_from(frame, 0)
    if api_key != 0 or not MIN_VERSION <= version <= MAX_VERSION:
        return None
    pos = 10 + (client_len if client_len > 0 else 0)
    if client_len < -1 or pos > end:
        return None
    if version < FLEXIBLE_FROM:
        if pos + 2 > end:
            return None
        (tid_len,) = _H.unpack_from(frame, pos)
        pos += 2 + (tid_len if tid_len > 0 else 0)
        if tid_len < -1 or pos + 12 > end:
            return None
        acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(frame, pos)
        (topics,) = _I.unpack_from(frame, pos + 6)
        pos += 10
        if topics != 1:
            return None
        (name_len,) = _H.unpack_from(frame, pos)
        name_at = pos + 2
        pos = name_at + name_len
        if name_len <= 0 or pos + 12 > end:
            return None
        topic = bytes(frame[name_at:pos])
        partitions, partition = _II.unpack_from(frame, pos)
        (size,) = _I.unpack_from(frame, pos + 8)
        pos += 12
        if partitions != 1 or size <= 0 or pos + size != end:
            return None
        return ProduceShape(version, correlation_id, acks, timeout_ms, topic, partition,
                            memoryview(frame)[pos:end])
    # flexible: header v2 (tagged fields after the client id), compact lengths (n + 1)
    if pos >= end or frame[pos] != 0:
        return None
    tid_len, pos = _uvarint(frame, pos + 1)
    if tid_len < 0:
        return None
    pos += tid_len - 1 if tid_len > 0 else 0
    if pos + 7 > end:
        return None
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(frame, pos)
    pos += 6
    topics, pos = _uvarint(frame, pos)
    if topics != 2:
        return None
    name_len, name_at = _uvarint(frame, pos)
    pos = name_at + name_len - 1
    if name_len <= 1 or pos + 1 > end:
        return None
    topic = bytes(frame[name_at:pos])
    partitions, pos = _uvarint(frame, pos)
    if partitions != 2 or pos + 4 > end:
        return None
    (partition,) = _I.unpack_from(frame, pos)
    size, pos = _uvarint(frame, pos + 4)
    size -= 1
    # then the records, and three empty tag sections: partition, topic, body
    if size <= 0 or pos + size + 3 != end or frame[end - 3:end] != b"\x00\x00\x00":
        return None
    return ProduceShape(version, correlation_id, acks, timeout_ms, topic, partition,
                        memoryview(frame)[pos:pos + size])


_SIZE_CORR = struct.Struct(">ii")
_PART_V3 = struct.Struct(">hqq")  # error_code, base_offset, log_append_time_ms
_PART_V5 = struct.Struct(">hqqq")  # + log_start_offset


class ProduceAnswer:
    """The success answer of one (version, topic, partition): :meth:`encode` fills in the
    correlation id and the offsets. Immutable once built."""

    __slots__ = ("_prefix", "_suffix", "_part", "_five", "_size")

    def __init__(self, version: int, topic: bytes, partition: int) -> None:
        flexible = version >= FLEXIBLE_FROM
        if flexible:  # header v1: a tag section after the correlation id
            prefix = (b"\x00" + encode_uvarint(2) + encode_uvarint(len(topic) + 1) + topic
                      + encode_uvarint(2) + _I.pack(partition))
            # record_errors (empty compact array), error_message (null), partition and topic
            # tags, throttle_time_ms, body tags
            suffix = b"\x01\x00\x00\x00" + _I.pack(0) + b"\x00"
        else:
            prefix = _I.pack(1) + _H.pack(len(topic)) + topic + _I.pack(1) + _I.pack(partition)
            suffix = (_I.pack(0) + _H.pack(-1) if version >= 8 else b"") + _I.pack(0)
        self._five = version >= 5
        self._part = _PART_V5 if self._five else _PART_V3
        self._prefix = prefix
        self._suffix = suffix
        # the frame's size: correlation id + prefix + partition fields + suffix
        self._size = 4 + len(prefix) + self._part.size + len(suffix)

    def encode(self, correlation_id: int, base_offset: int, log_append_time: int,
               log_start_offset: int) -> bytes:
        """The whole response frame (size prefix included) with error_code NONE."""
        if self._five:
            part = _PART_V5.pack(0, base_offset, log_append_time, log_start_offset)
        else:
            part = _PART_V3.pack(0, base_offset, log_append_time)
        return b"".join((_SIZE_CORR.pack(self._size, correlation_id), self._prefix, part,
                         self._suffix))


def answer_template(version: int, topic: bytes, partition: int) -> ProduceAnswer:
    """The success answer template of a Produce ``version`` (3-9) for one partition."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"Produce v{version} has no answer template (v{MIN_VERSION}-{MAX_VERSION})")
    return ProduceAnswer(version, topic, partition)
