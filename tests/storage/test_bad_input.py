"""Bad input to append: specific errors, files byte-identical afterwards."""

from __future__ import annotations

import struct

import pytest

from appliance.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    MessageTooLargeError,
)
from appliance.records import batch_layout as L

from .conftest import batch, cfg, open_log, snapshot_files


def _corrupt(b: bytes, off: int, new: bytes) -> bytes:
    return b[:off] + new + b[off + len(new):]


GOOD = batch(n=3)


@pytest.mark.parametrize("data,err,validate", [
    (_corrupt(GOOD, len(GOOD) - 3, b"\x00"), CorruptRecordError, True),          # wrong CRC
    (_corrupt(GOOD, L.MAGIC_OFFSET, b"\x01"), CorruptRecordError, True),          # wrong magic
    (_corrupt(GOOD, L.MAGIC_OFFSET, b"\x05"), CorruptRecordError, False),
    (GOOD[:-10], CorruptRecordError, True),                                        # length past buffer
    (GOOD[:-10], CorruptRecordError, False),
    (_corrupt(GOOD, L.BATCH_LENGTH_OFFSET, struct.pack(">i", 10**6)), CorruptRecordError, True),
    (b"", InvalidRecordError, True),
    (GOOD + GOOD, InvalidRecordError, True),                                       # offsets backwards
])
def test_rejected_and_nothing_written(log_path, data, err, validate):
    lg = open_log(log_path)
    lg.append(batch(n=2))
    before = snapshot_files(log_path)
    with pytest.raises(err):
        lg.append(data, validate=validate)
    assert snapshot_files(log_path) == before and lg.log_end_offset == 2


def test_count_mismatch(log_path):
    lg = open_log(log_path)
    before = snapshot_files(log_path)
    # recordsCount is covered by the CRC: fix the CRC so only the count is wrong
    import crc32c
    bad = bytearray(_corrupt(GOOD, L.RECORDS_COUNT_OFFSET, struct.pack(">i", 5)))
    struct.pack_into(">I", bad, L.CRC_OFFSET, crc32c.crc32c(bytes(bad[L.ATTRIBUTES_OFFSET:])))
    with pytest.raises(InvalidRecordError):
        lg.append(bytes(bad))
    assert snapshot_files(log_path) == before


def test_too_large_and_bad_timestamps(log_path, clock):
    lg = open_log(log_path, cfg(max_message_bytes=500,
                                message_timestamp_difference_max_ms=1000), clock)
    before = snapshot_files(log_path)
    with pytest.raises(MessageTooLargeError):
        lg.append(batch(n=3, value_size=400, ts=clock.now))
    with pytest.raises(MessageTooLargeError):
        lg.append(batch(n=3, value_size=400, ts=clock.now), validate=False)
    with pytest.raises(InvalidTimestampError):
        lg.append(batch(n=1, ts=clock.now - 5000))
    assert snapshot_files(log_path) == before
    assert lg.append(batch(n=1, ts=clock.now)).first_offset == 0


def test_replicated_offsets_must_not_go_backwards(log_path):
    lg = open_log(log_path)
    lg.append(batch(n=2, base_offset=0), assign_offsets=False)
    before = snapshot_files(log_path)
    with pytest.raises(InvalidRecordError):
        lg.append(batch(n=2, base_offset=1), assign_offsets=False)
    assert snapshot_files(log_path) == before
    assert lg.append(batch(n=2, base_offset=5), assign_offsets=False).first_offset == 5
    assert lg.log_end_offset == 7
