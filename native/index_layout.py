"""Kafka index file entry layouts (big-endian, fixed width), declared once.

- offset index (``.index``): ``relativeOffset int32, position int32`` — 8 bytes.
- time index (``.timeindex``): ``timestamp int64, relativeOffset int32`` — 12 bytes.

Sizes and in-entry field offsets are derived from the structs; the ints are usable in numba code.
"""

from __future__ import annotations

import struct

__all__ = [
    "OFFSET_INDEX_ENTRY", "OFFSET_INDEX_ENTRY_SIZE", "OFFSET_INDEX_KEY_OFFSET",
    "OFFSET_INDEX_POSITION_OFFSET",
    "TIME_INDEX_ENTRY", "TIME_INDEX_ENTRY_SIZE", "TIME_INDEX_KEY_OFFSET",
    "TIME_INDEX_OFFSET_OFFSET", "WARM_SECTION_BYTES",
]

#: relativeOffset (key), position
OFFSET_INDEX_ENTRY = struct.Struct(">ii")
OFFSET_INDEX_ENTRY_SIZE: int = OFFSET_INDEX_ENTRY.size
OFFSET_INDEX_KEY_OFFSET: int = 0
OFFSET_INDEX_POSITION_OFFSET: int = struct.calcsize(">i")

#: timestamp (key), relativeOffset
TIME_INDEX_ENTRY = struct.Struct(">qi")
TIME_INDEX_ENTRY_SIZE: int = TIME_INDEX_ENTRY.size
TIME_INDEX_KEY_OFFSET: int = 0
TIME_INDEX_OFFSET_OFFSET: int = struct.calcsize(">q")

#: Kafka's AbstractIndex searches the last this-many bytes of entries first: those pages are
#: the ones appends and tailing consumers touch, so they are most likely resident.
WARM_SECTION_BYTES: int = 8192
