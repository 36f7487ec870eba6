"""Kafka's legacy message layout (magic 0 and 1, big-endian), declared once.

Each message: ``offset int64, messageSize int32, crc uint32, magic int8, attributes int8``, then
``timestamp int64`` for magic 1 only, then key and value as ``int32 length (-1 null), bytes``.
messageSize counts the bytes after itself; the CRC (zlib's CRC32) covers magic to the end.
The field tables are the single declaration; structs, sizes and byte offsets are derived. The
offsets are plain ``int`` module constants, so numba kernels read them as compile-time constants.
Names follow Kafka's ``LegacyRecord`` so they are easy to cross-check against it.
"""

from __future__ import annotations

import struct

__all__ = [
    "HEADER_FIELDS_V0", "HEADER_FIELDS_V1", "HEADER_V0", "HEADER_V1", "HEADER_SIZE_V0",
    "HEADER_SIZE_V1", "LOG_OVERHEAD", "CRC_OFFSET", "MAGIC_OFFSET", "ATTRIBUTES_OFFSET",
    "TIMESTAMP_OFFSET", "LENGTH_SIZE", "CODEC_MASK", "TIMESTAMP_TYPE_BIT", "NO_TIMESTAMP",
    "MAX_OVERHEAD",
]

#: (field name, struct code) in wire order, magic 0.
HEADER_FIELDS_V0: tuple[tuple[str, str], ...] = (
    ("offset", "q"),
    ("message_size", "i"),  # bytes after this field
    ("crc", "I"),           # CRC32 of bytes [MAGIC_OFFSET, end of message)
    ("magic", "b"),
    ("attributes", "b"),
)
#: Magic 1 adds the timestamp after the attributes.
HEADER_FIELDS_V1: tuple[tuple[str, str], ...] = (*HEADER_FIELDS_V0, ("timestamp", "q"))

HEADER_V0 = struct.Struct(">" + "".join(code for _, code in HEADER_FIELDS_V0))
HEADER_V1 = struct.Struct(">" + "".join(code for _, code in HEADER_FIELDS_V1))
HEADER_SIZE_V0: int = HEADER_V0.size
HEADER_SIZE_V1: int = HEADER_V1.size


def _offset_of(name: str) -> int:
    pos = 0
    for field, code in HEADER_FIELDS_V1:
        if field == name:
            return pos
        pos += struct.calcsize(">" + code)
    raise KeyError(name)


#: offset + messageSize: the bytes messageSize does not count.
LOG_OVERHEAD: int = _offset_of("crc")
CRC_OFFSET: int = _offset_of("crc")
MAGIC_OFFSET: int = _offset_of("magic")
ATTRIBUTES_OFFSET: int = _offset_of("attributes")
TIMESTAMP_OFFSET: int = _offset_of("timestamp")
#: The int32 length before a key or a value.
LENGTH_SIZE: int = struct.calcsize(">i")
#: The most bytes a message adds around its key and value (magic 1: header plus two lengths).
MAX_OVERHEAD: int = HEADER_SIZE_V1 + 2 * LENGTH_SIZE

# Attribute bits (Kafka's LegacyRecord).
CODEC_MASK: int = 0x07
TIMESTAMP_TYPE_BIT: int = 0x08  # LogAppendTime; magic 1 only
#: Magic 0 carries no timestamp; readers see this.
NO_TIMESTAMP: int = -1

# Guard against an accidental edit of the field tables: these are Kafka's wire positions.
assert (LOG_OVERHEAD, CRC_OFFSET, MAGIC_OFFSET, ATTRIBUTES_OFFSET, TIMESTAMP_OFFSET,
        HEADER_SIZE_V0, HEADER_SIZE_V1) == (12, 12, 16, 17, 18, 18, 26)
