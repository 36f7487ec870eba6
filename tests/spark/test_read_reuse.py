"""read_range reuses its decode output arrays only for batches its consumer let go: batches kept
in a list stay intact, and a consumer that drops each batch gets reused arrays."""

from __future__ import annotations

import logging
import os

from appliance.config import TopicConfig
from appliance.records.batch import build_batch
from appliance.records.record_types import Record
from appliance.storage.log import PartitionLog
from spark.arrow_reader import read_range

N = 2000


def _value(i: int) -> bytes:
    return b"%06d-" % i + bytes([65 + i % 26]) * (i % 90)


def _write(tmp_path) -> str:
    path = os.path.join(tmp_path, "reuse-0")
    lg = PartitionLog.open(path, TopicConfig.defaults())
    for base in range(0, N, 50):
        lg.append(build_batch([Record(base + i, 1_700_000_000_000 + base + i,
                                      b"k%d" % (base + i), _value(base + i))
                               for i in range(50)], base_offset=base))
    lg.flush()
    lg.close()
    return path


def _rows(batches) -> list[tuple]:
    return [(o, k, v) for b in batches
            for o, k, v in zip(b.column("offset").to_pylist(), b.column("key").to_pylist(),
                               b.column("value").to_pylist(), strict=True)]


def test_kept_batches_stay_intact_and_dropped_ones_are_reused(tmp_path, caplog):
    path = _write(tmp_path)
    want = [(i, b"k%d" % i, _value(i)) for i in range(N)]
    kept = list(read_range(path, "reuse", 0, 0, N, chunk_bytes=8192))
    assert len(kept) > 10 and _rows(kept) == want
    caplog.set_level(logging.DEBUG, logger="spark.arrow_reader")
    seen = []
    for b in read_range(path, "reuse", 0, 0, N, chunk_bytes=8192):
        seen += _rows([b])  # copies out; the batch is dropped at the next step
    assert seen == want
    line = [r.getMessage() for r in caplog.records if "reused" in r.getMessage()]
    reused, allocated = (int(w) for w in line[-1].split() if w.isdigit())
    assert reused > allocated > 0
