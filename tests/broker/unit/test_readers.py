"""A network worker's Readers: cached segment files and readers closed on its closer thread
(the last close of a deleted segment frees its page cache), after forget and at close."""

from __future__ import annotations

import os
import threading

from appliance.broker.readers import Readers
from appliance.records.batch import decode_records
from tests.storage.conftest import batch, cfg, open_log


def _open_fds() -> set[str]:
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            out.add(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass
    return out


def test_forget_and_close_hand_the_closes_to_the_thread(tmp_path):
    disk = tmp_path / "disk0"
    lg = open_log(str(disk / "t-0"), cfg(segment_bytes=2000))
    for _ in range(6):
        lg.append(batch(n=2, value_size=300))
    lg.close()
    readers = Readers([str(disk)])
    r = readers.reader(0, "t", 0)
    s = r.read(0, 1 << 20)
    assert [x.offset for x in decode_records(os.pread(s.fd, s.length, s.position))][:2] == [0, 1]
    f = readers.file(str(disk / "t-0" / "00000000000000000000.log"))
    seg_log = str(disk / "t-0" / "00000000000000000000.log")
    assert seg_log in _open_fds()
    readers.forget("t")
    assert any(t.name == "remover network worker readers" for t in threading.enumerate())
    assert readers.closer.wait_idle(10)
    assert f.closed and seg_log not in _open_fds()
    # a new reader, closed with the Readers: its closes are waited for
    readers.reader(0, "t", 0).read(0, 1 << 20)
    assert seg_log in _open_fds()
    readers.close()
    assert seg_log not in _open_fds()
