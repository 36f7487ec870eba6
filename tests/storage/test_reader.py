"""LogReader: a read-only view that follows the writer's appends, rolls and deletions."""

from __future__ import annotations

import os

import pytest

from appliance.errors import OffsetOutOfRangeError
from appliance.records.batch import decode_records
from appliance.storage.reader import LogReader

from .conftest import batch, cfg, open_log


def test_reader_follows_appends_rolls_and_deletes(log_path, clock):
    b = batch(n=2, value_size=100)
    lg = open_log(log_path, cfg(segment_bytes=len(b) * 3, retention_ms=0,
                                file_delete_delay_ms=10**9), clock)
    lg.append(b)
    r = LogReader(log_path, retire_delay_s=0)
    assert [x.offset for x in decode_records(r.read_bytes(0, 1 << 20))] == [0, 1]
    assert r.read(2, 1 << 20) is None  # nothing yet
    for _ in range(8):
        lg.append(b)
    got, off = [], 0
    while True:
        data = r.read_bytes(off, 1 << 20)
        if not data:
            break
        recs = decode_records(data)
        got += [x.offset for x in recs]
        off = recs[-1].offset + 1
    assert got == list(range(18))
    # the high watermark bound
    s = r.read(0, 1 << 20, max_offset=2)
    assert [x.offset for x in decode_records(os.pread(s.fd, s.length, s.position))] == [0, 1]
    held = r.read(0, 1 << 20)
    lg.append(b)
    lg.apply_retention(10**12)  # deletes every closed segment (renamed .deleted)
    assert os.pread(held.fd, held.length, held.position)[:8] == b"\x00" * 8  # base offset 0
    with pytest.raises(OffsetOutOfRangeError):
        r.read(0, 100)
    first = lg.segments()[0].base_offset
    assert first == lg.log_end_offset == 20  # everything expired; the active one was rolled
    lg.append(b)
    assert decode_records(r.read_bytes(first, 1 << 20))[0].offset == first
    r.close()


def test_reader_without_index_files(log_path):
    lg = open_log(log_path, cfg(index_interval_bytes=50))
    for i in range(20):
        lg.append(batch(n=2, ts=i))
    lg.close()
    os.unlink(os.path.join(log_path, f"{0:020d}.index"))
    r = LogReader(log_path)
    assert decode_records(r.read_bytes(33, 1))[0].offset == 32
    r.close()


def _stamped(timestamps: list[int], compression=None) -> bytes:
    from appliance.records.batch import build_batch
    from appliance.records.record_types import Record

    kw = {} if compression is None else {"compression": compression}
    return build_batch([Record(i, ts, b"k", b"v%d" % i) for i, ts in enumerate(timestamps)], **kw)


def test_max_timestamp_finds_the_first_record_with_the_largest_timestamp(log_path):
    """ListOffsets' MAX_TIMESTAMP (KIP-734): over segments and compressed batches, the first
    record (lowest offset) among equal largest timestamps, within [log_start, bound)."""
    from appliance.records.compression import Compression

    lg = open_log(log_path, cfg(segment_bytes=200))  # a roll every batch or two
    r = LogReader(log_path)
    assert r.max_timestamp() is None  # empty
    lg.append(_stamped([10, 50, 30]))                     # offsets 0-2
    lg.append(_stamped([20, 50], Compression.GZIP))       # 3-4: ties with offset 1
    lg.append(_stamped([5, 70, 70, 1], Compression.LZ4))  # 5-8: the largest at 6
    lg.append(_stamped([40]))                             # 9
    assert len(lg.segments()) > 1
    assert r.max_timestamp() == (6, 70)
    assert r.max_timestamp(0, 6) == (1, 50)    # bound: offsets 6 and above not readable
    assert r.max_timestamp(2, 6) == (4, 50)    # log start past offset 1
    assert r.max_timestamp(7, 100) == (7, 70)  # inside the batch
    assert r.max_timestamp(9, 10) == (9, 40)
    assert r.max_timestamp(10, 10) is None
    r.close()
    lg.close()


