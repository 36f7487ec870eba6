"""Real Kafka v2 RecordBatches for the tests, built with kafka-python's own builder."""

from __future__ import annotations

import struct

from kafka.record.default_records import DefaultRecordBatchBuilder

from native.batch_layout import BASE_OFFSET_OFFSET

__all__ = ["make_batch", "make_log"]


def make_batch(base_offset: int, n_records: int = 3, value_size: int = 50,
               first_ts: int = 1_700_000_000_000, compression: int = 0) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=compression, is_transactional=False, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=1 << 24,
    )
    for i in range(n_records):
        value = bytes((base_offset + i + j) & 0xFF for j in range(value_size))
        builder.append(i, timestamp=first_ts + 7 * i, key=b"k%d" % i, value=value, headers=[])
    batch = bytearray(builder.build())
    # The producer leaves baseOffset 0 for the broker to assign; it is outside the CRC.
    struct.pack_into(">q", batch, BASE_OFFSET_OFFSET, base_offset)
    return bytes(batch)


def make_log(n_batches: int, records_per_batch: int = 3, value_size: int = 50,
             first_offset: int = 0) -> tuple[bytes, list[bytes]]:
    batches = []
    offset = first_offset
    for i in range(n_batches):
        batches.append(make_batch(offset, records_per_batch, value_size, 1_700_000_000_000 + i))
        offset += records_per_batch
    return b"".join(batches), batches
