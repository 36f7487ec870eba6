"""The RecordBatch v2 header layout, declared once as a field table.

Every offset and size used by :mod:`appliance.records.batch` is derived from :data:`FIELDS`
so the layout cannot drift between readers and writers. Big-endian, no padding.
"""

from __future__ import annotations

import struct

__all__ = [
    "FIELDS", "HEADER_FORMAT", "HEADER_STRUCT", "HEADER_SIZE", "OFFSETS", "LOG_OVERHEAD",
    "MIN_BATCH_LENGTH", "BASE_OFFSET_OFFSET", "BATCH_LENGTH_OFFSET", "PARTITION_LEADER_EPOCH_OFFSET",
    "MAGIC_OFFSET", "CRC_OFFSET", "ATTRIBUTES_OFFSET", "LAST_OFFSET_DELTA_OFFSET",
    "BASE_TIMESTAMP_OFFSET", "MAX_TIMESTAMP_OFFSET", "PRODUCER_ID_OFFSET", "PRODUCER_EPOCH_OFFSET",
    "BASE_SEQUENCE_OFFSET", "RECORDS_COUNT_OFFSET",
    "COMPRESSION_MASK", "TIMESTAMP_TYPE_BIT", "TRANSACTIONAL_BIT", "CONTROL_BIT",
]

# (field name, struct code) in wire order.
FIELDS: tuple[tuple[str, str], ...] = (
    ("base_offset", "q"),
    ("batch_length", "i"),
    ("partition_leader_epoch", "i"),
    ("magic", "b"),
    ("crc", "I"),
    ("attributes", "h"),
    ("last_offset_delta", "i"),
    ("base_timestamp", "q"),
    ("max_timestamp", "q"),
    ("producer_id", "q"),
    ("producer_epoch", "h"),
    ("base_sequence", "i"),
    ("records_count", "i"),
)

HEADER_FORMAT = ">" + "".join(code for _, code in FIELDS)
HEADER_STRUCT = struct.Struct(HEADER_FORMAT)
HEADER_SIZE = HEADER_STRUCT.size


def _offsets() -> dict[str, int]:
    out: dict[str, int] = {}
    fmt = ">"
    for name, code in FIELDS:
        out[name] = struct.calcsize(fmt)
        fmt += code
    return out


OFFSETS: dict[str, int] = _offsets()

BASE_OFFSET_OFFSET = OFFSETS["base_offset"]
BATCH_LENGTH_OFFSET = OFFSETS["batch_length"]
PARTITION_LEADER_EPOCH_OFFSET = OFFSETS["partition_leader_epoch"]
MAGIC_OFFSET = OFFSETS["magic"]
CRC_OFFSET = OFFSETS["crc"]
ATTRIBUTES_OFFSET = OFFSETS["attributes"]
LAST_OFFSET_DELTA_OFFSET = OFFSETS["last_offset_delta"]
BASE_TIMESTAMP_OFFSET = OFFSETS["base_timestamp"]
MAX_TIMESTAMP_OFFSET = OFFSETS["max_timestamp"]
PRODUCER_ID_OFFSET = OFFSETS["producer_id"]
PRODUCER_EPOCH_OFFSET = OFFSETS["producer_epoch"]
BASE_SEQUENCE_OFFSET = OFFSETS["base_sequence"]
RECORDS_COUNT_OFFSET = OFFSETS["records_count"]

# batchLength counts the bytes after itself, so a batch occupies batch_length + LOG_OVERHEAD.
LOG_OVERHEAD = BATCH_LENGTH_OFFSET + struct.calcsize(">i")
# The smallest legal batchLength: a header with no records.
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD

# attributes bits
COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20

assert HEADER_SIZE == 61 and MIN_BATCH_LENGTH == 49 and CRC_OFFSET == 17 and ATTRIBUTES_OFFSET == 21