def test_a_tail_reader_resumes_where_it_stopped_and_a_rewrite_under_it_is_noticed(log_path):
    # a reader following the tail (a follower's fetch) resumes at the batch after its last
    # slice without re-counting the offset index; a writer that cut the file and wrote other
    # batches over that position since (a follower's truncation) sends it through the index.
    # Batches of ~30 KB: a tail up to 64 KB is pread, a longer one read through the mapping
    def offsets(s):
        return [x.offset for x in decode_records(os.pread(s.fd, s.length, s.position))]

    lg = open_log(log_path, cfg(index_interval_bytes=1))
    for _ in range(3):
        lg.append(batch(n=2, value_size=15000))  # offsets 0-5
    r = LogReader(log_path)
    assert offsets(r.read(0, 1 << 20)) == list(range(6))
    lg.append(batch(n=2, value_size=15000))  # 6-7, where the last read ended
    assert offsets(r.read(6, 1 << 20)) == [6, 7]
    assert r._list.active.index_stale  # served without re-counting the index
    for _ in range(3):
        lg.append(batch(n=2, value_size=15000))  # 8-13: ~90 KB, through the mapping
    assert offsets(r.read(8, 1 << 20)) == list(range(8, 14))
    assert offsets(r.read(8, 1 << 20, max_offset=10)) == [8, 9]  # the high watermark bound
    assert r._list.active.index_stale
    lg.truncate_to(2)
    lg.append(batch(n=8, value_size=8000))  # 2-9: one batch across the old positions of 4 and 6
    assert offsets(r.read(6, 1 << 20)) == list(range(2, 10))
    lg.truncate_to(2)
    lg.append(batch(n=4, value_size=14000))  # 2-5
    lg.append(batch(n=2, value_size=15000))  # 6-7 again, starting inside where it was
    assert offsets(r.read(6, 1 << 20)) == [6, 7]
    # a whole batch where the hint for 8 points (where 6-7 ended), but not the one it names
    size = len(batch(n=2, value_size=15000))
    single = next(b for v in range(size - 200, size) if len(b := batch(n=1, value_size=v)) == size)
    lg.truncate_to(2)
    lg.append(batch(n=4, value_size=14000))  # 2-5, as before
    lg.append(single)  # 6, where 6-7 was
    lg.append(single)  # 7, where 6-7 ended
    assert r.read(8, 1 << 20) is None  # not written yet
    r.close()
    lg.close()


def test_retired_and_closed_segments_go_to_close_segment(log_path, clock):
    """A network worker closes segments on a thread (the last close of a deleted one frees its
    page cache): the reader hands every close to ``close_segment``, none inline."""
    b = batch(n=2, value_size=100)
    lg = open_log(log_path, cfg(segment_bytes=len(b) * 3, retention_ms=0,
                                file_delete_delay_ms=10**9), clock)
    for _ in range(6):
        lg.append(b)
    handed: list = []
    r = LogReader(log_path, retire_delay_s=1000, close_segment=handed.append)
    off = 0
    while data := r.read_bytes(off, 1 << 20):
        off = decode_records(data)[-1].offset + 1
    assert off == 12
    opened = [s for s in r._list if s.files_open]
    assert len(opened) == len(lg.segments()) == 2
    lg.append(b)
    lg.apply_retention(10**12)  # every closed segment renamed .deleted: the reader retires them
    r.retire_delay_s = 0
    r.refresh()
    assert handed == opened  # both deleted, retired and due: handed over, in order
    assert all(s.files_open for s in handed)  # not closed by the reader itself
    lg.append(b)  # into the segment retention rolled to
    assert [x.offset for x in decode_records(r.read_bytes(14, 1 << 20))] == [14, 15]
    newest = [s for s in r._list if s.files_open]
    assert len(newest) == 1
    r.close()
    assert handed == opened + newest  # and the open one at close
    for s in handed:
        s.close(trim=False)
    lg.close()
