"""Control batches: the transaction markers a partition's leader writes when a transaction ends
(KIP-98's end-transaction marker; Kafka's ``EndTransactionMarker`` and ``ControlRecordType``).

A marker is a v2 batch with the control (0x20) and transactional (0x10) attribute bits, the
producer's id and epoch, base sequence -1 (markers take no sequence), and one record whose key
is (version int16, type int16) and whose value is (version int16, coordinator epoch int32). The
two layouts are declared once here; consumers skip the batch and use it to end the producer's
transaction.

Pure functions; no state.
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import NamedTuple

from appliance.errors import CorruptRecordError
from appliance.records.batch import BatchHeader, build_batch, decode_batch

__all__ = [
    "ControlType", "TxnMarker", "CONTROL_KEY", "MARKER_VALUE", "build_marker", "parse_marker",
    "marker_of_record",
]


class ControlType(IntEnum):
    """A control record's type (its key's second field)."""

    ABORT = 0
    COMMIT = 1


#: The control record key: version, type (Kafka's ControlRecordType key schema, version 0).
CONTROL_KEY = struct.Struct(">hh")
#: The end-transaction marker value: version, coordinator epoch (EndTransactionMarker, v0).
MARKER_VALUE = struct.Struct(">hi")
_CONTROL_KEY_VERSION = 0
_MARKER_VALUE_VERSION = 0


class TxnMarker(NamedTuple):
    """One end-transaction marker as read from a control batch."""

    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int


def build_marker(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, *,
                 base_offset: int = 0, partition_leader_epoch: int = -1,
                 timestamp: int | None = None) -> bytes:
    """The control batch ending ``producer_id``'s transaction (COMMIT or ABORT)."""
    key = CONTROL_KEY.pack(_CONTROL_KEY_VERSION, ControlType.COMMIT if commit else ControlType.ABORT)
    value = MARKER_VALUE.pack(_MARKER_VALUE_VERSION, coordinator_epoch)
    return build_batch([(key, value)], base_offset=base_offset, base_timestamp=timestamp,
                       producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=-1,
                       partition_leader_epoch=partition_leader_epoch, is_transactional=True,
                       is_control=True)


def marker_of_record(h: BatchHeader, key: bytes | None, value: bytes | None) -> TxnMarker | None:
    """The marker a control record holds; None for another control type (Kafka skips unknown
    ones). Raises CorruptRecordError for a key or value too short to read."""
    if key is None or len(key) < CONTROL_KEY.size:
        raise CorruptRecordError("control record without a valid key")
    _, ctype = CONTROL_KEY.unpack_from(key, 0)
    if ctype not in (ControlType.ABORT, ControlType.COMMIT):
        return None
    if value is None or len(value) < MARKER_VALUE.size:
        raise CorruptRecordError("end-transaction marker without a valid value")
    _, coordinator_epoch = MARKER_VALUE.unpack_from(value, 0)
    return TxnMarker(h.producer_id, h.producer_epoch, ctype == ControlType.COMMIT, coordinator_epoch)


def parse_marker(buf: bytes | bytearray | memoryview, pos: int = 0) -> TxnMarker | None:
    """The marker of the control batch at ``pos``; None if the batch is not a control batch or
    its record is of another control type. Raises as :func:`decode_batch` does."""
    h, records = decode_batch(buf, pos)
    if not h.is_control or not records:
        return None
    r = records[0]
    return marker_of_record(h, r.key, r.value)
