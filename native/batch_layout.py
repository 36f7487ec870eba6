"""Kafka RecordBatch v2 header layout (big-endian), declared once.

The field table :data:`HEADER_FIELDS` is the single declaration; :data:`HEADER_STRUCT`, the
byte offsets (``*_OFFSET``) and :data:`HEADER_SIZE` are derived from it. The offsets are plain
``int`` module constants, so numba kernels read them as compile-time constants.

Names follow Kafka's ``DefaultRecordBatch`` so they are easy to cross-check against it.
"""

from __future__ import annotations

import struct

import numpy as np

__all__ = [
    "HEADER_FIELDS", "HEADER_STRUCT", "HEADER_DTYPE", "HEADER_SIZE", "FIELD_OFFSETS",
    "BASE_OFFSET_OFFSET", "LENGTH_OFFSET", "PARTITION_LEADER_EPOCH_OFFSET", "MAGIC_OFFSET",
    "CRC_OFFSET", "ATTRIBUTES_OFFSET", "LAST_OFFSET_DELTA_OFFSET", "BASE_TIMESTAMP_OFFSET",
    "MAX_TIMESTAMP_OFFSET", "PRODUCER_ID_OFFSET", "PRODUCER_EPOCH_OFFSET",
    "BASE_SEQUENCE_OFFSET", "RECORDS_COUNT_OFFSET", "RECORDS_OFFSET",
    "LOG_OVERHEAD", "MIN_BATCH_LENGTH", "CRC_START", "CURRENT_MAGIC",
    "COMPRESSION_CODEC_MASK", "TIMESTAMP_TYPE_MASK", "TRANSACTIONAL_FLAG_MASK",
    "CONTROL_FLAG_MASK", "DELETE_HORIZON_FLAG_MASK",
]

#: (field name, struct code) in wire order. The only place the layout is written down.
HEADER_FIELDS: tuple[tuple[str, str], ...] = (
    ("base_offset", "q"),
    ("batch_length", "i"),  # bytes after this field: total batch size = LOG_OVERHEAD + this
    ("partition_leader_epoch", "i"),
    ("magic", "b"),
    ("crc", "I"),  # CRC32C of bytes [CRC_START, end of batch)
    ("attributes", "h"),
    ("last_offset_delta", "i"),
    ("base_timestamp", "q"),
    ("max_timestamp", "q"),
    ("producer_id", "q"),
    ("producer_epoch", "h"),
    ("base_sequence", "i"),
    ("records_count", "i"),
)

#: Packs/unpacks the whole 61-byte header, fields in :data:`HEADER_FIELDS` order.
HEADER_STRUCT = struct.Struct(">" + "".join(code for _, code in HEADER_FIELDS))


def _field_offsets() -> dict[str, int]:
    offsets: dict[str, int] = {}
    pos = 0
    for name, code in HEADER_FIELDS:
        offsets[name] = pos
        pos += struct.calcsize(">" + code)
    return offsets


#: Byte offset of each header field, by name.
FIELD_OFFSETS: dict[str, int] = _field_offsets()

BASE_OFFSET_OFFSET: int = FIELD_OFFSETS["base_offset"]
LENGTH_OFFSET: int = FIELD_OFFSETS["batch_length"]
PARTITION_LEADER_EPOCH_OFFSET: int = FIELD_OFFSETS["partition_leader_epoch"]
MAGIC_OFFSET: int = FIELD_OFFSETS["magic"]
CRC_OFFSET: int = FIELD_OFFSETS["crc"]
ATTRIBUTES_OFFSET: int = FIELD_OFFSETS["attributes"]
LAST_OFFSET_DELTA_OFFSET: int = FIELD_OFFSETS["last_offset_delta"]
BASE_TIMESTAMP_OFFSET: int = FIELD_OFFSETS["base_timestamp"]
MAX_TIMESTAMP_OFFSET: int = FIELD_OFFSETS["max_timestamp"]
PRODUCER_ID_OFFSET: int = FIELD_OFFSETS["producer_id"]
PRODUCER_EPOCH_OFFSET: int = FIELD_OFFSETS["producer_epoch"]
BASE_SEQUENCE_OFFSET: int = FIELD_OFFSETS["base_sequence"]
RECORDS_COUNT_OFFSET: int = FIELD_OFFSETS["records_count"]

#: Size of the fixed header; records start right after it.
HEADER_SIZE: int = HEADER_STRUCT.size
#: The same header as a numpy record (big-endian fields by name, no padding): many headers
#: gathered from a buffer at once are read through it.
HEADER_DTYPE = np.dtype([(name, ">" + code) for name, code in HEADER_FIELDS])
assert HEADER_DTYPE.itemsize == HEADER_SIZE
RECORDS_OFFSET: int = HEADER_SIZE
#: baseOffset + batchLength: the bytes not counted by batchLength.
LOG_OVERHEAD: int = LENGTH_OFFSET + struct.calcsize(">i")
#: Smallest valid batchLength (a header with no records).
MIN_BATCH_LENGTH: int = HEADER_SIZE - LOG_OVERHEAD
#: The CRC covers from the attributes field to the end of the batch.
CRC_START: int = ATTRIBUTES_OFFSET
CURRENT_MAGIC: int = 2

# Attribute bits (Kafka DefaultRecordBatch).
COMPRESSION_CODEC_MASK: int = 0x07
TIMESTAMP_TYPE_MASK: int = 0x08
TRANSACTIONAL_FLAG_MASK: int = 0x10
CONTROL_FLAG_MASK: int = 0x20
DELETE_HORIZON_FLAG_MASK: int = 0x40

# Guard against an accidental edit of the field table: these are Kafka's wire positions.
assert (HEADER_SIZE, LOG_OVERHEAD, MAGIC_OFFSET, CRC_OFFSET, RECORDS_COUNT_OFFSET) == (
    61, 12, 16, 17, 57,
)
