"""Reading one stored entry whatever its format: a RecordBatch v2, or a legacy magic 0/1 message
(a compressed wrapper with its inner messages), as a segment of a topic stored in a pre-0.11
message format holds them (possibly both, after a format change).

The magic byte sits at byte 16 in all three formats, after offset (8) and length (4) and the
4-byte CRC (legacy) or partitionLeaderEpoch (v2), so readers dispatch on it. Stateless,
thread-safe.
"""

from __future__ import annotations

from typing import Any

from appliance.errors import CorruptRecordError
from appliance.records.batch import decode_batch
from appliance.records.compression import DEFAULT_MAX_DECOMPRESSED
from appliance.records.format_version import magic_of
from appliance.records.legacy import iter_entries
from appliance.records.record_types import Record
from native.batch_layout import CURRENT_MAGIC, LENGTH_OFFSET, LOG_OVERHEAD, MAGIC_OFFSET

__all__ = ["entry_magic", "has_legacy_entry", "decode_stored", "stored_legacy_magic"]


def entry_magic(buf: Any, pos: int = 0) -> int:
    """The magic byte of the entry at ``pos``. Raises CorruptRecordError if it is not there."""
    if pos + MAGIC_OFFSET >= len(buf):
        raise CorruptRecordError(f"entry at byte {pos} is too short to carry its magic")
    return buf[pos + MAGIC_OFFSET]


def has_legacy_entry(buf: Any) -> bool:
    """Whether the first entry of ``buf`` is a magic 0/1 message (a replicated legacy log)."""
    return len(buf) > MAGIC_OFFSET and buf[MAGIC_OFFSET] < CURRENT_MAGIC


def decode_stored(buf: Any, pos: int = 0, *,
                  max_decompressed: int = DEFAULT_MAX_DECOMPRESSED) -> list[Record]:
    """The records of the one entry at ``pos`` (absolute offsets; magic 0: timestamp -1).

    Raises CorruptRecordError (bad length, CRC, magic) and what the format's decoder raises."""
    if entry_magic(buf, pos) == CURRENT_MAGIC:
        return list(decode_batch(buf, pos, max_decompressed=max_decompressed)[1])
    if pos + LOG_OVERHEAD > len(buf):
        raise CorruptRecordError(f"entry at byte {pos} is truncated")
    size = int.from_bytes(buf[pos + LENGTH_OFFSET:pos + LOG_OVERHEAD], "big", signed=True)
    end = pos + LOG_OVERHEAD + size
    if size < 0 or end > len(buf):
        raise CorruptRecordError(f"entry at byte {pos} runs past the buffer")
    out: list[Record] = []
    for entry in iter_entries(memoryview(buf)[pos:end], max_decompressed=max_decompressed):
        out.extend(Record(m.offset, m.timestamp, m.key, m.value) for m in entry.messages)
    return out


def stored_legacy_magic(config: Any) -> int | None:
    """The magic a topic's ``message.format.version`` stores (0 or 1), None for v2 (0.11+ or
    unset). ``config`` is a TopicConfig (or any object with ``message_format_version``)."""
    version = getattr(config, "message_format_version", None)
    if not version:
        return None
    magic = magic_of(str(version))
    return magic if magic < CURRENT_MAGIC else None
