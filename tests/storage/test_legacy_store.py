"""A topic stored in a pre-0.11 message format (message.format.version 0.8.x-0.10.x): produce
becomes magic 0/1 entries in the segment, and every storage reader handles them - scan, recovery
after a crash, index rebuild, ListOffsets by time, retention, DeleteRecords, the cleaner and a
follower's append. On real files; the broker-level tests are in tests/generations/."""

from __future__ import annotations

import os

import pytest

from appliance.errors import (
    InvalidRecordError,
    InvalidTimestampError,
    UnsupportedCompressionTypeError,
    UnsupportedForMessageFormatError,
)
from appliance.records.batch import build_batch
from appliance.records.legacy import iter_entries
from appliance.records.record_types import Compression, Record, TimestampType
from appliance.records.stored import decode_stored
from appliance.storage.segment import INDEX_SUFFIX, TIME_INDEX_SUFFIX
from native.scan import ScanStop, scan_batches

from .conftest import Clock, cfg, open_log

T0 = 1_700_000_000_000


def _batch(first: int, n: int, codec=Compression.NONE, ts: int = T0, **kw) -> bytes:
    return build_batch([Record(i, ts + first + i, b"k%d" % (first + i), b"value-%d" % (first + i))
                        for i in range(n)], compression=codec, **kw)


def _stored(lg) -> tuple[list[int], list[Record]]:
    """Magic of every stored entry and every record, read the way a fetch reads the log."""
    data = lg.read_bytes(lg.log_start_offset, 1 << 24)
    r = scan_batches(data, legacy=True)
    assert r.stop_reason == ScanStop.END
    magics = [data[int(p) + 16] for p in r.positions]
    recs = [rec for p in r.positions for rec in decode_stored(data, int(p))]
    return magics, recs


@pytest.mark.parametrize(("version", "magic"), [("0.8.2", 0), ("0.10.2", 1)])
def test_produce_is_stored_in_the_topic_magic(log_path, version, magic):
    lg = open_log(log_path, cfg(message_format_version=version))
    infos = [lg.append(_batch(0, 3, c)) for c in
             (Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4)]
    assert [i.first_offset for i in infos] == [0, 3, 6, 9]
    assert lg.log_end_offset == 12
    magics, recs = _stored(lg)
    assert set(magics) == {magic} and len(magics) == 3 + 3  # 3 plain messages, 3 wrappers
    assert [r.offset for r in recs] == list(range(12))
    assert [r.key for r in recs] == [b"k%d" % i for i in range(3)] * 4
    assert [r.timestamp for r in recs] == ([-1] * 12 if magic == 0 else
                                           [T0 + i for i in range(3)] * 4)
    entries = list(iter_entries(lg.read_bytes(0, 1 << 20)))
    assert [e.compression for e in entries[3:]] == [Compression.GZIP, Compression.SNAPPY,
                                                     Compression.LZ4]
    lg.close()


def test_topic_compression_type_recompresses(log_path):
    lg = open_log(log_path, cfg(message_format_version="0.10.2", compression_type="gzip"))
    lg.append(_batch(0, 4))
    (entry,) = iter_entries(lg.read_bytes(0, 1 << 20))
    assert entry.compression == Compression.GZIP and len(entry.messages) == 4
    lg.close()


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.GZIP])
def test_log_append_time_magic_1(log_path, codec):
    clock = Clock(T0 + 99)
    lg = open_log(log_path, cfg(message_format_version="0.10.0",
                                message_timestamp_type="LogAppendTime"), clock)
    info = lg.append(_batch(0, 2, codec))
    assert info.log_append_time == T0 + 99
    entries = list(iter_entries(lg.read_bytes(0, 1 << 20)))
    assert len(entries) == (2 if codec == Compression.NONE else 1)
    assert {e.timestamp_type for e in entries} == {TimestampType.LOG_APPEND_TIME}
    assert [m.timestamp for e in entries for m in e.messages] == [T0 + 99] * 2
    lg.close()


def test_create_time_outside_the_allowed_difference_is_refused(log_path):
    lg = open_log(log_path, cfg(message_format_version="0.10.2",
                                message_timestamp_difference_max_ms=1000), Clock(T0))
    with pytest.raises(InvalidTimestampError):
        lg.append(_batch(0, 2, ts=T0 + 5000))
    assert lg.log_end_offset == 0 and lg.size_bytes == 0
    lg.close()


def test_headers_producer_ids_and_zstd_are_refused_and_nothing_written(log_path):
    lg = open_log(log_path, cfg(message_format_version="0.10.2"))
    lg.append(_batch(0, 1))
    size = lg.size_bytes
    with_headers = build_batch([Record(0, T0, b"k", b"v", ((("h", b"x"),)))])
    with pytest.raises(UnsupportedForMessageFormatError):
        lg.append(with_headers)
    with pytest.raises(UnsupportedForMessageFormatError):
        lg.append(build_batch([(b"k", b"v")], producer_id=7, producer_epoch=0, base_sequence=0))
    with pytest.raises(UnsupportedCompressionTypeError):
        lg.append(_batch(0, 2, Compression.ZSTD))
    assert (lg.size_bytes, lg.log_end_offset) == (size, 1)
    lg.close()


