"""Append/read round trips, offset assignment, slice boundaries, out-of-range reads."""

from __future__ import annotations

import os

import crc32c
import pytest

from appliance.errors import OffsetOutOfRangeError
from appliance.records import batch_layout as L
from appliance.records.batch import decode_records, iter_batches, read_header, validate_records
from appliance.records.record_types import Compression

from .conftest import all_records, batch, cfg, open_log


def test_round_trip_assigns_offsets_and_keeps_crc(log_path, clock):
    lg = open_log(log_path, clock=clock)
    infos = [lg.append(batch(n=4, ts=1000 + i)) for i in range(10)]
    assert [i.first_offset for i in infos] == list(range(0, 40, 4))
    assert infos[-1].last_offset == 39 and lg.log_end_offset == 40
    # the high watermark is the Partition's rule (broker/disk/partition.py), not the log's: an
    # append leaves it; a value set is clamped to the log end
    assert lg.high_watermark == 0
    lg.high_watermark = 1000
    assert lg.high_watermark == 40
    data = lg.read_bytes(0, 1 << 20)
    headers = validate_records(data)  # every CRC still valid after the baseOffset rewrite
    assert [h.base_offset for h in headers] == list(range(0, 40, 4))
    for pos, h in iter_batches(data):
        assert h.crc == crc32c.crc32c(data[pos + L.ATTRIBUTES_OFFSET:pos + h.size])
    recs = all_records(lg)
    assert [r.offset for r in recs] == list(range(40))
    assert recs[5].value == b"B" * 50


def test_client_base_offsets_are_ignored(log_path):
    lg = open_log(log_path)
    lg.append(batch(n=2, base_offset=1234))
    info = lg.append(batch(n=2, base_offset=7))
    assert (info.first_offset, info.last_offset) == (2, 3)
    assert [r.offset for r in all_records(lg)] == [0, 1, 2, 3]


def test_read_slices_end_on_batch_boundaries(log_path):
    lg = open_log(log_path)
    sizes = []
    for i in range(20):
        b = batch(n=2, ts=1000 + i, value_size=100 + i)
        sizes.append(len(b))
        lg.append(b)
    for max_bytes in (sizes[0], sizes[0] + sizes[1] - 1, sizes[0] + sizes[1], 3000, 10_000):
        s = lg.read(0, max_bytes)
        assert s.position == 0 and s.length <= max(max_bytes, sizes[0])
        # The slice is a whole number of batches: it parses completely.
        data = os.pread(s.fd, s.length, s.position)
        total = sum(h.size for _, h in iter_batches(data))
        assert total == s.length
        # and it is the largest whole number that fits
        acc, k = 0, 0
        while k < len(sizes) and acc + sizes[k] <= max_bytes:
            acc += sizes[k]
            k += 1
        assert s.length == max(acc, sizes[0])


def test_min_one_batch_larger_than_max_bytes(log_path):
    lg = open_log(log_path)
    big = batch(n=3, value_size=5000)
    lg.append(big)
    s = lg.read(0, 100)
    assert s.length == len(big)
    assert lg.read(0, 100, min_one_batch=False) is None


def test_max_offset_bound_and_nothing_yet(log_path):
    lg = open_log(log_path)
    for _ in range(5):
        lg.append(batch(n=2))
    s = lg.read(0, 1 << 20, max_offset=4)  # batches 0-1, 2-3 only
    assert [r.offset for r in decode_records(os.pread(s.fd, s.length, s.position))] == [0, 1, 2, 3]
    assert lg.read(4, 1 << 20, max_offset=4) is None
    assert lg.read(10, 1 << 20) is None  # offset == LEO: nothing yet
    # A bound inside a batch keeps that batch (its base is below the bound).
    s = lg.read(0, 1 << 20, max_offset=5)
    assert len(decode_records(os.pread(s.fd, s.length, s.position))) == 6


def test_offset_out_of_range(log_path):
    lg = open_log(log_path)
    lg.append(batch(n=2))
    lg.high_watermark = lg.log_end_offset  # committed (a one-broker Partition's rule)
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(3, 100)
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(-1, 100)
    lg.maybe_increment_log_start_offset(1)
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(0, 100)


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.LZ4, Compression.ZSTD, Compression.SNAPPY])
def test_read_in_the_middle_of_a_compressed_batch(log_path, codec):
    lg = open_log(log_path)
    lg.append(batch(n=10, compression=codec))
    lg.append(batch(n=10, compression=codec))
    s = lg.read(14, 1 << 20)
    assert s.first_offset == 10 and s.position == lg.read(10, 1).position
    recs = decode_records(os.pread(s.fd, s.length, s.position))
    assert [r.offset for r in recs] == list(range(10, 20))


def test_many_batches_in_one_append_and_index_lookups(log_path):
    lg = open_log(log_path, cfg(index_interval_bytes=200))
    parts, off = [], 0
    for i in range(300):
        parts.append(batch(n=1 + i % 3, ts=1000 + i, base_offset=off))
        off += 1 + i % 3
    data = b"".join(parts)
    info = lg.append(data)
    assert info.num_batches == 300 and info.num_records == sum(1 + i % 3 for i in range(300))
    seg = lg.segments()[0].segment
    assert seg.offset_index.entries > 10
    # every offset resolves to the batch that holds it
    for off in range(0, lg.log_end_offset):
        s = lg.read(off, 1)
        h = read_header(os.pread(s.fd, L.HEADER_SIZE, s.position))
        assert h.base_offset <= off <= h.last_offset


def test_offset_for_timestamp(log_path):
    lg = open_log(log_path, cfg(index_interval_bytes=100))
    for i in range(50):
        lg.append(batch(n=2, ts=10_000 + 10 * i))
    assert lg.offset_for_timestamp(0) == (0, 10_000)
    assert lg.offset_for_timestamp(10_000) == (0, 10_000)
    assert lg.offset_for_timestamp(10_001) == (2, 10_010)
    assert lg.offset_for_timestamp(10_250) == (50, 10_250)
    assert lg.offset_for_timestamp(10_490) == (98, 10_490)
    assert lg.offset_for_timestamp(10_491) is None
    assert lg.offset_for_timestamp(-2) == (0, -1)
    assert lg.offset_for_timestamp(-1) == (100, -1)


def test_log_append_time(log_path, clock):
    lg = open_log(log_path, cfg(message_timestamp_type="LogAppendTime"), clock)
    info = lg.append(batch(n=3, ts=5), log_append_time_ms=123_456)
    assert info.log_append_time == 123_456 and info.max_timestamp == 123_456
    data = lg.read_bytes(0, 1 << 20)
    h = validate_records(data)[0]  # CRC recomputed
    assert h.max_timestamp == 123_456 and h.attributes & L.TIMESTAMP_TYPE_BIT
    assert all(r.timestamp == 123_456 for r in decode_records(data))
    info = lg.append(batch(n=1))
    assert info.log_append_time == clock.now


def test_writable_buffer_rewritten_in_place_readonly_copied(log_path):
    lg = open_log(log_path)
    lg.append(batch())
    b = batch()
    buf = bytearray(b)
    lg.append(buf)
    assert read_header(buf).base_offset == 3
    lg.append(b)
    assert read_header(b).base_offset == 0  # bytes untouched
