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