def test_recovery_cuts_at_the_first_bad_entry_and_rebuilds_indexes(log_path):
    c = cfg(message_format_version="0.10.2", index_interval_bytes=64)
    lg = open_log(log_path, c)
    for i in range(6):
        lg.append(_batch(4 * i, 4, Compression.GZIP if i % 2 else Compression.NONE))
    seg = lg.active_segment
    lg.flush()
    lg.close()
    index_before = open(seg.log_path[:-4] + INDEX_SUFFIX, "rb").read()
    assert len(index_before) >= 16  # several entries: the rebuild has something to match
    # indexes deleted: rebuilt the same (trimmed) at the next open
    for ext in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
        os.unlink(seg.log_path[:-4] + ext)
    lg = open_log(log_path, c, recovery_point=0)
    assert lg.log_end_offset == 24
    lg.close()
    assert open(seg.log_path[:-4] + INDEX_SUFFIX, "rb").read() == index_before
    assert os.path.getsize(seg.log_path[:-4] + TIME_INDEX_SUFFIX) > 0
    # a flipped byte in the 5th wrapper (offsets 20-23, the last entry) and a torn tail
    data = bytearray(open(seg.log_path, "rb").read())
    r = scan_batches(bytes(data), legacy=True)
    last = int(r.positions[-1])
    data[last + 40] ^= 0x01
    with open(seg.log_path, "wb") as f:
        f.write(bytes(data) + b"\x00\x00\x00")
    lg = open_log(log_path, c, recovery_point=0)
    assert lg.log_end_offset == 20 and lg.size_bytes == last
    _, recs = _stored(lg)
    assert [r.offset for r in recs] == list(range(20))
    lg.append(_batch(0, 2))  # appends resume where the valid entries end
    assert lg.log_end_offset == 22
    lg.close()


def test_offset_for_timestamp_and_max_timestamp(log_path):
    lg = open_log(log_path, cfg(message_format_version="0.10.2"))
    lg.append(_batch(0, 3))
    lg.append(_batch(3, 3, Compression.SNAPPY))
    assert lg.offset_for_timestamp(T0 + 4) == (4, T0 + 4)
    assert lg.offset_for_timestamp(T0 + 1) == (1, T0 + 1)
    assert lg.offset_for_timestamp(T0 + 6) is None
    assert lg.active_segment.max_timestamp == T0 + 5
    lg.close()


def test_format_switch_keeps_both_parts_readable(log_path):
    lg = open_log(log_path, cfg(message_format_version="0.10.2"))
    lg.append(_batch(0, 3, Compression.GZIP))
    lg.config = cfg(message_format_version="3.0")
    lg.append(_batch(3, 2))
    lg.config = cfg(message_format_version="0.9.0")
    lg.append(_batch(5, 1))
    magics, recs = _stored(lg)
    assert magics == [1, 2, 0] and [r.offset for r in recs] == list(range(6))
    lg.close()
    lg = open_log(log_path, cfg(message_format_version="0.9.0"), recovery_point=0)
    assert lg.log_end_offset == 6 and _stored(lg)[0] == [1, 2, 0]
    lg.close()


def test_retention_and_delete_records_inside_a_wrapper(log_path):
    clock = Clock(T0 + 10_000)
    lg = open_log(log_path, cfg(message_format_version="0.10.2", segment_bytes=300,
                                retention_ms=5_000), clock)
    for i in range(6):
        lg.append(_batch(3 * i, 3, Compression.GZIP, ts=T0 if i < 3 else T0 + 9_000))
    bases = [s.base_offset for s in lg.segments()]
    assert bases[:3] == [0, 6, 12]  # two wrappers a segment
    assert lg.apply_retention(clock.now) == 1  # only the first segment is all old
    assert lg.log_start_offset == 6
    lg.high_watermark = lg.log_end_offset  # committed (a one-broker Partition's rule)
    lg.maybe_increment_log_start_offset(13)  # inside the wrapper of 12-14
    data = lg.read_bytes(13, 1 << 20)
    assert [m.offset for e in iter_entries(data) for m in e.messages][0] == 12  # the whole wrapper
    lg.close()


def test_follower_appends_legacy_entries_as_stored(tmp_path):
    leader = open_log(str(tmp_path / "t-0"), cfg(message_format_version="0.8.2"))
    leader.append(_batch(0, 2))
    leader.append(_batch(2, 3, Compression.GZIP))
    stored = leader.read_bytes(0, 1 << 20)
    follower = open_log(str(tmp_path / "f" / "t-0"), cfg(message_format_version="0.8.2"))
    info = follower.append(stored, assign_offsets=False)
    assert (info.first_offset, info.last_offset, follower.log_end_offset) == (0, 4, 5)
    assert follower.read_bytes(0, 1 << 20) == stored
    with pytest.raises(InvalidRecordError.__mro__[1]):  # a damaged copy: a Kafka error, nothing kept
        follower.append(stored[:-1] + bytes([stored[-1] ^ 1]), assign_offsets=False)
    assert follower.log_end_offset == 5
    leader.close()
    follower.close()
