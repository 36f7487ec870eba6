"""Value types shared by the v2 and legacy record codecs: codec and timestamp-type enums, Record."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

__all__ = ["Compression", "TimestampType", "Record", "Header"]


class Compression(IntEnum):
    """Codec ids in attributes bits 0-2 (same numbers in magic 0, 1 and 2; ZSTD is v2-only)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class TimestampType(IntEnum):
    """attributes bit 3: who stamped the records."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


Header = tuple[str, bytes | None]


@dataclass(frozen=True, slots=True)
class Record:
    """One record as a client sees it: absolute offset, absolute timestamp (ms; -1 = none)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
