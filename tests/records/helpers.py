"""Shared helpers for the records tests: build and read batches with kafka-python's own code."""

from __future__ import annotations

from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

CODECS = (0, 1, 2, 3, 4)
LEGACY_CODECS = (0, 1, 2, 3)


def sample_rows(n: int = 40) -> list[tuple[int, int, bytes | None, bytes | None, list]]:
    """(offset, timestamp, key, value, headers) rows with nulls, empties, multi-byte varints."""
    rows = []
    for i in range(n):
        key = None if i % 5 == 0 else (b"" if i % 7 == 0 else b"key-%d" % i)
        value = None if i % 11 == 3 else bytes([i % 251]) * (i * 17)
        headers = [] if i % 2 else [(f"h{i}", b"x" * i), ("null", None), ("ünï", b"")]
        rows.append((i, 1_700_000_000_000 + i * 3 - (50 if i == 4 else 0), key, value, headers))
    return rows


def kp_build_v2(rows, codec: int, *, producer=(-1, -1, -1), transactional=False) -> bytes:
    b = DefaultRecordBatchBuilder(2, codec, transactional, producer[0], producer[1], producer[2],
                                  1 << 24)
    for off, ts, key, value, headers in rows:
        assert b.append(off, ts, key, value, headers) is not None
    return bytes(b.build())


def kp_read_v2(buf: bytes) -> list[tuple]:
    """(offset, timestamp, key, value, headers) of every record, via kafka-python's reader."""
    out = []
    mr = MemoryRecords(buf)
    while mr.has_next():
        batch = mr.next_batch()
        assert isinstance(batch, DefaultRecordBatch)
        assert batch.validate_crc()
        for r in batch:
            out.append((r.offset, r.timestamp, r.key, r.value, list(r.headers)))
    return out


def kp_build_legacy(rows, magic: int, codec: int) -> bytes:
    b = LegacyRecordBatchBuilder(magic, codec, 1 << 24)
    for off, ts, key, value, _ in rows:
        assert b.append(off, ts, key, value) is not None
    return bytes(b.build())


def kp_read_legacy(buf: bytes) -> list[tuple]:
    """(offset, timestamp, key, value) of every message, via kafka-python's reader."""
    out = []
    mr = MemoryRecords(buf)
    while mr.has_next():
        for r in mr.next_batch():
            assert r.validate_crc()
            out.append((r.offset, r.timestamp, r.key, r.value))
    return out
