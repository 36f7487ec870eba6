"""The last stable offset of a partition whose broker is not running (read_committed plans from
the checkpoint files): rebuilt from the producer snapshot and the batch headers after it, on
real segment files. No Spark session: the planner's catalog function alone."""

from __future__ import annotations

import os

from appliance.records.batch import build_batch
from spark.catalog import load_catalog
from spark.stable_offset import offline_stable_offset
from tests.storage.conftest import Clock
from tests.storage.test_cleaner import TOPIC, _open

PID = 77


def _txn(lg, seq: int, value: bytes) -> int:
    return lg.append(build_batch([(b"k", value)], producer_id=PID, producer_epoch=0,
                                 base_sequence=seq, is_transactional=True)).first_offset


def _checkpoint(d, lg) -> None:
    lg.high_watermark = lg.log_end_offset
    d.write_checkpoints()


def test_open_transaction_bounds_an_offline_read_committed_plan(tmp_path):
    clock = Clock()
    d, lg = _open(tmp_path, clock, **{"cleanup.policy": "delete"})
    lg.append(build_batch([(b"a", b"p0"), (b"a", b"p1")]))       # 0-1
    first = _txn(lg, 0, b"o0")                                      # 2 opens the transaction
    lg.roll()
    lg.append(build_batch([(b"a", b"p3")]))                        # 3
    _txn(lg, 1, b"o1")                                              # 4
    _checkpoint(d, lg)
    path = lg.path
    # no snapshot (as after a SIGKILL): the headers from the log start tell
    assert not [n for n in os.listdir(path) if n.endswith(".snapshot")]
    assert offline_stable_offset(path, 0, lg.high_watermark) == first == 2
    cat = load_catalog([str(tmp_path)], None, read_committed=True)
    s = cat.partitions[(TOPIC, 0)]
    assert (s.high_watermark, s.last_stable_offset, s.end) == (5, 2, 2)
    assert load_catalog([str(tmp_path)], None).partitions[(TOPIC, 0)].end == 5
    # a clean close writes the snapshot: the same answer from it, and past the log start
    d.close()
    assert [n for n in os.listdir(path) if n.endswith(".snapshot")]
    assert offline_stable_offset(path, 0, 5) == 2
    assert offline_stable_offset(path, 3, 5) == 3                # never below the log start
    d, lg = _open(tmp_path, clock)
    lg.append_marker(PID, 0, False, 0)                              # 5: ABORT
    lg.append(build_batch([(b"a", b"p6")]))                        # 6
    _checkpoint(d, lg)
    # the marker ends it; a high watermark below the marker still sees it open
    assert offline_stable_offset(path, 0, 7) == 7
    assert offline_stable_offset(path, 0, 5) == 2
    d.close()
    assert load_catalog([str(tmp_path)], None, read_committed=True).partitions[(TOPIC, 0)].end == 7
